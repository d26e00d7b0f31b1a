"""The gateway's SparkConnectService: token, audit, governed plan, forward, scrubbed errors.

Each call: the bearer token names the user (the REST API's token configuration); the
verified user replaces whatever `user_context` the client declared, so the backend, which
keys sessions by (user, session id), never lets one user reach another's session. The plan
is governed (relations.py) and verified before the backend sees it; SQL commands and
DataFrame writes run through the user's governed session here (intent before effect). One audit
line per call (`proto=connect`), refusals included, is written before the answer; if it
cannot be written the call fails. Errors reach the client as one line: a refusal's reason,
or a failure's error class and query id (Spark's text goes to `lakegate.errors`); both, and
the audit line, are outcomes.py's.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

from api.auth import Unauthenticated
from api.authenticator import Authenticator, Deprovisioned
from api.connect import compat
from api.connect.analyze import GatewayAnalysis, kept_key, kept_relation
from api.connect.backend import MAX_MESSAGE_BYTES, Backend
from api.connect.call import Call
from api.connect.commands import GatewayCommands
from api.connect.eager import eager_inputs
from api.connect.limits import (
    LimitedCalls,
    Statement,
    StatementLimits,
    backend_class,
    end_streams,
)
from api.connect.outcomes import CallOutcomes, Refusal
from api.connect.relations import PlanGovernor
from api.connect.sessions import SessionRefused, SessionRegistry, Sweeper
from api.connect.settings import checked_keys, config_answer
from api.connect.verified import KEPT, VerifiedQuery, identity
from api.directory import directory_of
from governance.errors import AccessDenied
from governance.metrics import CACHE_BOUND, CACHE_ENTRIES, CONNECT_SESSIONS
from governance.runtime.spark import task_slots
from governance.session.governed import GovernedSession, Lakegate

REFUSED_COMMANDS = {
    "register_function": "Python and Scala UDFs are refused",
    "register_table_function": "user-defined table functions are refused",
    "write_stream_operation_start": "streaming is refused",
    "streaming_query_command": "streaming is refused",
    "streaming_query_manager_command": "streaming is refused",
    "get_resources_command": "resource queries are refused",
    "extension": "command extensions are refused",
}
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_INTERRUPTS = {
    base_pb2.InterruptRequest.INTERRUPT_TYPE_ALL: "all",
    base_pb2.InterruptRequest.INTERRUPT_TYPE_TAG: "tag",
    base_pb2.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID: "operation",
}


#: the gateways open in this process, oldest first (the gauges read the newest)
_LIVE: list[ConnectService] = []


class ConnectService(
    CallOutcomes,  # first: its audit and errors, not the mixins' declarations of them
    GatewayAnalysis,
    GatewayCommands,
    LimitedCalls,
    base_pb2_grpc.SparkConnectServiceServicer,
):
    """The governed Spark Connect endpoint in front of the in-JVM backend."""

    def __init__(self, lg: Lakegate, backend: Backend, *, tokens_from: Path | None = None) -> None:
        self.lg = lg
        self.backend = backend
        # looked up once: each name of a py4j package path, and a static member's name, is
        # a round trip to the JVM (three per statement before)
        self._set_active = lg.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession
        self.directory = directory_of(lg)
        self.auth = Authenticator(
            lg.config.api, lg.config.identity, self.directory, source=tokens_from
        )
        self._channel = grpc.insecure_channel(
            backend.target,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.stub = base_pb2_grpc.SparkConnectServiceStub(self._channel)
        cfg, api = lg.config.connect, lg.config.api
        self.sessions = SessionRegistry(
            per_user=cfg.max_sessions_per_user,
            total=cfg.max_sessions,
            idle_timeout=cfg.session_idle_timeout,
            release=backend.release,
        )
        slots = cfg.fair_share_slots
        if slots is None:  # auto: the backend's task slots (its jobs run in this driver's
            # SparkContext), read once; a cluster with no executor yet: Spark's parallelism
            slots = task_slots(lg.spark) or lg.spark.sparkContext.defaultParallelism
        self.limits = StatementLimits(
            per_user=cfg.max_statements_per_user,
            timeout=cfg.statement_timeout or api.timeout,
            row_limit=cfg.row_limit or api.row_limit,
            queue_wait=cfg.statement_queue_wait,
            fair_share_slots=slots,
            fair_share_window=cfg.fair_share_window,
            retry_after=cfg.busy_retry_delay,
            # a statement beyond its user's full queue is held before its busy answer
            # (limits.py `_may_hold`): at most a user's sessions, and half the sessions in
            # all, so held calls never take more than a quarter of the gRPC threads
            # (server.py: 2 x max_sessions)
            hold_per_user=cfg.max_sessions_per_user,
            hold_total=max(1, cfg.max_sessions // 2),
        )
        self._sweeper = Sweeper(self.sessions, min(cfg.session_idle_timeout / 2, 60.0))
        self._sweeper.start()
        # a user the identity provider deactivates or deletes (SCIM on a REST server of the
        # same catalog): refused at its next call, and its sessions end, within the
        # directory's refresh bound (catalog/directory.py) even when it makes no call
        self.directory.subscribe(self._deprovisioned)
        self._stop_watch = self.directory.watch()
        self._local_ops: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()
        _LIVE.append(self)
        self._gauge()
        #: the front's relay: its loopback port -> the client's address (server.py)
        self.relay_clients: Callable[[int], str | None] | None = None

    def _deprovisioned(self, user: str) -> None:
        self.auth.forget()
        self.sessions.end_user(user)

    def _gauge(self) -> None:
        """The process's session gauges read this gateway (one per process in a server; a
        closed gateway hands them back to the one still open, as tests open several)."""
        cfg = self.lg.config.connect
        CONNECT_SESSIONS.set_function(self.sessions.count)
        CACHE_ENTRIES.labels("connect_sessions").set_function(self.sessions.count)
        CACHE_BOUND.labels("connect_sessions").set(cfg.max_sessions)
        CACHE_ENTRIES.labels("connect_kept").set_function(self.sessions.kept)
        CACHE_BOUND.labels("connect_kept").set(KEPT * cfg.max_sessions)

    def close(self) -> None:
        if self in _LIVE:
            _LIVE.remove(self)
            if _LIVE:
                _LIVE[-1]._gauge()
        self._stop_watch()
        self._sweeper.stop()
        self._channel.close()

    # the RPCs ---------------------------------------------------------------------------

    def ExecutePlan(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """A query runs as the Dataset its verification kept in the backend session, under
        a fresh unguessable key (analyze.py's `kept_key`), forgotten when the call ends
        however it ends."""
        call = self._begin("executePlan", request, context)
        if not request.operation_id:  # the gateway must know it to cancel the operation
            request.operation_id = str(uuid.uuid4())
        kept = None
        if request.plan.WhichOneof("op_type") == "root" and self.lg.config.verify_plans:
            kept = kept_key()
        try:
            yield from self._execute(call, request, context, kept)
        finally:
            if kept is not None:
                self.backend.forget(call.user, call.session_id, kept)

    def _execute(
        self, call: Call, request: Any, context: grpc.ServicerContext, kept: str | None
    ) -> Iterator[Any]:
        plan = request.plan
        stmt: Statement | None = None
        try:
            stmt = self._statement(call, request.operation_id, request.tags)
            op = plan.WhichOneof("op_type")
            if op == "command" and plan.command.WhichOneof("command_type") == "sql_command":
                answers = self._sql_command(call, request)
            elif (
                op == "command"
                and plan.command.WhichOneof("command_type") == "create_dataframe_view"
            ):
                answers = self._create_view(call, request)
            elif op == "command" and plan.command.WhichOneof("command_type") in (
                "write_operation",
                "write_operation_v2",
            ):
                answers = self._write(call, request)
            elif op == "command":
                kind = plan.command.WhichOneof("command_type")
                raise AccessDenied(
                    REFUSED_COMMANDS.get(
                        kind, f"Spark Connect command {kind} is not governed by Lakegate; refused"
                    )
                )
            elif op == "root":
                answers = None
                governed = self._govern(call, plan.root, keep=kept, reuse=True)
                if call.kept is not None:  # the verified Dataset itself (clients' are refused)
                    governed = kept_relation(call.kept)
                request.plan.root.CopyFrom(self._row_limited(governed))
            else:
                raise AccessDenied("an empty plan is refused")
        except Exception as e:
            self._answered_here(call, request.operation_id)  # refused: never in the backend
            self._fail(call, context, self._ended(stmt, e))
        finally:
            if stmt is not None:  # a refused statement set no job group (one py4j call less)
                self._clear_group()
        assert stmt is not None
        if answers is not None:
            self.limits.finish(stmt)
            self._allow(call, context)
            yield from answers
            return
        try:
            self._allow(call, context)
        except BaseException:
            self.limits.finish(stmt)
            raise
        self._forwarded(call, request.operation_id)
        yield from self._stream(
            call,
            context,
            stmt,
            self.stub.ExecutePlan(request, metadata=self._meta()),
            reattachable=any(
                o.WhichOneof("request_option") == "reattach_options"
                and o.reattach_options.reattachable
                for o in request.request_options
            ),
        )

    def Config(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Settings by name through the allow-lists (api/connect/settings.py); the keys the
        gateway answers itself never reach the backend, nor a read it answered before of
        keys no caller can set (`config_answer`)."""
        call = self._begin("config", request, context)
        try:
            op = request.operation
            kind = op.WhichOneof("op_type")
            keys = checked_keys(kind, getattr(op, kind) if kind else None)
        except Exception as e:
            self._fail(call, context, e)
        self._allow(call, context)

        def forward() -> Any:
            try:
                answer = self.stub.Config(request, metadata=self._meta())
                compat.answer(answer)
                return answer
            except grpc.RpcError as e:
                self._backend_error(call, context, e)

        memo = call.entry.config if call.entry is not None else None
        return config_answer(op, kind, keys, memo, call.session_id, forward)

    def AddArtifacts(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        first = next(iter(request_iterator), None)
        call = self._begin("addArtifacts", first or base_pb2.AddArtifactsRequest(), context)
        self._fail(
            call,
            context,
            AccessDenied(
                "artifacts (jars, Python files, archives, files) are refused through the Lakegate "
                "gateway"
            ),
        )

    def ArtifactStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = self._begin("artifactStatus", request, context)
        self._fail(
            call, context, AccessDenied("artifacts are refused through the Lakegate gateway")
        )

    def Interrupt(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Forwarded to the backend, and every statement it names is cancelled here too:
        its Spark jobs (gateway job group, backend job tag) and its concurrency slot."""
        call = self._begin("interrupt", request, context, admit=False)
        with self._held(call):
            return self._interrupt(call, request, context)

    def _interrupt(self, call: Call, request: Any, context: grpc.ServicerContext) -> Any:
        if call.entry is None:  # an expired session: its operations were interrupted then
            self._allow(call, context)
            return base_pb2.InterruptResponse(session_id=call.session_id)
        answer = self._forward_call(call, self.stub.Interrupt, request, context)
        kind = _INTERRUPTS.get(request.interrupt_type)
        if kind is not None:
            value = request.operation_tag if kind == "tag" else request.operation_id
            for stmt in self.limits.matching(call.user, call.session_id, kind, value):
                self.limits.cancel(stmt)
                if stmt.key[2] not in answer.interrupted_ids:
                    answer.interrupted_ids.append(stmt.key[2])
        return answer

    def ReattachExecute(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        call = self._begin("reattachExecute", request, context, admit=False)
        with self._held(call):
            yield from self._reattach(call, request, context)

    def _reattach(self, call: Call, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if call.entry is None:
            self._fail(
                call,
                context,
                Refusal(
                    grpc.StatusCode.NOT_FOUND,
                    "the Spark Connect session expired (connect.session_idle_timeout); its "
                    "operations were cancelled",
                ),
            )
        if self._is_local(call, request.operation_id):
            # refused or answered here: a stock client reattaches after a busy answer and,
            # told the operation is not found, sends its ExecutePlan again
            self._fail(
                call,
                context,
                Refusal(
                    grpc.StatusCode.NOT_FOUND,
                    "INVALID_HANDLE.OPERATION_NOT_FOUND: the operation is not running (the "
                    "gateway answered or refused it); send it again",
                ),
            )
        self._allow(call, context)
        stmt = self.limits.get((call.user, call.session_id, request.operation_id))
        yield from self._stream(
            call, context, stmt, self.stub.ReattachExecute(request, metadata=self._meta())
        )

    def ReleaseExecute(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = self._begin("releaseExecute", request, context, admit=False)
        with self._held(call):
            return self._release(call, request, context)

    def ReleaseSession(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Spark 4's `spark.stop()`: the caller's session is closed at once (its governed
        session dropped, the backend's released) rather than holding a place under
        `connect.max_sessions` until its idle expiry."""
        call = self._begin("releaseSession", request, context, admit=False)
        if call.entry is not None:
            self.sessions.finished(call.entry)  # found with `hold`; closed next
        self._allow(call, context)
        running = self.limits.matching(call.user, call.session_id, "all", "")
        for stmt in running:
            stmt.session_released = True  # their streams end now: abandoned, not failed
        self.sessions.close(call.user, call.session_id)
        for stmt in running:  # even those whose client keeps its call open, not reading
            end_streams(stmt, timed_out=False)
        return base_pb2.ReleaseSessionResponse(session_id=call.session_id)

    def _release(self, call: Call, request: Any, context: grpc.ServicerContext) -> Any:
        """A `release_until` is answered here: it only lets the backend drop responses
        already read, which Spark's own retry buffer bounds without it, and forwarding one
        per response batch cost a gRPC round trip each (about 5 per query). A `release_all`
        ends the backend's operation and is forwarded, unless the operation was answered
        here or its session expired."""
        key = (call.user, call.session_id, request.operation_id)
        until = request.WhichOneof("release") == "release_until"
        with self._lock:
            local = until or self._local_ops.pop(key, False) is None
        if local or call.entry is None:  # answered here, or its session expired: nothing
            # to release in the backend
            self._allow(call, context)
            return base_pb2.ReleaseExecuteResponse(
                session_id=call.session_id, operation_id=request.operation_id
            )
        return self._released(call, request, context)

    # governing --------------------------------------------------------------------------

    def _session(self, call: Call) -> tuple[GovernedSession, threading.RLock]:
        """The user's governed session for this Connect session. The calling gRPC thread's
        JVM thread gets Lakegate's SparkSession as its active one: Spark's analyzer reads
        its settings from the active session, and the verifier analyses statements directly
        (outside `spark.sql`), where a fresh thread would have none."""
        self._set_active(self.lg.spark._jsparkSession)
        entry = call.entry
        assert entry is not None  # admitted in _begin
        with self._lock:
            if entry.governed is None:
                entry.governed = self.lg.session(
                    call.user,
                    auth=call.auth,
                    proto="connect",
                    ip=call.ip,
                    caller_context=f"connect:{call.session_id}",
                    claims=call.claims,
                )
            elif entry.governed.claims != call.claims:
                # a newer token of the same user (its groups changed at the provider)
                entry.governed.assert_claims(call.claims)
        return entry.governed, entry.lock

    def _govern(
        self,
        call: Call,
        rel: Any,
        *,
        reads: bool = True,
        keep: str | None = None,
        remember: bool = False,
        reuse: bool = False,
    ) -> Any:
        """The governed, verified copy of a relation (runs in the user's session lock);
        its reads' lines are written before it returns (`reads=False`: the request reads
        no data, its lines name no column; `keep`: its verified Dataset stays in the backend
        session under that key; `call.kept` names the Dataset to run). `reuse` (with `keep`):
        a governed plan this session's `spark.sql` verified before (verified.py) is not
        verified again, and `call.kept` names the Dataset kept then. `remember` (with
        `keep`): this verification is kept for such later uses (the caller forgets `keep`
        when it is not: see `_verify_query`)."""
        session, lock = self._session(call)
        entry = call.entry
        with lock:
            gov = PlanGovernor(session, rel.SerializeToString())
            call.seen = gov.seen
            with gov.held_lines(reads=reads):
                out = gov.relation(rel)
                ident = None
                # only spark.sql's queries are remembered: a bare `sql` relation
                if (
                    (reuse or remember)
                    and keep is not None
                    and entry is not None
                    and out.WhichOneof("rel_type") == "sql"
                    and not eager_inputs(out)
                ):
                    sources = self.lg.sources
                    ident = identity(
                        out,
                        session.lg.policy_version,
                        (self.lg.catalog.store.generation(), sources.epoch if sources else 0),
                    )
                    found = entry.verified.get(ident) if reuse else None
                    if found is not None:
                        # the run's session is checked as a verification checks it
                        self.backend.secure(call.user, call.session_id)
                        gov.note_columns(found.columns)
                        call.kept = found.key
                        return out
                gov.verify(out, self.backend, call.session_id, keep=keep)
                call.kept = keep
                if remember and keep is not None and entry is not None and ident is not None:
                    query = VerifiedQuery(keep, gov.noted[-1] if gov.noted else ())
                    for key in entry.verified.remember(ident, query):
                        self.backend.forget(call.user, call.session_id, key)
        return out

    # calls, audit, errors ---------------------------------------------------------------

    @contextmanager
    def _held(self, call: Call) -> Iterator[None]:
        """A call about an operation keeps its session from expiry until it ends (found with
        `hold` in `_begin`)."""
        try:
            yield
        finally:
            if call.entry is not None:
                self.sessions.finished(call.entry)

    def _begin(
        self, cmd: str, request: Any, context: grpc.ServicerContext, *, admit: bool = True
    ) -> Call:
        """Authenticate, force the verified user into the request, hash it for the audit,
        and admit the session (sessions.py; `admit=False`: only find it, for calls about an
        operation, which never open a session)."""
        ip = _peer_ip(context.peer())
        if ip == "127.0.0.1" and self.relay_clients is not None:
            ip = self.relay_clients(int(context.peer().rsplit(":", 1)[1])) or ip
        session_id = str(getattr(request, "session_id", "") or "")
        call = Call(cmd, "anonymous", ip, session_id if _UUID.match(session_id) else "")
        call.stmt_hash = "sha256:" + hashlib.sha256(request.SerializeToString()).hexdigest()
        header = dict(context.invocation_metadata()).get("authorization")
        try:
            principal = self.auth.authenticate(header if isinstance(header, str) else None)
        except Unauthenticated as e:
            if isinstance(e, Deprovisioned):  # on record as the user; its sessions end now
                call.user = e.user
                self.sessions.end_user(e.user)
            self._fail(call, context, Refusal(grpc.StatusCode.UNAUTHENTICATED, str(e)))
        call.user, call.auth, call.claims = principal.user, principal.audit_method, principal.claims
        try:
            compat.accept(request)  # a newer client's fields: translated, dropped or refused
        except AccessDenied as e:
            self._fail(call, context, e)
        if not call.session_id:
            self._fail(
                call,
                context,
                Refusal(grpc.StatusCode.INVALID_ARGUMENT, "session_id must be a UUID"),
            )
        if request.HasField("user_context"):
            request.user_context.Clear()
        request.user_context.user_id = principal.user
        request.user_context.user_name = principal.user
        if not admit:
            call.entry = self.sessions.find(call.user, call.session_id, hold=True)
            return call
        try:
            call.entry = self.sessions.admit(call.user, call.session_id)
        except SessionRefused as e:
            self._fail(call, context, e)
        return call

    def _forward_call(
        self,
        call: Call,
        method: Any,
        request: Any,
        context: grpc.ServicerContext,
        *,
        if_gone: Callable[[], Any] | None = None,
    ) -> Any:
        """Forward a call after its allowed line. `if_gone`: the answer when the backend no
        longer has the session because its client released it meanwhile (a ReleaseExecute
        racing the client's own ReleaseSession): nothing is left to act on, and the call's
        one line stands, rather than a failure line beside it."""
        self._allow(call, context)
        try:
            answer = method(request, metadata=self._meta())
            compat.answer(answer)
            return answer
        except grpc.RpcError as e:
            if (
                if_gone is not None
                and (backend_class(e) or "").startswith("INVALID_HANDLE.SESSION_")
                and not self.sessions.held(call.user, call.session_id)
            ):
                return if_gone()
            self._backend_error(call, context, e)
        finally:
            # Spark 3.5's backend makes a session for an operation call that names none (a
            # release racing the session's expiry would bring it back): drop it again
            if call.entry is not None and not self.sessions.held(call.user, call.session_id):
                self.backend.release(call.user, call.session_id)

    def _meta(self) -> list[tuple[str, str]]:
        return self.backend.metadata


def _peer_ip(peer: str) -> str:
    """gRPC's `ipv4:1.2.3.4:5678` / `ipv6:[::1]:5678` as the address alone."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return kind or "unknown"
