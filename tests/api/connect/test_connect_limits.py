"""One user cannot starve the others (issue 24, item 6): Connect statements get the REST
API's timeout and row limit (or the `connect:` section's), a per-user concurrency limit,
and cancellation (timeout, interrupt) that cancels the backend's Spark jobs and frees the
cores. Outcomes only: which statement is refused or cancelled, which one answers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from connect_testkit import active_jobs, audit_lines

ORDERS = "SELECT id, region FROM main.sales.orders"


# Each test that cancels statements is bounded, so a hang fails it rather than holding CI.
# (The hang seen in session 8 was the stock client's own: a Connect SparkSession collected by
# the GC while another thread held its reattach lock; connect_testkit.kept prevents it.)
bounded = pytest.mark.timeout(300)


def _runaway(s: Any) -> Any:
    """A query that keeps both cores busy for hours."""
    return s.range(0, 10**13, 1, 2).selectExpr("sum(id * 7 % 13) AS x").collect()


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as e:  # the test asserts on it
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _until(check: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for a state the test needs before its next step."""
    import time

    for _ in range(600):
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"never happened: {what}")


def test_connect_limits_default_to_the_rest_api_limits(gateway, connect_lakegate) -> None:
    api = connect_lakegate.config.api
    assert gateway.service.limits.timeout == api.timeout
    assert gateway.service.limits.row_limit == api.row_limit


@bounded
def test_a_runaway_query_is_cancelled_at_the_timeout_and_another_users_query_answers(
    limited_gateway, spark, embedded, audit_dir
) -> None:
    import time

    _, connect = limited_gateway(statement_timeout=20.0)
    erin, carol = connect("erin"), connect("carol")
    t, out = _in_thread(lambda: _runaway(erin))
    _until(lambda: bool(active_jobs(spark)), "the runaway query's job started")
    # carol asks while erin's query holds both cores, late enough in erin's budget that
    # hers (the same timeout) outlasts it: she waits for the cancellation, not her own
    time.sleep(10)
    got = sorted((tuple(r) for r in carol.sql(ORDERS).collect()), key=repr)
    assert got == embedded("carol", ORDERS)
    t.join(300)
    assert "error" in out, out
    assert "statement timed out after 20 s (connect.statement_timeout)" in str(out["error"])
    _until(lambda: not active_jobs(spark), "the runaway query's jobs were cancelled")
    line = [ln for ln in audit_lines(audit_dir) if "statement_timeout" in ln.get("reason", "")]
    assert line and line[-1]["ugi"].startswith("erin ") and line[-1]["succeeded"] == "false"


@bounded
def test_the_third_concurrent_statement_of_one_user_is_refused_and_interrupt_frees_the_cores(
    limited_gateway, spark, embedded
) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    # no queue and no retry delay: refused at once, and a Spark 4 client raises it at once
    gw, connect = limited_gateway(
        max_statements_per_user=2,
        statement_timeout=3600.0,
        statement_queue_wait=0.0,
        busy_retry_delay=0.0,
    )
    first, second, third = connect("erin"), connect("erin"), connect("erin")
    runs = [_in_thread(lambda s=s: _runaway(s)) for s in (first, second)]
    _until(lambda: gw.service.limits.count("erin") == 2, "erin's two statements run")
    with pytest.raises(SparkConnectGrpcException, match=r"connect\.max_statements_per_user") as e:
        third.range(3).collect()
    assert str(e.value).startswith("busy: user erin already runs 2 Spark Connect statements")
    carol = connect("carol")
    for s in (first, second):
        s.interruptAll()
    for t, out in runs:
        t.join(300)
        assert "error" in out, out
    _until(lambda: not active_jobs(spark), "the interrupted queries' jobs were cancelled")
    assert gw.service.limits.count("erin") == 0
    got = sorted((tuple(r) for r in carol.sql(ORDERS).collect()), key=repr)
    assert got == embedded("carol", ORDERS)
    assert [r.id for r in third.range(3).collect()] == [0, 1, 2]


def test_a_result_over_the_row_limit_is_refused(limited_gateway, audit_dir) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    gw, connect = limited_gateway(row_limit=5)
    s = connect("erin")
    assert [r.id for r in s.range(5).collect()] == [0, 1, 2, 3, 4]
    with pytest.raises(SparkConnectGrpcException, match=r"more than 5 rows \(connect.row_limit\)"):
        s.range(6).collect()
    assert s.range(100).count() == 100  # an aggregate's one row is within the limit
    line = [ln for ln in audit_lines(audit_dir) if "connect.row_limit" in ln.get("reason", "")]
    assert line and line[-1]["ugi"].startswith("erin ")
    _until(lambda: gw.service.limits.count("erin") == 0, "every statement's slot is free")


def test_connect_limits_are_read_from_lakegate_yaml(tmp_path: Path) -> None:
    from governance.config import Config
    from governance.errors import ConfigError

    path = tmp_path / "lakegate.yaml"
    path.write_text(
        "connect:\n  statement_timeout: 30\n  row_limit: 500\n  max_statements_per_user: 3\n"
        "  max_sessions_per_user: 5\n  max_sessions: 50\n  session_idle_timeout: 900\n"
    )
    c = Config.load(path).connect
    assert (c.statement_timeout, c.row_limit, c.max_statements_per_user) == (30.0, 500, 3)
    assert (c.max_sessions_per_user, c.max_sessions, c.session_idle_timeout) == (5, 50, 900.0)
    path.write_text("connect:\n  max_sessions: 500\n")
    with pytest.raises(ConfigError, match=r"'connect\.max_sessions' must be a number from 1"):
        Config.load(path)
    path.write_text("connect:\n  max_statements_per_user: 0\n")
    with pytest.raises(ConfigError, match=r"'connect\.max_statements_per_user' must be positive"):
        Config.load(path)


@bounded
def test_with_fair_share_slots_a_users_second_statement_is_refused_while_another_user_is_active(
    limited_gateway, spark, embedded
) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    gw, connect = limited_gateway(
        fair_share_slots=2,
        fair_share_window=600.0,
        statement_timeout=3600.0,
        statement_queue_wait=0.0,
        busy_retry_delay=0.0,
    )
    carol, first, second = connect("carol"), connect("erin"), connect("erin")
    got = sorted((tuple(r) for r in carol.sql(ORDERS).collect()), key=repr)
    assert got == embedded("carol", ORDERS)  # carol is active (her window) from now on
    # one task of erin's, holding one of the two cores
    run = _in_thread(lambda: first.range(0, 10**13, 1, 1).selectExpr("sum(id % 13)").collect())
    _until(lambda: gw.service.limits.count("erin") == 1, "erin's statement runs")
    with pytest.raises(SparkConnectGrpcException, match=r"connect\.fair_share_slots \(2\)") as e:
        second.range(3).collect()
    assert str(e.value).startswith("busy: user erin already runs 1 Spark Connect statements")
    first.interruptAll()
    run[0].join(300)
    assert "error" in run[1], run[1]
    _until(lambda: not active_jobs(spark), "the interrupted query's jobs were cancelled")
    assert [r.id for r in second.range(3).collect()] == [0, 1, 2]


@bounded
def test_a_busy_answer_asks_for_a_retry_and_a_stock_spark4_client_waits_then_runs(
    limited_gateway, spark, audit_dir
) -> None:
    """connect.busy_retry_delay: the busy answer carries gRPC's RetryInfo, so Spark 4's stock
    client waits and sends the statement again itself (its reattach is answered "not found"
    here, then it sends the ExecutePlan again) instead of raising. Every refusal is on
    record; once a slot is free the statement runs, and from then on its operation is the
    backend's (its release is forwarded, no longer answered here)."""
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.skip("Spark 3.5's client does not read RetryInfo: it raises the busy answer")
    gw, connect = limited_gateway(
        max_statements_per_user=1,
        statement_timeout=3600.0,
        statement_queue_wait=0.0,  # refused at once (the default queue would wait 30 s)
        busy_retry_delay=1.0,
    )
    first, second = connect("erin"), connect("erin")
    runaway = _in_thread(lambda: _runaway(first))
    _until(lambda: gw.service.limits.count("erin") == 1, "erin's first statement runs")
    sid = second.client._session_id
    waiting = _in_thread(lambda: [r.id for r in second.range(3).collect()])

    def lines(prefix: str) -> list[dict[str, str]]:
        return [
            ln
            for ln in audit_lines(audit_dir)
            if ln.get("callerContext") == f"connect:{sid}"
            and ln.get("reason", "").startswith(prefix)
        ]

    _until(lambda: len(lines("busy: user erin")) >= 2, "the statement refused twice")
    assert waiting[0].is_alive() and not waiting[1]  # waiting out the delay, not raised
    assert all(ln["allowed"] == "false" for ln in lines("busy: user erin"))
    assert lines("INVALID_HANDLE.OPERATION_NOT_FOUND")  # its reattach, answered here
    first.interruptAll()
    runaway[0].join(300)
    waiting[0].join(120)
    assert waiting[1] == {"value": [0, 1, 2]}
    # the operation the backend ran is no longer one the gateway answers releases for
    assert not [k for k in gw.service._local_ops if k[:2] == ("erin", sid)]


def test_the_busy_answers_retry_delay_is_read_from_lakegate_yaml(tmp_path: Path) -> None:
    from governance.config import Config
    from governance.errors import ConfigError

    path = tmp_path / "lakegate.yaml"
    path.write_text("connect:\n  max_statements_per_user: 3\n")
    assert Config.load(path).connect.busy_retry_delay == 2.0
    path.write_text("connect:\n  busy_retry_delay: 0\n")
    assert Config.load(path).connect.busy_retry_delay == 0.0
    for bad in ("-1", "601", "soon"):
        path.write_text(f"connect:\n  busy_retry_delay: {bad}\n")
        with pytest.raises(ConfigError, match=r"'connect\.busy_retry_delay' must be a number"):
            Config.load(path)


def test_the_fair_share_is_on_by_default_sized_to_the_backends_task_slots(
    gateway, spark, connect_lakegate
) -> None:
    """connect.fair_share_slots `auto` (the default): the tasks the backend's SparkContext
    (this driver's) runs at once, local[2]'s 2, not Spark's defaultParallelism."""
    assert connect_lakegate.config.connect.fair_share_slots is None
    assert spark.sparkContext.master == "local[2]"
    assert gateway.service.limits.fair_share_slots == 2


def test_a_non_reattachable_querys_slot_is_free_when_its_result_ends(limited_gateway) -> None:
    """A non-reattachable execution (`lakegate sql --gateway` turns reattach off) gets no
    ResultComplete from the backend: the end of its stream is its result's. Before, its slot
    stayed taken until the statement's timeout, so a user's next commands were refused."""
    import time

    gw, connect = limited_gateway(
        max_statements_per_user=1,
        statement_timeout=3600.0,  # a kept slot is not freed by a timeout within the test
        statement_queue_wait=0.0,
        busy_retry_delay=0.0,
    )
    s = connect("carol")
    s.client.disable_reattachable_execute()
    for _ in range(3):  # one slot: the next query would be refused if this one kept it
        assert s.sql(ORDERS).collect()
        deadline = time.monotonic() + 5
        while gw.service.limits.count("carol") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gw.service.limits.count("carol") == 0
