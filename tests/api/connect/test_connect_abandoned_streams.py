"""A stream its client stops reading is recorded as abandoned, not as a failure: a stock
client that reads one row and closes its iterator (benchmarks/connect_client.py's
`first_row`) releases the operation (ReleaseExecute) or cancels its call, and the backend
ends the gateway's stream with INVALID_CURSOR.DISCONNECTED / OPERATION_CANCELED. The gateway
audits that call's end with `phase=abandoned` (audit/README.md) and writes nothing to
`lakegate.errors`; a real failure mid-stream is still audited failed and logged, and a
release never turns another error into an abandonment."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from connect_testkit import active_jobs, audit_lines
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from api.connect.limits import (
    HUNG_UP,
    RELEASED,
    SESSION_RELEASED,
    Statement,
    abandonment,
    backend_class,
)
from api.connect.outcomes import _leading_class
from governance.execute.sources import SCHEMA_CHANGED

bounded = pytest.mark.timeout(300)


def _wide(s: Any, rows: int = 9000) -> Any:
    """A result of ~18 MB in 9 partitions: far more than gRPC sends before it is read."""
    return s.range(0, rows, 1, 9).selectExpr("id", "repeat('x', 2000) AS pad")


def _first_row(df: Any) -> Any:
    """benchmarks/connect_client.py's `first_row`: one row, then the iterator closed."""
    rows = df.toLocalIterator()
    try:
        return next(rows)
    finally:
        rows.close()


def _call_end(audit_dir: Path, since: int, user: str) -> dict[str, str]:
    """The closing line of `user`'s one executePlan call after line `since` (bounded wait:
    the gateway writes it when the backend ends the stream, after the client has left)."""
    for _ in range(600):
        ends = [
            ln
            for ln in audit_lines(audit_dir)[since:]
            if ln["cmd"] == "executePlan"
            and ln["ugi"].startswith(f"{user} ")
            and ln["succeeded"] == "false"
        ]
        if ends:
            assert len(ends) == 1, ends
            return ends[0]
        time.sleep(0.2)
    raise AssertionError(f"{user}'s executePlan call never ended")


def _no_jobs_left(spark: Any) -> None:
    """An abandoned statement's Spark jobs are cancelled (bounded wait)."""
    for _ in range(600):
        if not active_jobs(spark):
            return
        time.sleep(0.2)
    raise AssertionError(f"Spark jobs still running: {active_jobs(spark)}")


def _errors_of(caplog: pytest.LogCaptureFixture, query_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "lakegate.errors" and query_id in r.getMessage()
    ]


@bounded
def test_a_stream_released_after_its_first_row_is_audited_abandoned_not_failed(
    remote: Callable[..., Any], spark: Any, audit_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lakegate.errors")
    s = remote("dana")
    since = len(audit_lines(audit_dir))
    assert _first_row(_wide(s)).id == 0
    end = _call_end(audit_dir, since, "dana")
    # the stock client both releases the operation and drops its call; whichever the
    # gateway saw first is named
    assert end["phase"] == "abandoned"
    assert end["allowed"] == "true"
    assert re.fullmatch(
        rf"abandoned by the client after [1-9][0-9]* rows were sent: "
        rf"({re.escape(RELEASED)}|{re.escape(HUNG_UP)})",
        end["reason"],
    ), end["reason"]
    assert "INVALID_CURSOR" not in end["reason"]
    assert _errors_of(caplog, end["queryId"]) == []
    opened = [
        ln
        for ln in audit_lines(audit_dir)[since:]
        if ln["queryId"] == end["queryId"] and ln["succeeded"] == "true"
    ]
    assert [ln["cmd"] for ln in opened] == ["executePlan"]  # allowed before its answer
    _no_jobs_left(spark)
    assert s.range(3).count() == 3  # the session goes on


@bounded
def test_a_stream_whose_call_the_client_cancelled_is_audited_abandoned_not_failed(
    remote: Callable[..., Any], spark: Any, audit_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lakegate.errors")
    s = remote("frank")
    s.client.disable_reattachable_execute()  # no ReleaseExecute: the call is only dropped
    since = len(audit_lines(audit_dir))
    assert _first_row(_wide(s)).id == 0
    end = _call_end(audit_dir, since, "frank")
    assert end["phase"] == "abandoned"
    assert end["reason"].startswith("abandoned by the client after ")
    assert end["reason"].endswith(f" rows were sent: {HUNG_UP}")
    assert _errors_of(caplog, end["queryId"]) == []
    _no_jobs_left(spark)
    assert not any(
        ln["cmd"] == "releaseExecute" and ln["ugi"].startswith("frank ")
        for ln in audit_lines(audit_dir)[since:]
    )


def _held_open(s: Any, responses: int = 3) -> tuple[Any, Any]:
    """A reattachable ExecutePlan of `_wide` through the stock client's own stub, read for
    `responses` answers and then neither read nor cancelled: a client that keeps its call
    open (a stock client's call lives until its iterator is garbage-collected). The call
    and its request."""
    import pyspark.sql.connect.proto as pb2

    client = s.client
    req = client._execute_plan_request_with_metadata()
    req.operation_id = str(uuid.uuid4())
    req.plan.CopyFrom(_wide(s)._plan.to_proto(client))
    req.request_options.append(
        pb2.ExecutePlanRequest.RequestOption(
            reattach_options=pb2.ReattachOptions(reattachable=True)
        )
    )
    call = client._stub.ExecutePlan(req, metadata=client._builder.metadata())
    for _ in range(responses):
        next(call)
    return call, req


def _ended_by_the_gateway(call: Any) -> None:
    """The held call was ended from the gateway's side (bounded: the call's own end)."""
    with pytest.raises(grpc.RpcError) as e:
        for _ in call:
            pass
    assert e.value.code() == grpc.StatusCode.CANCELLED


@bounded
def test_a_released_stream_whose_client_keeps_its_call_open_is_ended_and_audited_abandoned(
    remote: Callable[..., Any], gateway: Any, spark: Any, audit_dir: Path
) -> None:
    """Seen in CI: the closing line waited on the client dropping its call. A release is
    the client's word that it reads no more: the gateway ends the call itself, so neither
    the line nor the handler's thread waits on the client's garbage collector."""
    import pyspark.sql.connect.proto as pb2

    s = remote("dana")
    since = len(audit_lines(audit_dir))
    call, req = _held_open(s)
    release = pb2.ReleaseExecuteRequest(
        session_id=req.session_id,
        operation_id=req.operation_id,
        user_context=req.user_context,
        client_type=req.client_type,
    )
    release.release_all.CopyFrom(pb2.ReleaseExecuteRequest.ReleaseAll())
    s.client._stub.ReleaseExecute(release, metadata=s.client._builder.metadata())
    end = _call_end(audit_dir, since, "dana")  # the call is still held here
    assert end["phase"] == "abandoned", end
    assert end["reason"].endswith(f" rows were sent: {RELEASED}"), end
    _ended_by_the_gateway(call)
    assert gateway.service.limits.count("dana") == 0
    _no_jobs_left(spark)
    assert s.range(3).count() == 3  # the session goes on


@bounded
def test_a_stream_of_a_released_session_whose_client_keeps_its_call_open_is_ended_and_audited(
    remote: Callable[..., Any], gateway: Any, audit_dir: Path
) -> None:
    """ReleaseSession (Spark 4's `spark.stop()`) ends its statements' open calls too."""
    from pyspark.sql.connect.proto import base_pb2

    if not hasattr(base_pb2, "ReleaseSessionRequest"):
        pytest.skip("Spark 3.5's protocol has no ReleaseSession")
    s = remote("dana")
    since = len(audit_lines(audit_dir))
    call, req = _held_open(s)
    bye = base_pb2.ReleaseSessionRequest(session_id=req.session_id, user_context=req.user_context)
    s.client._stub.ReleaseSession(bye, metadata=s.client._builder.metadata())
    end = _call_end(audit_dir, since, "dana")  # the call is still held here
    assert end["phase"] == "abandoned"
    assert end["reason"].endswith(f" rows were sent: {SESSION_RELEASED}"), end["reason"]
    _ended_by_the_gateway(call)
    assert gateway.service.limits.count("dana") == 0


@bounded
def test_a_timed_out_stream_whose_client_stopped_reading_is_ended_and_audited_timed_out(
    limited_gateway: Callable[..., Any], spark: Any, audit_dir: Path
) -> None:
    """A statement that times out while its client neither reads nor cancels still gets
    its timeout's line (it got none at all before), and the gateway's thread is freed
    after the grace (limits.STREAM_GRACE), not when the client lets go."""
    gw, connect = limited_gateway(statement_timeout=3.0)
    s = connect("dana")
    since = len(audit_lines(audit_dir))
    call, _ = _held_open(s)
    end = _call_end(audit_dir, since, "dana")  # the call is still held here
    assert end["reason"].startswith("statement timed out after 3 s"), end["reason"]
    assert end["allowed"] == "true" and end["phase"] != "abandoned"
    _ended_by_the_gateway(call)
    assert gw.service.limits.count("dana") == 0
    _no_jobs_left(spark)


@bounded
def test_a_query_failing_mid_stream_is_still_audited_failed_and_logged(
    remote: Callable[..., Any], audit_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    caplog.set_level(logging.INFO, logger="lakegate.errors")
    s = remote("erin")
    since = len(audit_lines(audit_dir))
    failing = _wide(s).selectExpr("id", "pad", "element_at(array(1), IF(id < 8000, 1, 0)) AS ok")
    rows = failing.toLocalIterator()
    with pytest.raises(SparkConnectGrpcException, match=r"statement failed: \[") as e:
        for _ in rows:
            pass
    rows.close()
    end = _call_end(audit_dir, since, "erin")
    assert end["phase"] == "null"
    assert end["reason"] in str(e.value)  # what the client was told (3.5 prefixes the type)
    assert end["reason"].startswith("statement failed: [")
    assert end["reason"].endswith(f"] (query {end['queryId']})")
    logged = _errors_of(caplog, end["queryId"])
    assert len(logged) == 1 and "failed in the backend" in logged[0]


class _BackendError(grpc.RpcError):
    """A backend stream's end as grpc raises it: a status with Spark's ErrorInfo."""

    def __init__(
        self,
        error_class: str,
        *,
        message: str | None = None,
        reason: str = "org.apache.spark.SparkException",
        spark35: bool = False,
    ) -> None:
        info = error_details_pb2.ErrorInfo(reason=reason, domain="org.apache.spark")
        if not spark35:  # Spark 3.5's backend leaves errorClass out of its ErrorInfo
            info.metadata["errorClass"] = error_class
        message = f"[{error_class}] it happened." if message is None else message
        packed = any_pb2.Any()
        packed.Pack(info)
        status = status_pb2.Status(code=code_pb2.INTERNAL, message=message, details=[packed])
        self._message = message
        self._trailers = (("grpc-status-details-bin", status.SerializeToString()),)

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INTERNAL

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> Any:
        return self._trailers


def _stmt(*, released: bool = False, hung_up: bool = False) -> Statement:
    return Statement(("erin", "s", "op"), frozenset(), released=released, hung_up=hung_up)


def test_a_release_never_turns_a_real_backend_error_into_an_abandonment() -> None:
    for cls in ("DIVIDE_BY_ZERO", "USER_RAISED_EXCEPTION", "OPERATION_CANCELED"):
        assert abandonment(_stmt(released=True), _BackendError(cls)) is None
    assert abandonment(_stmt(hung_up=True), _BackendError("DIVIDE_BY_ZERO")) is None
    assert abandonment(_stmt(released=True), _BackendError("INVALID_CURSOR.DISCONNECTED")) == (
        RELEASED
    )
    assert abandonment(_stmt(hung_up=True), _BackendError("OPERATION_CANCELED")) == HUNG_UP


def test_a_released_statement_whose_call_ended_first_is_named_released() -> None:
    """The gateway ends a released statement's call itself (`end_streams`): its cancel may
    reach the backend before the release, and the release is still why it ended."""
    both = _stmt(released=True, hung_up=True)
    assert abandonment(both, _BackendError("OPERATION_CANCELED")) == RELEASED
    assert abandonment(both, _BackendError("DIVIDE_BY_ZERO")) is None


def test_a_spark_35_backend_s_class_is_read_from_its_message() -> None:
    """Spark 3.5 puts no errorClass in its ErrorInfo, only the `[CLASS]` its message starts
    with (CI on 3.5 audited a dropped call as a failure for want of it)."""
    cancelled = _BackendError("OPERATION_CANCELED", spark35=True)
    assert backend_class(cancelled) == "OPERATION_CANCELED"
    assert abandonment(_stmt(hung_up=True), cancelled) == HUNG_UP
    assert abandonment(_stmt(), cancelled) is None
    released = _BackendError("INVALID_CURSOR.DISCONNECTED", spark35=True)
    assert abandonment(_stmt(released=True), released) == RELEASED
    assert abandonment(_stmt(hung_up=True), _BackendError("DIVIDE_BY_ZERO", spark35=True)) is None


@pytest.mark.parametrize(
    ("message", "reason", "expected"),
    [
        (
            "[OPERATION_CANCELED] Operation has been canceled.",
            "org.apache.spark.SparkSQLException",
            "OPERATION_CANCELED",
        ),
        (
            "[INVALID_HANDLE.SESSION_NOT_FOUND] gone",
            "org.apache.spark.SparkSQLException",
            "INVALID_HANDLE.SESSION_NOT_FOUND",
        ),
        (
            "Job aborted due to stage failure: [OPERATION_CANCELED] x",
            "org.apache.spark.SparkException",
            None,
        ),
        ("[OPERATION_CANCELED] not Spark's", "java.lang.RuntimeException", None),
        ("[operation_canceled] lower case", "org.apache.spark.SparkSQLException", None),
        ("[OPERATION_CANCELED]no space", "org.apache.spark.SparkSQLException", None),
    ],
)
def test_only_a_spark_exception_s_leading_class_is_read(
    message: str, reason: str, expected: str | None
) -> None:
    e = _BackendError("OPERATION_CANCELED", message=message, reason=reason, spark35=True)
    assert backend_class(e) == expected


def test_a_disconnect_the_client_did_not_cause_is_still_a_failure() -> None:
    """Only the gateway's own observations count: the release it forwarded, the call it
    saw end. A disconnect without either (a session the gateway expired) is a failure."""
    for cls in ("INVALID_CURSOR.DISCONNECTED", "OPERATION_CANCELED"):
        assert abandonment(_stmt(), _BackendError(cls)) is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (f"[{SCHEMA_CHANGED}] the table changed", SCHEMA_CHANGED),
        ("[DIVIDE_BY_ZERO] not a Delta class the audit reads from text", None),
        (f"[{SCHEMA_CHANGED}.SUB] a sub-class is not the class", None),
        (f"text first [{SCHEMA_CHANGED}] ", None),
    ],
)
def test_the_audit_reads_only_known_delta_classes_from_a_message(
    message: str, expected: str | None
) -> None:
    """The failure line's class falls back to the message's `[CLASS]` only for the Delta
    classes whose ErrorInfo carries none (outcomes.py), through the same reader as
    `backend_class`."""
    assert _leading_class(message) == expected
