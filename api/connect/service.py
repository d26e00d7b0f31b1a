"""The gateway's SparkConnectService: token, audit, governed plan, forward, scrubbed errors.

Each call: the bearer token names the user (the REST API's token configuration); the
verified user replaces whatever `user_context` the client declared, so the backend, which
keys sessions by (user, session id), never lets one user reach another's session. The plan
is governed (relations.py) and verified before the backend sees it; SQL commands and
DataFrame writes run through the user's governed session here (intent before effect). One audit
line per call (`proto=connect`), refusals included, is written before the answer; if it
cannot be written the call fails. Errors reach the client as one line: a refusal's reason,
or a failure's error class and query id (Spark's text goes to `lakegate.errors`).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc, commands_pb2, relations_pb2
from sqlglot import exp

from api.auth import TokenAuth, Unauthenticated
from api.connect import compat
from api.connect.backend import MAX_MESSAGE_BYTES, SECRET_HEADER, Backend
from api.connect.limits import (
    LimitedCalls,
    LimitExceeded,
    Statement,
    StatementLimits,
    StatementRefused,
)
from api.connect.relations import PlanGovernor, WriteSourceGovernor, checked_write
from api.connect.sessions import Entry, SessionRefused, SessionRegistry, Sweeper
from api.connect.settings import (
    answered_here,
    checked_keys,
    gateway_answers,
    split_gateway_keys,
)
from audit import AuditEvent, AuditWriteError
from audit.landing import commit_tag
from governance.actions import execute_actions
from governance.errors import AccessDenied, AuditUnavailable, LakegateError
from governance.execute import (
    ERROR_LOG,
    READABLE_ANALYSIS_ERRORS,
    StatementFailed,
    error_class,
    failure_message,
    message_parameters,
)
from governance.metrics import CONNECT_SESSIONS
from governance.parse import parse_statement
from governance.planning.context import PlanningContext
from governance.planning.planned import Planned
from governance.planning.writes import FrameInsert, plan_frame_insert
from governance.readable import Seen, readable_line, seen_by
from governance.resolve import checked_parts
from governance.session import GovernedSession, Lakegate
from governance.sources import SCHEMA_CHANGED
from governance.verify import verify_plan

REFUSED_COMMANDS = {
    "register_function": "Python and Scala UDFs are refused",
    "register_table_function": "user-defined table functions are refused",
    "write_stream_operation_start": "streaming is refused",
    "streaming_query_command": "streaming is refused",
    "streaming_query_manager_command": "streaming is refused",
    "get_resources_command": "resource queries are refused",
    "extension": "command extensions are refused",
}
#: DataFrame write settings that are refused, with the line the caller reads.
_WRITE_REFUSED = {
    "path": "path writes (df.write.save(path), option('path')) are refused; write a governed "
    "table with insertInto, saveAsTable or writeTo",
    "options": "DataFrame write options (mergeSchema, replaceWhere, path, ...) are not "
    "governed; refused",
    "table_properties": "DataFrame write table properties are not governed; refused",
    "provider": "writeTo(...).using(...) is refused; governed tables are Delta tables",
    "overwrite_condition": "writeTo(...).overwrite(condition) is refused (a conditional "
    "overwrite is not governed); use spark.sql('DELETE ...') and append",
    "partitioning_columns": "partitionBy/partitionedBy in DataFrame writes is refused; "
    "the table's layout is its owner's",
    "bucket_by": "bucketBy in DataFrame writes is refused; the table's layout is its owner's",
    "sort_column_names": "sortBy in DataFrame writes is refused; the table's layout is its owner's",
}
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: AnalyzePlan requests refused: Spark's cache is one for every user of the backend, so a
#: user would see (storageLevel) and drop (unpersist) another user's cached DataFrame.
_CACHE_REFUSED = (
    "persist/cache, unpersist and storageLevel are refused through the gateway: Spark's "
    "cache is shared by every user of the backend"
)
_INTERRUPTS = {
    base_pb2.InterruptRequest.INTERRUPT_TYPE_ALL: "all",
    base_pb2.InterruptRequest.INTERRUPT_TYPE_TAG: "tag",
    base_pb2.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID: "operation",
}


class _Refusal(Exception):
    """A call answered with `code` and one line, after its audit record."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Call:
    """One gRPC call: who, from where, its queryId and the plan's hash for the audit."""

    cmd: str
    user: str
    ip: str
    session_id: str
    query_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.perf_counter)
    stmt_hash: str | None = None
    entry: Entry | None = None  # the admitted session (sessions.py)
    seen: Callable[[], Seen] | None = None  # what an error may name (governance/readable.py)


class ConnectService(LimitedCalls, base_pb2_grpc.SparkConnectServiceServicer):
    """The governed Spark Connect endpoint in front of the in-JVM backend."""

    def __init__(self, lg: Lakegate, backend: Backend) -> None:
        self.lg = lg
        self.backend = backend
        self.auth = TokenAuth(lg.config.api)
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
        self.limits = StatementLimits(
            per_user=cfg.max_statements_per_user,
            timeout=cfg.statement_timeout or api.timeout,
            row_limit=cfg.row_limit or api.row_limit,
        )
        self._sweeper = Sweeper(self.sessions, min(cfg.session_idle_timeout / 2, 60.0))
        self._sweeper.start()
        self._local_ops: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        CONNECT_SESSIONS.set_function(lambda: len(self._sessions))
        #: the front's relay: its loopback port -> the client's address (server.py)
        self.relay_clients: Callable[[int], str | None] | None = None

    def close(self) -> None:
        self._sweeper.stop()
        self._channel.close()

    # the RPCs ---------------------------------------------------------------------------

    def ExecutePlan(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        call = self._begin("executePlan", request, context)
        plan = request.plan
        if not request.operation_id:  # the gateway must know it to cancel the operation
            request.operation_id = str(uuid.uuid4())
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
                request.plan.root.CopyFrom(self._row_limited(self._govern(call, plan.root)))
            else:
                raise AccessDenied("an empty plan is refused")
        except Exception as e:
            self._fail(call, context, self._ended(stmt, e))
        finally:
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
        yield from self._stream(
            call, context, stmt, self.stub.ExecutePlan(request, metadata=self._meta())
        )

    def AnalyzePlan(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = self._begin("analyzePlan", request, context)
        stmt: Statement | None = None
        try:
            kind = request.WhichOneof("analyze")
            if kind is None:
                raise AccessDenied("an empty analyze request is refused")
            if kind in ("persist", "unpersist", "get_storage_level"):
                raise AccessDenied(_CACHE_REFUSED)
            if kind == "explain":
                raise AccessDenied(
                    "explain is refused through the gateway: it shows the "
                    "governed views' storage locations and policy expressions"
                )
            if kind == "input_files":
                raise AccessDenied("input_files is refused: it shows storage locations")
            if kind == "ddl_parse":  # Spark parses the schema text: its settings first
                self.backend.secure(call.user, call.session_id)
            elif kind != "spark_version":
                stmt = self._statement(call, str(uuid.uuid4()), ())
                self._govern_fields(call, getattr(request, kind))
        except Exception as e:
            self._fail(call, context, self._ended(stmt, e))
        finally:
            self._clear_group()
        try:
            self._allow(call, context)
            return self.stub.AnalyzePlan(
                request, metadata=self._meta(), timeout=self.limits.timeout
            )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                self._fail(call, context, self.limits.timed_out())
            self._backend_error(call, context, e)
        finally:
            if stmt is not None:
                self.limits.finish(stmt)

    def Config(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Settings by name through the allow-lists (api/connect/settings.py); the keys the
        gateway answers itself never reach the backend."""
        call = self._begin("config", request, context)
        try:
            op = request.operation
            kind = op.WhichOneof("op_type")
            keys = checked_keys(kind, getattr(op, kind) if kind else None)
        except Exception as e:
            self._fail(call, context, e)
        self._allow(call, context)
        defaults = split_gateway_keys(op, kind)
        answer = base_pb2.ConfigResponse(session_id=call.session_id)
        if any(not answered_here(k) for k in keys):
            try:
                answer = self.stub.Config(request, metadata=self._meta())
            except grpc.RpcError as e:
                self._backend_error(call, context, e)
        return gateway_answers(answer, kind, keys, defaults)

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
        if call.entry is None:
            self._fail(
                call,
                context,
                _Refusal(
                    grpc.StatusCode.NOT_FOUND,
                    "the Spark Connect session expired (connect.session_idle_timeout); its "
                    "operations were cancelled",
                ),
            )
        self._allow(call, context)
        stmt = self.limits.get((call.user, call.session_id, request.operation_id))
        yield from self._stream(
            call, context, stmt, self.stub.ReattachExecute(request, metadata=self._meta())
        )

    def ReleaseExecute(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = self._begin("releaseExecute", request, context, admit=False)
        key = (call.user, call.session_id, request.operation_id)
        with self._lock:
            local = key in self._local_ops
            self._local_ops.discard(key)
        if local or call.entry is None:  # answered here, or its session expired: nothing
            # to release in the backend
            self._allow(call, context)
            return base_pb2.ReleaseExecuteResponse(
                session_id=call.session_id, operation_id=request.operation_id
            )
        return self._forward_call(call, self.stub.ReleaseExecute, request, context)

    # governing --------------------------------------------------------------------------

    def _session(self, call: _Call) -> tuple[GovernedSession, threading.RLock]:
        """The user's governed session for this Connect session. The calling gRPC thread's
        JVM thread gets Lakegate's SparkSession as its active one: Spark's analyzer reads
        its settings from the active session, and the verifier analyses statements directly
        (outside `spark.sql`), where a fresh thread would have none."""
        spark = self.lg.spark
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        entry = call.entry
        assert entry is not None  # admitted in _begin
        with self._lock:
            if entry.governed is None:
                entry.governed = self.lg.session(
                    call.user,
                    auth="TOKEN",
                    proto="connect",
                    ip=call.ip,
                    caller_context=f"connect:{call.session_id}",
                )
        return entry.governed, entry.lock

    def _govern(self, call: _Call, rel: Any) -> Any:
        """The governed, verified copy of a relation (runs in the user's session lock)."""
        session, lock = self._session(call)
        with lock:
            gov = PlanGovernor(session, rel.SerializeToString())
            call.seen = gov.seen
            out = gov.relation(rel)
            gov.verify(out, self.backend, call.session_id)
        return out

    def _govern_fields(self, call: _Call, msg: Any) -> None:
        """Every plan or relation an analyze request carries, governed in place."""
        for fd, value in msg.ListFields():
            if isinstance(value, base_pb2.Plan):
                if value.WhichOneof("op_type") != "root":
                    raise AccessDenied("only query plans can be analysed")
                value.root.CopyFrom(self._govern(call, value.root))
            elif isinstance(value, relations_pb2.Relation):
                value.CopyFrom(self._govern(call, value))
            elif fd.message_type is not None and fd.message_type.name not in (
                "DataType",
                "StorageLevel",
            ):
                raise AccessDenied(f"analyze field {fd.name} is not governed; refused")

    def _sql_command(self, call: _Call, request: Any) -> list[Any]:
        """spark.sql(text): queries become a `sql` relation governed on every later use;
        other statements run now through the governed session (intent before effect)."""
        cmd = request.plan.command.sql_command
        if cmd.args or cmd.pos_args:
            raise AccessDenied("SQL parameters are not governed; inline the values")
        session, lock = self._session(call)
        try:
            is_query = isinstance(parse_statement(cmd.sql), exp.Query | exp.Values)
        except LakegateError:
            is_query = False  # SHOW and friends, or a refusal the session words and audits
        result = base_pb2.ExecutePlanResponse.SqlCommandResult()
        with lock:
            if is_query:
                self._govern(call, relations_pb2.Relation(sql=relations_pb2.SQL(query=cmd.sql)))
                result.relation.sql.query = cmd.sql
            else:
                df = session.sql(cmd.sql)
                if session.last_query_id:
                    call.query_id = session.last_query_id
                data = _arrow_bytes(df, session, self.limits.row_limit)
                if data is not None:  # Spark takes an empty result by its schema alone
                    result.relation.local_relation.data = data
                result.relation.local_relation.schema = df.schema.json()
        return self._answers(call, request, result)

    def _create_view(self, call: _Call, request: Any) -> list[Any]:
        """df.createOrReplaceTempView / createTempView: the view is kept in this user's
        governed session for this Connect session id, never in the backend, whose catalog
        every user shares; global temporary views are refused."""
        cmd = request.plan.command.create_dataframe_view
        if cmd.is_global:
            raise AccessDenied(
                "global temporary views are refused: global_temp is shared by every user of "
                "the backend; use createOrReplaceTempView"
            )
        session, lock = self._session(call)
        with lock:
            PlanGovernor(session).create_view(
                cmd.name, cmd.input, cmd.replace, self.backend, call.session_id
            )
            if session.last_query_id:
                call.query_id = session.last_query_id
        return self._answers(call, request, None)

    def _write(self, call: _Call, request: Any) -> list[Any]:
        """df.write.insertInto / saveAsTable and df.writeTo(t).append(), governed as INSERT
        (writes.plan_frame_insert); nothing of the client's write options passes through.

        Executed here, not forwarded: the governed source and the checked wrapper are one
        relation that the backend turns into a Dataset once; that Dataset's analyzed plan is
        verified and that same Dataset is written to the target's Delta location from the
        catalog (the backend's Spark catalog knows no table), after the intent record."""
        cmd = request.plan.command
        w = getattr(cmd, cmd.WhichOneof("command_type"))
        if cmd.HasField("write_operation"):
            name, by_name, mode = _write_v1(w)
        else:
            name, by_name, mode = _write_v2(w)
        parts = checked_parts(name.split("."))
        if len(parts) > 3:
            raise AccessDenied("a table name has at most 3 parts")
        table = exp.Table(
            this=exp.to_identifier(parts[-1]),
            db=exp.to_identifier(parts[-2]) if len(parts) > 1 else None,
            catalog=exp.to_identifier(parts[-3]) if len(parts) > 2 else None,
        )
        session, lock = self._session(call)
        with lock:
            gov = WriteSourceGovernor(session, w.input.SerializeToString())
            call.seen = gov.seen
            source = gov.relation(w.input)
            gov.verify(source, self.backend, call.session_id, whole=False)  # before any job
            columns = [
                str(c)
                for c in self.backend.dataset(
                    source.SerializeToString(), call.user, call.session_id
                ).columns()
            ]
            frames: list[FrameInsert] = []

            def plan(ctx: PlanningContext) -> Planned:
                try:
                    planned, frame = plan_frame_insert(
                        ctx, table, columns, by_name, mode == "overwrite", gov.sources
                    )
                except AccessDenied as e:
                    if e.cmd != "modify" or not by_name:
                        raise
                    raise AccessDenied(
                        f"{e}; saveAsTable and writeTo write an existing table: create a new "
                        "one with spark.sql('CREATE TABLE ...') first",
                        cmd=e.cmd,
                        tables=e.tables,
                        policies=e.policies,
                    ) from None
                if mode == "error":
                    raise LakegateError(
                        f"table {planned.target_name} already exists; write it with "
                        "mode('append') or mode('overwrite')"
                    )
                frames.append(frame)
                return planned

            def execute(planned: Planned) -> None:
                if mode == "ignore":
                    return  # Spark's mode('ignore') on an existing table: nothing written
                frame = frames[0]
                # tags the write carries (writes.frame_propagation), before the data lands
                execute_actions(planned.before, session.lg.catalog, session.lg.spark)
                rel = checked_write(source, frame)
                ds = self.backend.dataset(rel.SerializeToString(), call.user, call.session_id)
                lg = session.lg
                if lg.config.verify_plans:
                    verify_plan(ds.queryExecution().analyzed(), gov.expected, lg.analyze_view)
                how = "overwrite" if frame.overwrite else "append"
                tag = commit_tag(session.last_query_id or "")  # resolves a lost outcome
                ds.write().format("delta").mode(how).option("userMetadata", tag).save(
                    frame.location
                )

            try:
                session.write(plan, execute, call.stmt_hash or "")
            finally:
                if session.last_query_id:
                    call.query_id = session.last_query_id
        return self._answers(call, request, None)

    def _answers(self, call: _Call, request: Any, result: Any) -> list[Any]:
        """A command answered here: its result (if any) and completion; the operation id is
        remembered so that ReleaseExecute is answered here too."""
        op_id = request.operation_id or str(uuid.uuid4())
        with self._lock:
            self._local_ops.add((call.user, call.session_id, op_id))
        head = dict(session_id=call.session_id, operation_id=op_id)
        out = []
        if result is not None:
            out.append(
                base_pb2.ExecutePlanResponse(
                    **head, response_id=str(uuid.uuid4()), sql_command_result=result
                )
            )
        out.append(
            base_pb2.ExecutePlanResponse(
                **head,
                response_id=str(uuid.uuid4()),
                result_complete=base_pb2.ExecutePlanResponse.ResultComplete(),
            )
        )
        return out

    # calls, audit, errors ---------------------------------------------------------------

    def _begin(
        self, cmd: str, request: Any, context: grpc.ServicerContext, *, admit: bool = True
    ) -> _Call:
        """Authenticate, force the verified user into the request, hash it for the audit,
        and admit the session (sessions.py; `admit=False`: only find it, for calls about an
        operation, which never open a session)."""
        ip = _peer_ip(context.peer())
        if ip == "127.0.0.1" and self.relay_clients is not None:
            ip = self.relay_clients(int(context.peer().rsplit(":", 1)[1])) or ip
        session_id = str(getattr(request, "session_id", "") or "")
        call = _Call(cmd, "anonymous", ip, session_id if _UUID.match(session_id) else "")
        call.stmt_hash = "sha256:" + hashlib.sha256(request.SerializeToString()).hexdigest()
        header = dict(context.invocation_metadata()).get("authorization")
        try:
            principal = self.auth.authenticate(header if isinstance(header, str) else None)
        except Unauthenticated as e:
            self._fail(call, context, _Refusal(grpc.StatusCode.UNAUTHENTICATED, str(e)))
        call.user = principal.user
        try:
            compat.accept(request)  # a newer client's fields: translated, dropped or refused
        except AccessDenied as e:
            self._fail(call, context, e)
        if not call.session_id:
            self._fail(
                call,
                context,
                _Refusal(grpc.StatusCode.INVALID_ARGUMENT, "session_id must be a UUID"),
            )
        if request.HasField("user_context"):
            request.user_context.Clear()
        request.user_context.user_id = principal.user
        request.user_context.user_name = principal.user
        if not admit:
            call.entry = self.sessions.find(call.user, call.session_id)
            return call
        try:
            call.entry = self.sessions.admit(call.user, call.session_id)
        except SessionRefused as e:
            self._fail(call, context, e)
        return call

    def _audit(
        self, call: _Call, *, allowed: bool, succeeded: bool, reason: str | None = None
    ) -> None:
        try:
            self.lg.audit.write(
                [
                    AuditEvent(
                        allowed=allowed,
                        user=call.user,
                        auth="TOKEN",
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
                    )
                ]
            )
        except AuditWriteError as e:
            ERROR_LOG.error("connect call %s not on record: %s", call.query_id, e)
            raise AuditUnavailable(f"audit log unavailable, access refused: {e}") from None

    def _allow(self, call: _Call, context: grpc.ServicerContext) -> None:
        """The call's allowed line before its answer; no line, no answer (fail closed)."""
        try:
            self._audit(call, allowed=True, succeeded=True)
        except AuditUnavailable as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    def _fail(self, call: _Call, context: grpc.ServicerContext, e: BaseException) -> NoReturn:
        """Record the refusal or failure, then answer with one line (never Spark's text)."""
        if isinstance(e, _Refusal):
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
        try:
            self._audit(call, allowed=allowed, succeeded=False, reason=message)
        except AuditUnavailable as ae:
            code, message = grpc.StatusCode.UNAVAILABLE, str(ae)
        context.abort_with_status(
            rpc_status.to_status(status_pb2.Status(code=code.value[0], message=message))
        )
        raise AssertionError("unreachable")  # abort_with_status raises

    def _backend_error(
        self, call: _Call, context: grpc.ServicerContext, e: grpc.RpcError
    ) -> NoReturn:
        """A backend failure as error class + query id; its exception type kept (class names
        only) so the client raises the same kind of error."""
        status = rpc_status.from_call(e)  # type: ignore[arg-type]
        info = error_details_pb2.ErrorInfo()
        for d in status.details if status else ():
            if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                d.Unpack(info)
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

    def _forward_call(
        self, call: _Call, method: Any, request: Any, context: grpc.ServicerContext
    ) -> Any:
        self._allow(call, context)
        try:
            return method(request, metadata=self._meta())
        except grpc.RpcError as e:
            self._backend_error(call, context, e)

    def _meta(self) -> list[tuple[str, str]]:
        return [(SECRET_HEADER, self.backend.secret)]


def _write_v1(w: Any) -> tuple[str, bool, str]:
    """df.write: (table, by name, mode); anything but a plain insertInto / saveAsTable of
    a delta (or unnamed) format is refused."""
    for fd, _ in w.ListFields():
        if fd.name in _WRITE_REFUSED:
            raise AccessDenied(_WRITE_REFUSED[fd.name])
        if fd.name not in ("input", "source", "table", "mode"):
            raise AccessDenied(f"DataFrame write field {fd.name} is not governed; refused")
    if w.HasField("source") and w.source.lower() != "delta":
        raise AccessDenied(
            f"DataFrame writes in format {w.source[:100]!r} are refused; governed tables are "
            "Delta tables (leave the format unset)"
        )
    if not w.HasField("table"):
        raise AccessDenied("DataFrame writes name a governed table (insertInto/saveAsTable)")
    method = w.table.save_method
    modes = commands_pb2.WriteOperation.SaveMode
    if method == commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_INSERT_INTO:
        # insertInto appends unless told to overwrite, whatever else the mode says (Spark)
        return (
            w.table.table_name,
            False,
            ("overwrite" if w.mode == modes.SAVE_MODE_OVERWRITE else "append"),
        )
    if method != commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE:
        raise AccessDenied("this DataFrame write method is not governed; refused")
    mode = {
        modes.SAVE_MODE_APPEND: "append",
        modes.SAVE_MODE_OVERWRITE: "overwrite",
        modes.SAVE_MODE_IGNORE: "ignore",
    }.get(w.mode, "error")  # Spark's default, SAVE_MODE_ERROR_IF_EXISTS
    return w.table.table_name, True, mode


def _write_v2(w: Any) -> tuple[str, bool, str]:
    """df.writeTo(t): only append() is governed; creating, replacing and conditional or
    partition overwrites are refused."""
    for fd, _ in w.ListFields():
        if fd.name in _WRITE_REFUSED:
            raise AccessDenied(_WRITE_REFUSED[fd.name])
        if fd.name not in ("input", "table_name", "mode"):
            raise AccessDenied(f"DataFrame write field {fd.name} is not governed; refused")
    modes = commands_pb2.WriteOperationV2
    if w.mode in (modes.MODE_CREATE, modes.MODE_REPLACE, modes.MODE_CREATE_OR_REPLACE):
        raise AccessDenied(
            "writeTo(...).create/replace/createOrReplace is refused; create the table with "
            "spark.sql('CREATE TABLE ...'), then append"
        )
    if w.mode != modes.MODE_APPEND:
        raise AccessDenied(
            "writeTo(...).overwrite/overwritePartitions is refused (a conditional or partition "
            "overwrite is not governed); use df.write.insertInto(t, overwrite=True) or "
            "spark.sql('DELETE ...') and append"
        )
    return w.table_name, True, "append"


#: Delta errors whose ErrorInfo carries no class, recognised by their message's first token
#: (only these constants are ever taken from the text, so it can carry no value).
_DELTA_CLASSES = frozenset({SCHEMA_CHANGED})
_CLASS_AT_START = re.compile(r"\[([A-Z][A-Z0-9_]*)\] ")


def _leading_class(details: str) -> str | None:
    """A known Delta error class that the backend's message starts with, else None."""
    m = _CLASS_AT_START.match(details)
    return m.group(1) if m and m.group(1) in _DELTA_CLASSES else None


def _spark_message(e: BaseException, call: _Call) -> str:
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


def _arrow_bytes(df: Any, session: GovernedSession, row_limit: int) -> bytes | None:
    """A command's (small) result as the Arrow IPC stream a LocalRelation carries; None
    when it has no rows (a stream without batches carries no schema for Spark). More than
    `row_limit` rows are refused, as a query's are."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        rows = df.limit(row_limit + 1).collect()
    except Exception as e:
        raise StatementFailed(
            failure_message(e, session.last_query_id or "", session.user)
        ) from None
    if len(rows) > row_limit:
        raise LimitExceeded(
            f"the result has more than {row_limit} rows (connect.row_limit)",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
    if not rows:
        return None
    schema = to_arrow_schema(df.schema)
    table = pa.Table.from_pylist([r.asDict() for r in rows], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _peer_ip(peer: str) -> str:
    """gRPC's `ipv4:1.2.3.4:5678` / `ipv6:[::1]:5678` as the address alone."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return kind or "unknown"
