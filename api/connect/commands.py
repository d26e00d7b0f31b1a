"""The Spark Connect commands the gateway answers itself, in the user's governed session:
`spark.sql` of a statement (queries become governed relations), temporary views (kept per
user, never in the backend's shared catalog) and DataFrame writes (governed as INSERT,
intent before effect). The RPC handling around them is service.py's.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2
from sqlglot import exp

from api.connect.analyze import kept_key
from api.connect.call import Call
from api.connect.limits import LimitExceeded
from api.connect.relations import PlanGovernor, WriteSourceGovernor, checked_write
from audit.landing import commit_tag
from governance.errors import AccessDenied, LakegateError
from governance.execute.actions import execute_actions
from governance.execute.run import failed_run
from governance.planning.context import PlanningContext
from governance.planning.planned import Planned
from governance.planning.writes import FrameInsert, plan_frame_insert
from governance.sql.parse import parse_statement
from governance.sql.resolve import checked_parts
from governance.verify.plan import verify_plan

if TYPE_CHECKING:
    from api.connect.backend import Backend
    from api.connect.limits import StatementLimits
    from governance.session.governed import GovernedSession, Lakegate

#: DataFrame write settings that are refused, with the line the caller reads.
#: operations answered here whose ReleaseExecute is awaited (a client releases each at once)
LOCAL_OPS_KEPT = 10_000

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


class GatewayCommands:
    """The commands answered here, mixed into the ConnectService (which provides these)."""

    backend: Backend
    limits: StatementLimits
    _lock: threading.Lock
    _local_ops: OrderedDict[tuple[str, str, str], None]
    _session: Callable[[Call], tuple[GovernedSession, threading.RLock]]
    _govern: Callable[..., Any]
    lg: Lakegate

    def _sql_command(self, call: Call, request: Any) -> list[Any]:
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
                query = relations_pb2.Relation(sql=relations_pb2.SQL(query=cmd.sql))
                self._verify_query(call, query)
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

    def _verify_query(self, call: Call, query: Any) -> None:
        """spark.sql(query) is governed and analysed now (a refusal reads here, as Spark's
        own analysis errors do), reading nothing yet; its verified Dataset is kept for the
        client's run of the same query (verified.py)."""
        if not self.lg.config.verify_plans:
            self._govern(call, query, reads=False)
            return
        key = kept_key()
        try:
            self._govern(call, query, reads=False, keep=key, remember=True, reuse=True)
        except BaseException:
            self.backend.forget(call.user, call.session_id, key)
            raise
        if call.entry is None or key not in call.entry.verified:  # not kept for later
            self.backend.forget(call.user, call.session_id, key)

    def _create_view(self, call: Call, request: Any) -> list[Any]:
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
            gov = PlanGovernor(session)
            with gov.held_lines():
                gov.create_view(cmd.name, cmd.input, cmd.replace, self.backend, call.session_id)
            if session.last_query_id:
                call.query_id = session.last_query_id
        return self._answers(call, request, None)

    def _write(self, call: Call, request: Any) -> list[Any]:
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
        with lock, contextlib.ExitStack() as stack:
            gov = WriteSourceGovernor(session, w.input.SerializeToString())
            stack.enter_context(gov.held_lines())
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
                if mode == "ignore":  # Spark's mode('ignore') on an existing table:
                    for source_plan in gov.sources:  # nothing written, nothing read
                        source_plan.reads_nothing()
                    return
                frame = frames[0]
                # tags the write carries (writes.frame_propagation), before the data lands
                execute_actions(planned.before, session.lg.catalog, session.lg.spark)
                rel = checked_write(source, frame)
                ds = self.backend.dataset(rel.SerializeToString(), call.user, call.session_id)
                lg = session.lg
                if lg.config.verify_plans:
                    gov.note_reads(
                        verify_plan(ds.queryExecution().analyzed(), gov.expected, lg.analyze_view)
                    )
                gov.record()  # the source's reads, with the columns written, before the write
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

    def _answered_here(self, call: Call, op_id: str) -> None:
        """The operation never reached the backend (answered or refused here): its
        ReleaseExecute is answered here too. The oldest of more than LOCAL_OPS_KEPT are
        dropped, so clients that never release cannot grow the set; a release that comes
        later than that is forwarded, and the backend's answer is that it has no such
        operation."""
        with self._lock:
            self._local_ops[(call.user, call.session_id, op_id)] = None
            while len(self._local_ops) > LOCAL_OPS_KEPT:
                self._local_ops.popitem(last=False)

    def _forwarded(self, call: Call, op_id: str) -> None:
        """The operation goes to the backend after all: a client retrying a busy answer
        sends the refused operation's id again, and its release and reattach must then
        reach the backend."""
        with self._lock:
            self._local_ops.pop((call.user, call.session_id, op_id), None)

    def _is_local(self, call: Call, op_id: str) -> bool:
        with self._lock:
            return (call.user, call.session_id, op_id) in self._local_ops

    def _answers(self, call: Call, request: Any, result: Any) -> list[Any]:
        """A command answered here: its result (if any) and completion; the operation id is
        remembered so that ReleaseExecute is answered here too."""
        op_id = request.operation_id or str(uuid.uuid4())
        self._answered_here(call, op_id)
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


def _arrow_bytes(df: Any, session: GovernedSession, row_limit: int) -> bytes | None:
    """A command's (small) result as the Arrow IPC stream a LocalRelation carries; None
    when it has no rows (a stream without batches carries no schema for Spark). More than
    `row_limit` rows are refused, as a query's are."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        rows = df.limit(row_limit + 1).collect()
    except Exception as e:
        raise failed_run(e, session.last_query_id or "", session.user) from None
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
