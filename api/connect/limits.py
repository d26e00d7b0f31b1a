"""Statement limits of the Connect gateway: one user cannot starve the others.

Each ExecutePlan or AnalyzePlan call is a statement: a user runs at most
`connect.max_statements_per_user` at once (the next waits up to
`connect.statement_queue_wait` seconds for a slot, then is refused as busy, one line; one
beyond a full queue is held `connect.busy_retry_delay` seconds before that answer); a statement
that outlives `connect.statement_timeout` seconds (default: the REST API's `api.timeout`)
is cancelled, its Spark jobs with it; a query returns at most `connect.row_limit` rows
(default `api.row_limit`), more is refused. Cancelling a statement, by its timeout, by the
client's interrupt or by the client going away, cancels its Spark jobs in the gateway's
thread (a job group) and in the backend (the operation's job tag, and Spark Connect's own
interrupt), so the cores are free at once. A result its client stops reading (it releases
the operation, or drops its call) is audited `phase=abandoned`, not as a backend failure,
when the gateway saw the release or the dropped call and then the backend's error that this
makes (`abandonment`). The gateway ends such a call itself rather than wait on its client
(`end_streams`): after a release, and after a timeout whose client reads nothing more.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from api.connect import compat
from governance.errors import AuditUnavailable, LakegateError
from governance.execute.run import ERROR_LOG

if TYPE_CHECKING:
    from api.connect.backend import Backend
    from api.connect.sessions import SessionRegistry
    from governance.session.governed import Lakegate

OpKey = tuple[str, str, str]  # (user, session id, operation id)


class StatementRefused(LakegateError):
    """A statement over the user's concurrency limit; `retry_after`: the seconds its answer
    asks the client to wait before retrying (gRPC's RetryInfo; 0: none)."""

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LimitExceeded(LakegateError):
    """An allowed statement stopped by a limit (its timeout, the row limit): `code` is the
    gRPC status the client gets."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Statement:
    """One running statement: its key, tags, how to cancel it, and what it returned."""

    key: OpKey
    tags: frozenset[str]
    cancel_actions: list[Callable[[], None]] = field(default_factory=list)
    on_done: list[Callable[[], None]] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False
    done: bool = False
    rows: int = 0
    seen: set[str] = field(default_factory=set)  # response ids counted (reattach resends)
    timer: threading.Timer | None = None
    released: bool = False  # the gateway forwarded its client's ReleaseExecute(release_all)
    hung_up: bool = False  # its client's call ended before the result's end
    session_released: bool = False  # its client released the whole session (ReleaseSession)
    # how to end the client calls streaming its result from this side (`end_streams`)
    streams: list[Callable[[bool], None]] = field(default_factory=list)

    @property
    def job_group(self) -> str:
        """The Spark job group of the statement's work in the gateway's own thread."""
        return f"lakegate-connect-{self.key[2]}"


class StatementLimits:
    """The running statements by user; `start` admits one and arms its timeout.

    With `fair_share_slots` (connect.fair_share_slots, 0: off), while more than one user is
    active a user runs at most `max(1, min(per_user, fair_share_slots // active users))`
    statements: Spark's FAIR pools never preempt a running task, so a user whose statements
    already fill the cores would keep another user's short statement waiting for one of
    their long tasks to end. A user is active with a statement running or queued, or whose
    last statement ended within `fair_share_window` seconds (a light user between two
    lookups still counts). A lone active user keeps the whole per-user limit."""

    def __init__(
        self,
        *,
        per_user: int,
        timeout: float,
        row_limit: int,
        queue_wait: float = 0.0,
        fair_share_slots: int = 0,
        fair_share_window: float = 5.0,
        retry_after: float = 0.0,
        hold_per_user: int = 0,
        hold_total: int = 0,
    ) -> None:
        self.per_user, self.timeout, self.row_limit = per_user, timeout, row_limit
        self.queue_wait, self.retry_after = queue_wait, retry_after
        self.hold_per_user, self.hold_total = hold_per_user, hold_total
        self._held: dict[str, int] = {}  # by user: statements held before their refusal
        self.fair_share_slots, self.fair_share_window = fair_share_slots, fair_share_window
        self._running: dict[OpKey, Statement] = {}
        self._counts: dict[str, int] = {}  # by user: statements running (no zero entries)
        self._waiting: dict[str, int] = {}  # by user: statements queued for a slot
        self._ended: dict[str, float] = {}  # by user: monotonic time their last one ended
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)

    def _mine(self, user: str) -> int:
        return self._counts.get(user, 0)

    def _active(self, user: str, now: float) -> int:
        """Users active now, `user` (who asks) among them; ended windows are dropped."""
        since = now - self.fair_share_window
        for u in [u for u, t in self._ended.items() if t < since]:
            del self._ended[u]
        active = {user, *self._counts, *self._ended}
        active.update(u for u, n in self._waiting.items() if n > 0)
        return len(active)

    def _limit(self, user: str, now: float) -> tuple[int, int]:
        """The user's limit now, and the active users it was computed for (1 when off)."""
        if self.fair_share_slots <= 0:
            return self.per_user, 1
        active = self._active(user, now)
        if active <= 1:
            return self.per_user, active
        return max(1, min(self.per_user, self.fair_share_slots // active)), active

    def _next_inactive(self, user: str, now: float) -> float | None:
        """Seconds until another user, active only by their window, stops counting: the
        waiters' shares may grow then, though no statement ends to wake them."""
        if self.fair_share_slots <= 0:
            return None
        ends = [
            t
            for u, t in self._ended.items()
            if u != user and u not in self._counts and self._waiting.get(u, 0) == 0
        ]
        return max(0.0, min(ends) + self.fair_share_window - now) + 0.001 if ends else None

    def start(self, key: OpKey, tags: Iterable[str] = ()) -> Statement:
        """Admit a statement of key's user, or raise StatementRefused (one line).

        A user at their limit waits up to `queue_wait` seconds for one of their own
        statements to finish or for their fair share to grow (at most `per_user` of them
        wait; the others are refused at once), so a burst is queued rather than refused; a
        user's queue never holds another user back, since the limit counts only their own
        statements (and a user with none running is always under their share)."""
        user = key[0]
        with self._lock:
            now = time.monotonic()
            limit, active = self._limit(user, now)
            queued = self._waiting.get(user, 0)
            how = ""  # how it waited, for the busy answer
            if self._mine(user) < limit:
                pass  # admitted at once
            elif self.queue_wait > 0 and queued < self.per_user:
                self._waiting[user] = queued + 1
                try:
                    limit, active = self._wait_for_slot(user, now + self.queue_wait)
                finally:
                    self._waiting[user] -= 1
                how = f"waited up to {self.queue_wait:g} s, connect.statement_queue_wait"
            elif self._may_hold(user):
                self._held[user] = self._held.get(user, 0) + 1
                hold = min(self.retry_after, self.queue_wait)  # never longer than a queue's
                try:
                    limit, active = self._wait_for_slot(user, now + hold)
                finally:
                    if self._held[user] == 1:
                        del self._held[user]
                    else:
                        self._held[user] -= 1
                how = f"{self.per_user} already queued; held {hold:g} s, connect.busy_retry_delay"
            elif self.queue_wait > 0:
                how = f"{self.per_user} already queued, connect.statement_queue_wait"
            mine = self._mine(user)
            if mine >= limit:
                raise StatementRefused(self._busy(user, mine, limit, active, how), self.retry_after)
            stmt = self._running[key] = Statement(key, frozenset(tags))
            self._counts[user] = mine + 1
        stmt.timer = threading.Timer(self.timeout, self._expire, args=(stmt,))
        stmt.timer.daemon = True
        stmt.timer.start()
        return stmt

    def _wait_for_slot(self, user: str, deadline: float) -> tuple[int, int]:
        """Wait (the lock held by the caller, released while waiting) until the user is
        under their limit or `deadline` passes: the limit and active users then."""
        now = time.monotonic()
        limit, active = self._limit(user, now)
        while self._mine(user) >= limit and now < deadline:
            until = self._next_inactive(user, now)
            left = deadline - now
            self._freed.wait(left if until is None else min(left, until))
            now = time.monotonic()
            limit, active = self._limit(user, now)
        return limit, active

    def _may_hold(self, user: str) -> bool:
        """A statement beyond a full queue is held `retry_after` seconds (at most
        `queue_wait`) before its busy answer (and admitted if a slot frees meanwhile), so
        a client that resubmits at once without reading RetryInfo (Spark 3.5's, a script's
        loop) is slowed to the delay it was asked to wait, at the cost of a waiting thread
        rather than a refusal's work (its audit line, its answer) many times a second.
        Bounded per user and in all: a statement beyond either bound is refused at once,
        as with no queue."""
        if self.queue_wait <= 0 or self.retry_after <= 0:
            return False
        held = self._held  # no zero entries: a few users at most, and only when refusing
        return held.get(user, 0) < self.hold_per_user and sum(held.values()) < self.hold_total

    def _busy(self, user: str, mine: int, limit: int, active: int, how: str) -> str:
        waited = f" ({how})" if how else ""
        if limit < self.per_user:
            return (
                f"busy: user {user} already runs {mine} Spark Connect statements, their fair "
                f"share of connect.fair_share_slots ({self.fair_share_slots}) while {active} "
                f"users are active{waited}; retry later, wait for one to finish or interrupt it"
            )
        return (
            f"busy: user {user} already runs {mine} Spark Connect statements, the "
            f"most connect.max_statements_per_user allows{waited}; retry later, "
            "wait for one to finish or interrupt it"
        )

    def get(self, key: OpKey) -> Statement | None:
        with self._lock:
            return self._running.get(key)

    def matching(self, user: str, session_id: str, kind: str, value: str) -> list[Statement]:
        """The running statements an Interrupt names: all of the session's, by tag, or by
        operation id."""
        with self._lock:
            return [
                s
                for (u, sid, op), s in self._running.items()
                if u == user
                and sid == session_id
                and (
                    kind == "all"
                    or (kind == "tag" and value in s.tags)
                    or (kind == "operation" and op == value)
                )
            ]

    def finish(self, stmt: Statement) -> None:
        """The statement's slot is free and its timer disarmed; `on_done` runs once."""
        if stmt.timer is not None:
            stmt.timer.cancel()
        with self._lock:
            if stmt.done:
                return
            stmt.done = True
            if self._running.get(stmt.key) is stmt:
                del self._running[stmt.key]
                user = stmt.key[0]
                left = self._counts[user] - 1
                if left:
                    self._counts[user] = left
                else:
                    del self._counts[user]
                    if self.fair_share_slots > 0:
                        self._ended[user] = time.monotonic()
                self._freed.notify_all()
        for action in stmt.on_done:
            action()

    def cancel(self, stmt: Statement) -> None:
        """Cancel the statement's Spark work everywhere it may run, then free its slot."""
        stmt.cancelled = True
        for action in list(stmt.cancel_actions):
            try:
                action()
            except Exception as e:  # the other actions still run; the slot is freed
                ERROR_LOG.error("connect statement %s not fully cancelled: %s", stmt.key[2], e)
        self.finish(stmt)

    def count(self, user: str) -> int:
        with self._lock:
            return self._mine(user)

    def _expire(self, stmt: Statement) -> None:
        if stmt.done:
            return
        stmt.timed_out = True
        self.cancel(stmt)
        # a client still reading gets its DEADLINE_EXCEEDED as the backend's stream ends; a
        # stream still open after the grace has a client that stopped reading, and ends here
        ends = threading.Timer(STREAM_GRACE, end_streams, args=(stmt, True))
        ends.daemon = True
        ends.start()

    def timed_out(self) -> LimitExceeded:
        return LimitExceeded(
            f"statement timed out after {self.timeout:g} s (connect.statement_timeout); "
            "its Spark jobs were cancelled",
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )

    def too_many_rows(self) -> LimitExceeded:
        return LimitExceeded(
            f"the result has more than {self.row_limit} rows (connect.row_limit); filter, "
            f"aggregate or add .limit({self.row_limit})",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )


#: Seconds a timed-out statement's stream may stay open after its backend work was
#: cancelled before the gateway ends the client's call itself.
STREAM_GRACE = 5.0


def end_streams(stmt: Statement, timed_out: bool) -> None:
    """End the client calls still streaming the statement's result, from the gateway's side.

    gRPC's sync server holds a handler in its send until the client reads or cancels: a
    client that released the operation (or let it time out) and neither reads nor cancels
    would keep a gateway thread, and the call's closing line, waiting for as long as it
    likes. A release ends only a stream that has not sent the result's end (a stock client
    releases after reading it); a timeout ends any stream still open."""
    for end in list(stmt.streams):
        end(timed_out)


class LimitedCalls:
    """The gateway service's side of the limits (mixed into ConnectService): admitting a
    statement with its cancel actions, and streaming the backend's answer under them."""

    limits: StatementLimits
    sessions: SessionRegistry
    backend: Backend
    lg: Lakegate
    stub: Any

    def _meta(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _fail(self, call: Any, context: grpc.ServicerContext, e: BaseException) -> NoReturn:
        raise NotImplementedError

    def _backend_error(
        self, call: Any, context: grpc.ServicerContext, e: grpc.RpcError
    ) -> NoReturn:
        raise NotImplementedError

    def _forward_call(
        self,
        call: Any,
        method: Any,
        request: Any,
        context: grpc.ServicerContext,
        *,
        if_gone: Callable[[], Any] | None = None,
    ) -> Any:
        raise NotImplementedError

    def _audit(
        self,
        call: Any,
        *,
        allowed: bool,
        succeeded: bool,
        reason: str | None = None,
        phase: str | None = None,
    ) -> None:
        raise NotImplementedError

    def _statement(self, call: Any, op_id: str, tags: Any) -> Statement:
        """Admit a statement: a concurrency slot, a timeout that cancels its
        Spark jobs here (this thread's job group) and in the backend (Spark Connect's
        interrupt and the operation's job tag), and its session kept from expiry."""
        stmt = self.limits.start((call.user, call.session_id, op_id), tags)
        entry = call.entry
        if entry is not None:
            self.sessions.started(entry)
            stmt.on_done.append(lambda: self.sessions.finished(entry))
        sc = self.lg.spark.sparkContext
        group = stmt.job_group
        stmt.cancel_actions.append(lambda: sc.cancelJobGroup(group))
        stmt.cancel_actions.append(lambda: self._interrupt_backend(call, op_id))
        stmt.cancel_actions.append(lambda: self.backend.cancel(call.user, call.session_id, op_id))
        sc.setJobGroup(group, f"lakegate connect {call.user}", interruptOnCancel=True)
        return stmt

    def _interrupt_backend(self, call: Any, op_id: str) -> None:
        req = base_pb2.InterruptRequest(
            session_id=call.session_id,
            interrupt_type=base_pb2.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID,
            operation_id=op_id,
        )
        req.user_context.user_id = call.user
        req.user_context.user_name = call.user
        self.stub.Interrupt(req, metadata=self._meta(), timeout=30)

    def _clear_group(self) -> None:
        """This thread's Spark job group is unset (the next call on it is another's)."""
        self.lg.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def _ended(self, stmt: Statement | None, e: BaseException) -> BaseException:
        """The statement failed before it was forwarded: its slot is freed; the error the
        caller reads (its timeout's, when that is why it failed)."""
        if stmt is None:
            return e
        self.limits.finish(stmt)
        return self.limits.timed_out() if stmt.timed_out else e

    def _row_limited(self, rel: relations_pb2.Relation) -> relations_pb2.Relation:
        """The query under a limit of connect.row_limit + 1 rows: the backend computes no
        more, and one row over the limit is how `_stream` knows to refuse the result."""
        out = relations_pb2.Relation()
        out.limit.input.CopyFrom(rel)
        out.limit.limit = self.limits.row_limit + 1
        return out

    def _stream(
        self,
        call: Any,
        context: grpc.ServicerContext,
        stmt: Statement | None,
        responses: Any,
        *,
        reattachable: bool = True,
    ) -> Iterator[Any]:
        """The backend's responses to the client, counting the rows against the limit. The
        statement ends with its result; a client that goes away (or cancels) cancels it; a
        stream the backend ends early (the client reattaches) keeps it running. A
        non-reattachable execution (`lakegate sql --gateway`'s) gets no ResultComplete: the
        end of its stream is its result's (before, its slot stayed taken until its timeout)."""
        settled, complete = [False], [False]

        def gone() -> None:
            if stmt is None or stmt.done or settled[0]:
                return
            if complete[0]:  # the client has its result and hung up
                self.limits.finish(stmt)
            else:
                stmt.hung_up = True
                self.limits.cancel(stmt)

        def end(timed_out: bool) -> None:  # see `end_streams`
            if settled[0] or (complete[0] and not timed_out):
                return
            context.cancel()  # wakes the handler from its send: GeneratorExit below
            if timed_out:  # wakes it from a backend that did not end at the interrupt
                cancel = getattr(responses, "cancel", None)
                if cancel is not None:
                    cancel()

        context.add_callback(gone)
        if stmt is not None:
            stmt.streams.append(end)
        try:
            for resp in responses:
                resp.ClearField("metrics")  # operator names may carry storage paths
                kind = resp.WhichOneof("response_type")
                if kind == "extension" or not compat.answer(resp):
                    continue
                if stmt is not None and kind == "arrow_batch" and resp.response_id not in stmt.seen:
                    stmt.seen.add(resp.response_id)
                    stmt.rows += resp.arrow_batch.row_count
                    if stmt.rows > self.limits.row_limit:
                        settled[0] = True
                        self.limits.cancel(stmt)
                        self._fail(call, context, self.limits.too_many_rows())
                complete[0] = complete[0] or kind == "result_complete"
                yield resp
            complete[0] = complete[0] or not reattachable
        except grpc.RpcError as e:
            settled[0] = True
            if stmt is not None:
                if not complete[0] and not context.is_active():
                    # the client's call had already ended when the backend's error came: it
                    # hung up, though gRPC may not have run `gone` yet (seen once in CI: a
                    # dropped call audited as a failure); `abandonment` still requires the
                    # backend's class to be one only an abandoned stream gets
                    stmt.hung_up = True
                self.limits.finish(stmt)
                if stmt.timed_out:
                    self._fail(call, context, self.limits.timed_out())
                how = abandonment(stmt, e)
                if how is not None:
                    self._abandoned(call, context, stmt, how)
            self._backend_error(call, context, e)
        except GeneratorExit:  # gRPC dropped the call (its client cancelled) mid-result
            settled[0] = True
            if stmt is not None and not complete[0] and stmt.timed_out:
                try:  # the timeout's line, which the client (no longer there) cannot read
                    self._audit(
                        call, allowed=True, succeeded=False, reason=str(self.limits.timed_out())
                    )
                except AuditUnavailable as ae:
                    ERROR_LOG.error(
                        "connect query %s timed out, not on record: %s", call.query_id, ae
                    )
            elif stmt is not None and not complete[0]:
                stmt.hung_up = True
                if not stmt.done:
                    self.limits.cancel(stmt)
                how = (
                    SESSION_RELEASED
                    if stmt.session_released
                    else RELEASED
                    if stmt.released
                    else HUNG_UP
                )
                try:
                    self._abandoned_line(call, stmt, how)
                except AuditUnavailable as ae:  # no one is left to refuse
                    ERROR_LOG.error(
                        "connect query %s abandoned, not on record: %s", call.query_id, ae
                    )
            raise
        finally:
            if stmt is not None and end in stmt.streams:
                stmt.streams.remove(end)
            # A stream this gateway stops reading (the client went away, a limit refused it)
            # is cancelled on the backend's connection now, not when it is garbage-collected:
            # an unread stream keeps a backend sender waiting on flow control.
            cancel = getattr(responses, "cancel", None)
            if cancel is not None and not complete[0]:
                cancel()
        settled[0] = True
        if stmt is not None and complete[0]:
            self.limits.finish(stmt)

    def _released(self, call: Any, request: Any, context: grpc.ServicerContext) -> Any:
        """Forward a ReleaseExecute; a `release_all` of a running statement marks it
        released first (the backend ends its stream as soon as it takes the release, maybe
        before the answer is back), and unmarks it if the backend refused the release."""
        stmt = None
        if request.WhichOneof("release") == "release_all":
            stmt = self.limits.get((call.user, call.session_id, request.operation_id))
        if stmt is not None:
            stmt.released = True
        try:
            answer = self._forward_call(
                call,
                self.stub.ReleaseExecute,
                request,
                context,
                if_gone=lambda: base_pb2.ReleaseExecuteResponse(
                    session_id=call.session_id, operation_id=request.operation_id
                ),
            )
        except BaseException:
            if stmt is not None:
                stmt.released = False
            raise
        if stmt is not None:  # its client may keep the call open without reading
            end_streams(stmt, timed_out=False)
        return answer

    def _abandoned(
        self, call: Any, context: grpc.ServicerContext, stmt: Statement, how: str
    ) -> NoReturn:
        """End the stream of a statement its client stopped reading, after its line."""
        code, message = grpc.StatusCode.CANCELLED, f"statement abandoned by the client: {how}"
        try:
            self._abandoned_line(call, stmt, how)
        except AuditUnavailable as e:
            code, message = grpc.StatusCode.UNAVAILABLE, str(e)
        context.abort(code, message)
        raise AssertionError("unreachable")  # abort raises

    def _abandoned_line(self, call: Any, stmt: Statement, how: str) -> None:
        """The call's closing line when its client stopped reading the result:
        `phase=abandoned` (audit/README.md), no backend failure, so nothing goes to
        `lakegate.errors`."""
        self._audit(
            call,
            allowed=True,
            succeeded=False,
            reason=f"abandoned by the client after {stmt.rows} rows were sent: {how}",
            phase="abandoned",
        )


#: The backend's error classes for a stream its client stopped reading: Spark Connect ends
#: the stream of a released operation with INVALID_CURSOR.DISCONNECTED (its response sender
#: interrupted), and an operation the gateway cancelled with OPERATION_CANCELED. A query's
#: own failure never carries either.
_RELEASED_CLASSES = frozenset({"INVALID_CURSOR.DISCONNECTED"})
_HUNG_UP_CLASSES = frozenset({"INVALID_CURSOR.DISCONNECTED", "OPERATION_CANCELED"})
RELEASED = "it released the operation (ReleaseExecute) before the result's end"
HUNG_UP = "it cancelled its call before the result's end"
SESSION_RELEASED = "it released its session (ReleaseSession) before the result's end"


def abandonment(stmt: Statement, e: grpc.RpcError) -> str | None:
    """How the client abandoned the statement whose stream ended with `e`, or None (a real
    failure). Decided from what the gateway itself did and saw: the release it forwarded
    or its client's call ending, and then the backend's error class being the one that
    this (and no query failure) makes. A client claims nothing here: a release sent while
    the backend reports another error leaves that error a failure."""
    if stmt.session_released:  # the gateway released the session for its client: whatever
        return SESSION_RELEASED  # the backend says of the statement then, it was abandoned
    cls = backend_class(e)
    if stmt.released and cls in _RELEASED_CLASSES:
        return RELEASED
    if stmt.hung_up and cls in _HUNG_UP_CLASSES:
        # a released statement's call may have ended first: the gateway ends it on the
        # release (`end_streams`), and its cancel may reach the backend before the release
        return RELEASED if stmt.released else HUNG_UP
    return None


_CLASS_AT_START = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\] ")


def backend_class(e: grpc.RpcError) -> str | None:
    """The Spark error class the backend's status carries: ErrorInfo's `errorClass`, or,
    from a Spark 3.5 backend (which leaves that out), the `[CLASS]` that a Spark exception's
    message starts with. None for a status it cannot read (which is then no abandonment)."""
    info = backend_error_info(e)
    cls = info.metadata.get("errorClass")
    if cls:
        return cls
    if not info.reason.startswith("org.apache.spark."):
        return None
    return leading_class(e.details() or "")


def leading_class(message: str) -> str | None:
    """The `[CLASS]` (dotted for a sub-class) that a Spark exception's message starts
    with, as Spark formats it; None when it starts otherwise."""
    m = _CLASS_AT_START.match(message)
    return m.group(1) if m else None


def backend_error_info(e: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo detail of the backend's status (empty when it has none, or a status
    that cannot be read)."""
    info = error_details_pb2.ErrorInfo()
    try:
        status = rpc_status.from_call(e)  # type: ignore[arg-type]
    except ValueError:
        return info
    for d in status.details if status else ():
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            d.Unpack(info)
            break
    return info
