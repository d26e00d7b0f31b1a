"""Settings a Connect client can set feed nothing, and Spark runs the text the gateway
checked (issue 24): `${...}` references stay text in SQL, selectExpr and filter strings;
`spark.remote` is answered by the gateway and never stored in the backend; settable
settings take booleans and numbers only; no secret setting is readable; and the verifier
analyses the plan in the backend session that runs it (a session whose governed settings
changed is refused)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

REFERENCES = (
    "${env:HOME}",
    "${system:user.name}",
    "${spark.app.name}",
    "${sparkconf:spark.app.name}",
    "${spark.remote}",
    "${spark.hadoop.fs.azure.account.key.lgtest.dfs.core.windows.net}",
)
AZURE_KEY = "spark.hadoop.fs.azure.account.key.lgtest.dfs.core.windows.net"


def _backend_conf(lg: Any, user: str, s: Any) -> Any:
    """The SQLConf of the backend session behind the stock client session `s`."""
    jvm = lg.spark._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    companion = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.connect.service.SparkConnectService$", True, loader
    )
    service = companion.getField("MODULE$").get(None)  # both lines' session lookup
    holder = service.getOrCreateIsolatedSession(user, s.client._session_id)
    return holder.session().sessionState().conf()


def _injection(lg: Any) -> str:
    customers = lg.catalog.table("main", "sales", "customers").location
    return f"x' AS a UNION ALL SELECT email FROM delta.`{customers}` --"


def _refusal(e: pytest.ExceptionInfo) -> str:
    return str(e.value).strip()


def test_spark_remote_is_answered_by_the_gateway_never_stored(remote, connect_lakegate) -> None:
    s = remote("carol")
    s.conf.set("spark.remote", _injection(connect_lakegate))
    rows = s.sql("SELECT '${spark.remote}' AS a").collect()
    assert [tuple(r) for r in rows] == [("${spark.remote}",)]
    assert not _backend_conf(connect_lakegate, "carol", s).contains("spark.remote")
    assert s.conf.get("spark.remote") is None
    assert s.conf.get("spark.remote", "fallback") == "fallback"
    assert s.conf.isModifiable("spark.remote") is True


def test_references_in_sql_stay_text(remote, connect_lakegate) -> None:
    s = remote("carol")
    s.conf.set("spark.remote", _injection(connect_lakegate))
    _backend_conf(connect_lakegate, "carol", s).setConfString(AZURE_KEY, "azure-secret-key")
    query = "SELECT " + ", ".join(f"'{r}' AS c{i}" for i, r in enumerate(REFERENCES))
    assert tuple(s.sql(query).collect()[0]) == REFERENCES


def test_references_in_select_expr_and_filter_strings_stay_text(remote, connect_lakegate):
    s = remote("carol")
    s.conf.set("spark.remote", _injection(connect_lakegate))
    exprs = [f"'{r}' AS c{i}" for i, r in enumerate(REFERENCES)]
    assert tuple(s.range(1).selectExpr(*exprs).collect()[0]) == REFERENCES
    assert s.range(3).filter("'${spark.app.name}' = 'lakegate'").count() == 0


def test_references_in_a_schema_string_stay_text(remote) -> None:
    s = remote("carol")
    df = s.createDataFrame([(1, 2)], "`${spark.app.name}` INT, `${system:user.name}` INT")
    assert df.columns == ["${spark.app.name}", "${system:user.name}"]


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("spark.sql.repl.eagerEval.maxNumRows", "1' UNION ALL SELECT 1 --", "a whole number"),
        ("spark.sql.repl.eagerEval.enabled", "${env:HOME}", "true or false"),
        ("spark.sql.execution.arrow.maxRecordsPerBatch", "10 OR 1=1", "a whole number"),
    ],
)
def test_settable_settings_take_only_booleans_and_numbers(remote, key, value, kind) -> None:
    with pytest.raises(SparkConnectGrpcException) as e:
        remote("carol").conf.set(key, value)
    assert _refusal(e).endswith(f"configuration {key} takes {kind}; refused")


def test_settable_settings_keep_their_values(remote) -> None:
    s = remote("carol")
    s.conf.set("spark.sql.repl.eagerEval.maxNumRows", 7)
    s.conf.set("spark.sql.repl.eagerEval.enabled", True)
    assert s.conf.get("spark.sql.repl.eagerEval.maxNumRows") == "7"
    assert s.conf.get("spark.sql.repl.eagerEval.enabled") == "true"


@pytest.mark.parametrize(
    "key", ["spark.hadoop.fs.s3a.secret.key", AZURE_KEY, "spark.sql.variable.substitute"]
)
def test_secret_and_governed_settings_are_not_readable_or_settable(remote, key) -> None:
    s = remote("carol")
    with pytest.raises(SparkConnectGrpcException) as e:
        s.conf.get(key)
    assert _refusal(e).endswith(
        f"configuration {key} is not on the gateway's allow-list for get; refused"
    )
    with pytest.raises(SparkConnectGrpcException) as e:
        s.conf.set(key, "true")
    assert _refusal(e).endswith(
        f"configuration {key} is not on the gateway's allow-list for set; refused"
    )


def test_a_backend_session_whose_settings_changed_is_refused(remote, connect_lakegate) -> None:
    """The verifier analyses in the backend session that runs the plan: a reference only
    that session could resolve (and substitution turned on there behind the gateway's back)
    is refused, not verified in another session and run in this one."""
    s = remote("carol")
    assert s.sql("SELECT 1 AS a").collect()[0].a == 1
    conf = _backend_conf(connect_lakegate, "carol", s)
    conf.setConfString("lg.injected", _injection(connect_lakegate))
    conf.setConfString("spark.sql.variable.substitute", "true")
    with pytest.raises(SparkConnectGrpcException) as e:
        s.sql("SELECT '${lg.injected}' AS a").collect()
    assert _refusal(e).endswith(
        "Spark setting spark.sql.variable.substitute was changed in the backend session; "
        "Lakegate governs it (it is put back); statement refused"
    )
    assert conf.getConfString("spark.sql.variable.substitute") == "false"
    assert [tuple(r) for r in s.sql("SELECT '${lg.injected}' AS a").collect()] == [
        ("${lg.injected}",)
    ]


def test_a_read_of_settings_no_caller_can_set_reaches_the_backend_once_per_session(
    remote, gateway, monkeypatch
) -> None:
    """The stock client reads the same settings around every collect; the gateway answers a
    repeated read of keys no caller can set from the session's first answer (the backend's),
    while a settable key is read from the backend every time and shows what was set."""
    asked: list[str] = []
    real = gateway.service.stub.Config

    def counting(request: Any, **kw: Any) -> Any:
        asked.append(request.session_id)
        return real(request, **kw)

    monkeypatch.setattr(gateway.service.stub, "Config", counting)
    s, other = remote("erin"), remote("erin")
    sid, other_sid = s.client._session_id, other.client._session_id
    zone = "spark.sql.session.timeZone"
    first = s.conf.get(zone)
    assert first and sid in asked
    after_first = asked.count(sid)
    assert [s.conf.get(zone) for _ in range(3)] == [first] * 3
    assert asked.count(sid) == after_first  # answered from the session's first answer
    assert other.conf.get(zone) == first and other_sid in asked  # its own backend session
    batch = "spark.sql.execution.arrow.maxRecordsPerBatch"
    for value in ("1000", "2000"):
        s.conf.set(batch, value)
        assert s.conf.get(batch) == value
    assert asked.count(sid) == after_first + 4  # two sets, two reads of a settable key


def test_a_session_remembers_at_most_max_remembered_reads() -> None:
    """The readable prefixes admit endless keys: past MAX_REMEMBERED distinct reads a
    session's reads are forwarded every time, so a client cannot grow the gateway's memory."""
    from pyspark.sql.connect.proto import base_pb2

    from api.connect.settings import MAX_REMEMBERED, checked_keys, config_answer

    memo: dict[bytes, Any] = {}
    forwarded: list[str] = []

    def backend(key: str) -> Any:
        forwarded.append(key)
        return base_pb2.ConfigResponse(session_id="s", pairs=[base_pb2.KeyValue(key=key)])

    for _ in range(2):
        for i in range(MAX_REMEMBERED + 5):
            key = f"spark.sql.repl.k{i}"
            op = base_pb2.ConfigRequest.Operation(get=base_pb2.ConfigRequest.Get(keys=[key]))
            keys = checked_keys("get", op.get)
            answer = config_answer(op, "get", keys, memo, "s", lambda k=key: backend(k))
            assert [p.key for p in answer.pairs] == [key]
    assert len(memo) == MAX_REMEMBERED
    assert len(forwarded) == MAX_REMEMBERED + 5 * 2
