"""Every route to data around the policies is refused with one line, and audited."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from connect_testkit import audit_lines, token_of


def _udf(s: Any) -> Any:
    from pyspark.sql.connect.functions import udf

    return s.range(3).select(udf(lambda x: x + 1, "long")("id")).collect()


def _metadata(s: Any) -> Any:
    return s.table("main.sales.orders").select("_metadata").collect()


def _input_file(s: Any) -> Any:
    from pyspark.sql.connect import functions as F

    return s.table("main.sales.orders").select(F.input_file_name()).collect()


def _spark_4_function(s: Any) -> Any:
    """A DataFrame call of a function Spark 4 added that fails with a row's value."""
    from pyspark.sql.connect import functions as F

    return s.table("main.sales.orders").select(F.call_function("validate_utf8", "region")).collect()


REFUSALS: list[tuple[str, Callable[[Any], Any], str]] = [
    ("path read parquet", lambda s: s.read.parquet("/tmp").collect(), "path reads"),
    (
        "path read format load",
        lambda s: s.read.format("delta").load("/tmp/x").collect(),
        "path reads",
    ),
    ("path read json", lambda s: s.read.json("/tmp/x.json").collect(), "path reads"),
    ("python udf", _udf, "UDFs are refused"),
    ("udf registration", lambda s: s.udf.register("f", lambda x: x, "long"), "UDFs are refused"),
    (
        "mapInPandas",
        lambda s: s.range(2).mapInPandas(lambda it: it, "id long").collect(),
        "Python UDFs",
    ),
    ("artifacts", lambda s: s.addArtifacts(__file__, pyfile=True), "artifacts"),
    (
        "config outside the allow-list",
        lambda s: s.conf.set("spark.sql.ansi.enabled", "true"),
        "allow-list",
    ),
    (
        "session time zone",
        lambda s: s.conf.set("spark.sql.session.timeZone", "UTC+10"),
        "allow-list",
    ),
    ("catalog listing", lambda s: s.catalog.listTables("main.sales"), "catalog calls"),
    (
        "catalog table location",
        lambda s: s.catalog.listColumns("main.sales.orders"),
        "catalog calls",
    ),
    (
        "expression string reading a table",
        lambda s: (
            s.range(1).selectExpr("(SELECT max(amount) FROM main.sales.orders) AS m").collect()
        ),
        "may not read tables",
    ),
    (
        "filter string reading a table",
        lambda s: s.range(1).filter("id IN (SELECT id FROM main.sales.orders)").collect(),
        "may not read tables",
    ),
    ("_metadata column", _metadata, "metadata columns"),
    ("input_file_name()", _input_file, "input_file_name"),
    (
        "reflect in an expression string",
        lambda s: s.range(1).selectExpr("reflect('java.lang.System', 'getenv', 'HOME')").collect(),
        "reflect",
    ),
    (
        "Spark 4 function failing with a value",
        _spark_4_function,
        "function validate_utf8() is refused through the Lakegate gateway",
    ),
    (
        "global temp view",
        lambda s: s.table("main.sales.orders").createOrReplaceGlobalTempView("v"),
        "global temporary views",
    ),
    (
        "DataFrame saveAsTable of a new table",
        lambda s: s.table("main.sales.orders").write.saveAsTable("main.sales.copy"),
        "spark.sql('CREATE TABLE ...') first",
    ),
    (
        "DataFrame path write",
        lambda s: s.table("main.sales.orders").write.format("delta").save("/tmp/lg-never"),
        "path writes",
    ),
    ("explain", lambda s: s.table("main.sales.orders").explain(), "explain is refused"),
    ("inputFiles", lambda s: s.table("main.sales.orders").inputFiles(), "input_files"),
    (
        "SQL path read",
        lambda s: s.sql("SELECT * FROM delta.`/tmp/x`").collect(),
        "path-based table reference delta.`...` is not allowed",
    ),
    ("SQL SET", lambda s: s.sql("SET spark.sql.ansi.enabled=true"), "not governed"),
    (
        "audit table through connect",
        lambda s: s.sql("SELECT * FROM system.access.audit").collect(),
        "user erin has no SELECT privilege on table system.access.audit",
    ),
]


@pytest.mark.parametrize(("name", "action", "why"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bypass_routes_are_refused_with_one_line(remote, name, action, why) -> None:
    assert why, "every refusal names the reason it expects"
    with pytest.raises(Exception) as e:
        action(remote("erin"))
    text = str(e.value)
    assert why in text, text
    if type(e.value).__name__ == "SparkConnectGrpcException":
        assert "\n" not in text.strip(), text  # one line


def test_refusals_are_audited_before_the_answer(remote, audit_dir) -> None:
    s = remote("erin")
    with pytest.raises(Exception, match="path reads"):
        s.read.parquet("/tmp/never").collect()
    lines = [
        ln
        for ln in audit_lines(audit_dir)
        if ln.get("proto") == "connect"
        and ln.get("cmd") == "executePlan"
        and ln.get("allowed") == "false"
        and "path reads" in ln.get("reason", "")
    ]
    assert lines and lines[-1]["ugi"].startswith("erin ")


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.sql("SELECT * FROM system.access.audit").collect(),
        lambda s: s.table("system.access.audit").collect(),
    ],
    ids=["sql", "table"],
)
def test_audit_table_is_not_readable_through_connect_even_by_auditors(remote, read) -> None:
    """frank may read the audit table (REST, CLI) but not through Connect."""
    with pytest.raises(Exception, match=r"system\.access\.audit is not readable through Spark"):
        read(remote("frank"))


def test_unknown_relation_types_are_refused() -> None:
    """A hand-made plan with a relation type off the allow-list (no client API sends it)."""
    from pyspark.sql.connect.proto import relations_pb2

    from api.connect.relations import PlanGovernor
    from governance.errors import Refused

    rel = relations_pb2.Relation()
    rel.unknown.SetInParent()
    gov = PlanGovernor.__new__(PlanGovernor)
    with pytest.raises(Refused, match="relation type unknown is not governed"):
        gov._relation(rel, 0)


@pytest.mark.parametrize("token", ["", "wrong-token", token_of("nobody")])
def test_wrong_or_missing_token_is_unauthenticated(gateway, token, audit_dir) -> None:
    import grpc
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    def anonymous() -> list[dict[str, str]]:
        """The gateway's lines for unauthenticated calls (other clients' background calls
        may write after this call's line, so the last line of all is not necessarily it)."""
        return [
            ln
            for ln in audit_lines(audit_dir)
            if ln.get("proto") == "connect" and ln.get("ugi", "").startswith("anonymous ")
        ]

    before = len(anonymous())
    creds = grpc.ssl_channel_credentials(
        root_certificates=(audit_dir.parent / "tls" / "ca.pem").read_bytes()
    )
    with grpc.secure_channel(f"127.0.0.1:{gateway.port}", creds) as ch:
        stub = base_pb2_grpc.SparkConnectServiceStub(ch)
        req = base_pb2.AnalyzePlanRequest(
            session_id="00000000-0000-4000-8000-000000000000",
            spark_version=base_pb2.AnalyzePlanRequest.SparkVersion(),
        )
        req.user_context.user_id = "erin"
        meta = [("authorization", f"Bearer {token}")] if token else []
        with pytest.raises(grpc.RpcError) as e:
            stub.AnalyzePlan(req, metadata=meta)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    new = anonymous()[before:]
    assert [ln["allowed"] for ln in new] == ["false"]


def test_backend_is_reachable_only_with_the_gateway_secret(gateway) -> None:
    import grpc
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    host, _, _ = gateway.backend.target.partition(":")
    assert host == "127.0.0.1"
    with grpc.insecure_channel(gateway.backend.target) as ch:
        stub = base_pb2_grpc.SparkConnectServiceStub(ch)
        req = base_pb2.AnalyzePlanRequest(
            session_id="00000000-0000-4000-8000-000000000001",
            spark_version=base_pb2.AnalyzePlanRequest.SparkVersion(),
        )
        req.user_context.user_id = "root"
        for meta in ([], [("authorization", "Bearer guess")]):
            with pytest.raises(grpc.RpcError) as e:
                stub.AnalyzePlan(req, metadata=meta)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_verifier_refuses_a_composed_plan_reading_outside_its_views(
    gateway, connect_lakegate
) -> None:
    """The verifier's guarantee on this path: a governed view joined with a raw read of the
    same table (as a parser differential might smuggle in) is refused after analysis in
    the backend session."""
    import uuid

    from pyspark.sql.connect.proto import relations_pb2

    from api.connect.relations import PlanGovernor
    from governance.errors import Refused

    gov = PlanGovernor(connect_lakegate.session("carol"))
    governed = gov.relation(
        relations_pb2.Relation(
            read=relations_pb2.Read(
                named_table=relations_pb2.Read.NamedTable(unparsed_identifier="main.sales.orders")
            )
        )
    )
    gov.verify(governed, gateway.backend, str(uuid.uuid4()))  # the governed view verifies
    location = connect_lakegate.catalog.table("main", "sales", "orders").location
    raw = relations_pb2.Relation(
        sql=relations_pb2.SQL(query="SELECT * FROM delta.`" + location.replace("`", "``") + "`")
    )
    smuggled = relations_pb2.Relation()
    smuggled.set_op.left_input.CopyFrom(governed)
    smuggled.set_op.right_input.CopyFrom(raw)
    smuggled.set_op.set_op_type = relations_pb2.SetOperation.SET_OP_TYPE_UNION
    with pytest.raises(Refused, match="plan verification"):
        gov.verify(smuggled, gateway.backend, str(uuid.uuid4()))


def test_release_of_a_refused_statement_is_answered_by_the_gateway(gateway, audit_dir) -> None:
    """A refused statement never reached the backend: the client's ReleaseExecute of its
    operation (every reattachable client sends one) is answered here, not forwarded to a
    backend that has no such operation (Spark 3.5 answers that with an error the client
    prints as a warning)."""
    import uuid

    import grpc
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    session_id, op_id = str(uuid.uuid4()), str(uuid.uuid4())
    creds = grpc.ssl_channel_credentials(
        root_certificates=(audit_dir.parent / "tls" / "ca.pem").read_bytes()
    )
    meta = [("authorization", f"Bearer {token_of('carol')}")]
    with grpc.secure_channel(f"127.0.0.1:{gateway.port}", creds) as ch:
        stub = base_pb2_grpc.SparkConnectServiceStub(ch)
        run = base_pb2.ExecutePlanRequest(session_id=session_id, operation_id=op_id)
        run.user_context.user_id = "carol"
        run.plan.root.read.data_source.format = "json"  # a path read: refused
        run.plan.root.read.data_source.paths.append("/etc/passwd")
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.ExecutePlan(run, metadata=meta))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        release = base_pb2.ReleaseExecuteRequest(session_id=session_id, operation_id=op_id)
        release.user_context.user_id = "carol"
        release.release_all.SetInParent()
        answer = stub.ReleaseExecute(release, metadata=meta)
    assert (answer.session_id, answer.operation_id) == (session_id, op_id)


def test_operations_answered_here_are_remembered_up_to_a_bound(gateway, monkeypatch) -> None:
    """A client that never releases its refused or locally answered operations cannot
    grow the gateway's memory: past the bound the oldest are dropped."""
    from api.connect import commands
    from api.connect.call import Call

    monkeypatch.setattr(commands, "LOCAL_OPS_KEPT", 3)
    service = gateway.service
    call = Call("executePlan", "mallory", "127.0.0.1", "00000000-0000-4000-8000-00000000000a")
    ops = [f"op-{i}" for i in range(5)]
    for op in ops:
        service._answered_here(call, op)
    mine = [k[2] for k in service._local_ops if k[0] == "mallory"]
    assert mine == ops[-3:]


def test_only_release_all_reaches_the_backend(remote, gateway, monkeypatch) -> None:
    """The stock client sends a `release_until` after every batch of a result; the gateway
    answers those itself (Spark bounds what it keeps for a reattach on its own) and forwards
    the operation's `release_all`, which ends it in the backend."""
    import time

    forwarded: list[str] = []
    real = gateway.service.stub.ReleaseExecute

    def counting(request, **kw):  # type: ignore[no-untyped-def]
        forwarded.append(request.WhichOneof("release"))
        return real(request, **kw)

    monkeypatch.setattr(gateway.service.stub, "ReleaseExecute", counting)
    s = remote("carol")
    s.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1")  # a batch per row
    assert len(s.sql("SELECT id FROM main.sales.orders").collect()) > 1
    deadline = time.monotonic() + 10  # the client releases in the background
    while "release_all" not in forwarded and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forwarded == ["release_all"]
