"""Governed SQL over HTTP: a statement runs as the caller through the governed session.

For users who must not hold a SparkSession: the statement goes through the same parse,
decide, rewrite, verify and audit path as `lakegate.session(user).sql(...)` (with
`proto=rest` and the client's address), and the answer is the schema plus at most
`row_limit` rows. Spark is started on the first statement, not with the server. A statement
that outlives its timeout has its Spark jobs cancelled and the caller gets 504.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import decimal
import logging
import math
import threading
import time
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from api.deps import CallerDep, authenticated_router, get_service
from api.errors import OUTCOME_NOT_RECORDED, ApiError, responses
from api.models import StatementRequest, StatementResult
from audit import statement_hash
from governance.errors import (
    AccessDenied,
    AuditUnavailable,
    LakegateError,
    OutcomeNotRecorded,
    SqlParseError,
)

router = authenticated_router(tags=["Lakegate: SQL"])
_spark_lock = threading.Lock()
log = logging.getLogger("lakegate.api")


def to_json(v: Any) -> Any:
    """A Spark value as JSON: exact decimals as strings, binary as base64, NaN as text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if hasattr(v, "asDict"):
        return {k: to_json(x) for k, x in v.asDict(recursive=False).items()}
    if isinstance(v, dict):
        return {str(to_json(k)): to_json(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [to_json(x) for x in v]
    return str(v)


@router.post(
    "/statements",
    operation_id="executeStatement",
    response_model=StatementResult,
    responses=responses(400, 403, 500, 504),
)
async def execute_statement(request: Request, body: StatementRequest, caller: CallerDep) -> dict:
    """Run one SQL statement as the caller, under the policies (403 when denied, with the
    message the Python API gives)."""
    svc = get_service(request)
    lg = svc.lg
    limit = min(body.row_limit or svc.cfg.row_limit, svc.cfg.row_limit)
    timeout = min(body.timeout_seconds or svc.cfg.timeout, svc.cfg.timeout)
    rec = caller.audit
    rec.stmt_hash = statement_hash(body.statement)
    group = f"lakegate-rest-{rec.request_id}"

    await run_in_threadpool(_start_spark, lg)

    # a statement still waiting for a thread when its caller is answered 504 never runs:
    # the caller was told it did not (its start and the answer take `gate` in turn)
    gate, state = threading.Lock(), {"answered": False, "started": False}

    def run() -> dict | None:
        started = time.perf_counter()
        sc = lg.spark.sparkContext
        with gate:
            if state["answered"]:
                return None
            state["started"] = True
            sc.setJobGroup(group, f"lakegate rest {caller.user}", interruptOnCancel=True)
        try:
            session = lg.session(
                caller.user,
                auth=caller.principal.audit_method,
                claims=caller.principal.claims,
                proto="rest",
                ip=rec.ip,
                caller_context=rec.caller_context or f"rest:{rec.request_id}",
            )
            session.row_limit = limit + 1  # one over: how `truncated` is known
            df = session.sql(body.statement)
            # a governed frame: a failure here is its class + the audit line's query id
            # (Spark's text may quote values), a small group's refusal is AccessDenied
            rows = df.collect()
            fields = df.schema.fields
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        truncated = len(rows) > limit
        rows = rows[:limit]
        return {
            "columns": [
                {"name": f.name, "type_text": f.dataType.simpleString(), "nullable": f.nullable}
                for f in fields
            ],
            "rows": [[to_json(v) for v in r] for r in rows],
            "row_count": len(rows),
            "truncated": truncated,
            "duration_ms": int((time.perf_counter() - started) * 1000),
        }

    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(svc.statements, run)
    future.add_done_callback(lambda _: svc.discovery.invalidate())  # DDL shows at once
    future.add_done_callback(_retrieved)  # a statement that outlived its 504 ends quietly
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout)
    except TimeoutError:
        with gate:
            state["answered"] = True
            ran = state["started"]
        if not ran:
            raise ApiError(
                504,
                f"statement timed out after {timeout:g} s waiting for a statement thread "
                "(api.statement_threads); it did not run",
            ) from None
        lg.spark.sparkContext.cancelJobGroup(group)
        raise ApiError(
            504, f"statement timed out after {timeout:g} s; its Spark jobs were cancelled"
        ) from None
    except SqlParseError as e:
        raise ApiError(400, str(e)) from None
    except AccessDenied as e:
        caller.deny(str(e))
        raise ApiError(403, str(e)) from None
    except OutcomeNotRecorded as e:  # it ran: a retry would run it again
        rec.unrecorded_query = e.query_id
        raise ApiError(500, f"{e}; do not retry", OUTCOME_NOT_RECORDED) from None
    except AuditUnavailable as e:
        raise ApiError(503, str(e)) from None
    except LakegateError as e:
        raise ApiError(400, str(e)) from None
    except Exception as e:
        # Spark failed while producing rows of an allowed statement; its message may quote
        # values, so only the kind of failure goes back (details are in the server log).
        log.warning("statement %s failed at collect: %s", rec.request_id, e)
        raise ApiError(
            400,
            f"statement failed while reading its result ({type(e).__name__}); "
            f"request id {rec.request_id}",
        ) from None


def _retrieved(future: asyncio.Future) -> None:
    """Take a finished statement's exception: after a 504 nobody awaits it, and asyncio
    would print "Future exception was never retrieved" with Spark's text on stderr."""
    if not future.cancelled() and future.exception() is not None:
        log.info(
            "a statement ended after its caller was answered: %s", type(future.exception()).__name__
        )


def _start_spark(lg: Any) -> None:
    """The first statement starts Spark (once); discovery never needs it."""
    with _spark_lock:
        lg.spark  # noqa: B018 - the property builds the session on first use
