"""How a gateway call ends, on record and to the client: its audit line before the answer (no
line, no answer), and a refusal or failure as one line, never Spark's text: a refusal's
reason, a backend failure's error class and query id (its exception type kept, class names
only), an allow-listed analysis error's first line checked against what the caller saw.
Mixed into ConnectService, as the limits (limits.py) and analysis (analyze.py) are.
"""

from __future__ import annotations

import time
from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from api.connect.call import Call
from api.connect.limits import (
    LimitExceeded,
    StatementRefused,
    backend_error_info,
    leading_class,
)
from api.connect.sessions import SessionRefused
from audit import AuditEvent
from governance.errors import AccessDenied, AuditUnavailable, LakegateError
from governance.execute.run import (
    ERROR_LOG,
    READABLE_ANALYSIS_ERRORS,
    StatementFailed,
    error_class,
    failure_message,
    message_parameters,
    small_group_refusal,
)
from governance.execute.sources import SCHEMA_CHANGED
from governance.session.governed import Lakegate
from governance.session.recorder import write_or_refuse
from governance.verify.readable import readable_line, seen_by


class Refusal(Exception):
    """A call answered with `code` and one line, after its audit record."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CallOutcomes:
    """The service's audit line per call and its one-line errors (mixed into ConnectService)."""

    lg: Lakegate

    def _audit(
        self,
        call: Call,
        *,
        allowed: bool,
        succeeded: bool,
        reason: str | None = None,
        phase: str | None = None,
    ) -> None:
        write_or_refuse(
            self.lg.audit,
            [
                AuditEvent(
                    allowed=allowed,
                    user=call.user,
                    auth=call.auth,
                    issuer=call.claims.issuer,
                    subject=call.claims.subject,
                    ip=call.ip,
                    cmd=call.cmd,
                    proto="connect",
                    caller_context=f"connect:{call.session_id}" if call.session_id else None,
                    succeeded=succeeded,
                    query_id=call.query_id,
                    stmt_hash=call.stmt_hash,
                    reason=reason,
                    duration_ms=int((time.perf_counter() - call.started) * 1000),
                    policy_version=self.lg.policy_version,
                    phase=phase,
                )
            ],
        )

    def _allow(self, call: Call, context: grpc.ServicerContext) -> None:
        """The call's allowed line before its answer; no line, no answer (fail closed)."""
        try:
            self._audit(call, allowed=True, succeeded=True)
        except AuditUnavailable as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    def _fail(self, call: Call, context: grpc.ServicerContext, e: BaseException) -> NoReturn:
        """Record the refusal or failure, then answer with one line (never Spark's text)."""
        if isinstance(e, Refusal):
            code, message, allowed = e.code, str(e), False
        elif isinstance(e, SessionRefused | StatementRefused):
            code, message, allowed = grpc.StatusCode.RESOURCE_EXHAUSTED, str(e), False
        elif isinstance(e, LimitExceeded):
            code, message, allowed = e.code, str(e), True
        elif isinstance(e, AccessDenied):
            code, message, allowed = grpc.StatusCode.PERMISSION_DENIED, str(e), False
        elif isinstance(e, AuditUnavailable):
            code, message, allowed = grpc.StatusCode.UNAVAILABLE, str(e), True
        elif isinstance(e, StatementFailed | LakegateError):
            code, message, allowed = grpc.StatusCode.INVALID_ARGUMENT, str(e), True
        else:
            code, allowed = grpc.StatusCode.INVALID_ARGUMENT, True
            message = _spark_message(e, call)
        details = []
        try:
            self._audit(call, allowed=allowed, succeeded=False, reason=message)
            if isinstance(e, StatementRefused) and e.retry_after > 0:
                details.append(retry_info(e.retry_after))
        except AuditUnavailable as ae:
            code, message = grpc.StatusCode.UNAVAILABLE, str(ae)
        context.abort_with_status(
            rpc_status.to_status(
                status_pb2.Status(code=code.value[0], message=message, details=details)
            )
        )
        raise AssertionError("unreachable")  # abort_with_status raises

    def _backend_error(
        self, call: Call, context: grpc.ServicerContext, e: grpc.RpcError
    ) -> NoReturn:
        """A backend failure as error class + query id; its exception type kept (class names
        only) so the client raises the same kind of error."""
        refused = small_group_refusal(e.details() or "", call.query_id, call.user)
        if refused is not None:  # the aggregation guard's refusal, raised by Spark
            self._fail(call, context, refused)
        info = backend_error_info(e)
        ERROR_LOG.error(
            "connect query %s (user %s) failed in the backend: %s %s",
            call.query_id,
            call.user,
            e.code(),
            e.details(),
        )
        cls = (
            info.metadata.get("errorClass")
            or _leading_class(e.details() or "")
            or info.reason.rsplit(".", 1)[-1]
            or "ERROR"
        )
        if self.lg.sources is not None:  # the failed statement's pins are not known here
            self.lg.sources.failed(cls)
        message = f"statement failed: [{cls}] (query {call.query_id})"
        try:
            self._audit(call, allowed=True, succeeded=False, reason=message)
        except AuditUnavailable as ae:
            message = str(ae)
        details = []
        if info.reason:
            safe = error_details_pb2.ErrorInfo(reason=info.reason, domain=info.domain)
            if "classes" in info.metadata:
                safe.metadata["classes"] = info.metadata["classes"]
            packed = any_pb2.Any()
            packed.Pack(safe)
            details.append(packed)
        code = e.code() if e.code() is not None else grpc.StatusCode.INTERNAL
        context.abort_with_status(
            rpc_status.to_status(
                status_pb2.Status(
                    code=code.value[0] if code != grpc.StatusCode.UNKNOWN else code_pb2.INTERNAL,
                    message=message,
                    details=details,
                )
            )
        )
        raise AssertionError("unreachable")


#: Delta errors whose ErrorInfo carries no class, recognised by their message's first token
#: (only these constants are ever taken from the text, so it can carry no value).
_DELTA_CLASSES = frozenset({SCHEMA_CHANGED})


def retry_info(seconds: float) -> any_pb2.Any:
    """gRPC's RetryInfo detail: wait at least `seconds` before retrying. Spark 4's stock
    client retries any status carrying it (pyspark's DefaultPolicy, its own backoff and
    at most 15 retries), so a busy user's client waits instead of resubmitting at once."""
    info = error_details_pb2.RetryInfo()
    info.retry_delay.FromMilliseconds(int(seconds * 1000))
    packed = any_pb2.Any()
    packed.Pack(info)
    return packed


def _leading_class(details: str) -> str | None:
    """A known Delta error class that the backend's message starts with, else None."""
    cls = leading_class(details)
    return cls if cls in _DELTA_CLASSES else None


def _spark_message(e: BaseException, call: Call) -> str:
    """A Spark error while analysing a governed plan: an allow-listed analysis error's first
    line (it names only the plan's own identifiers), else class + query id."""
    from pyspark.errors import AnalysisException

    cls = error_class(e)
    if isinstance(e, AnalysisException) and cls in READABLE_ANALYSIS_ERRORS:
        lines = [ln for ln in str(getattr(e, "desc", None) or e).splitlines() if ln.strip()]
        first = (lines[0] if lines else type(e).__name__).split("; line ")[0]
        seen = call.seen() if call.seen is not None else seen_by(None, [], [])
        line = readable_line(cls, first, message_parameters(e), seen)
        if line is not None:
            ERROR_LOG.info("connect query %s: %s", call.query_id, e)
            return f"statement failed: {line[:500]}"
    return failure_message(e, call.query_id, call.user)
