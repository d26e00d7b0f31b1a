"""Govern a Spark Connect plan before Spark sees it: an allow-list walk of the proto tree.

Every relation and expression type is on an allow-list or refused with one line, never
passed through. Each walk visits every field of an allowed message (by its descriptor), so
no relation or expression can hide in a field the walker does not know. Table reads become
governed SQL: a `sql` relation is planned by the user's `GovernedSession` (the same planner,
audit lines and verifier as `s.sql`) and replaced by the rewritten SQL; `read.named_table`
(`spark.table`, `spark.read.table`) becomes the governed `SELECT *` of that table, or, when
its one-part name is a temporary view of the session, the view's stored relation, governed
here like any other (see `create_view`). Function
calls follow governance.sql.constructs' rules (identity functions become literals of the
verified user; denied and non-built-in functions are refused); expression strings
(`selectExpr`, `filter("...")`, `expr(...)`) are parsed with sqlglot, refused when they read
tables, and sent as sqlglot regenerates them. The composed plan is then analysed in the
backend session and checked by the plan verifier against every view placed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import sqlglot
from google.protobuf.descriptor import FieldDescriptor
from pyspark.sql.connect.proto import expressions_pb2, relations_pb2
from sqlglot import exp

from api.connect.eager import eager_inputs, message_children
from api.connect.verified import Columns
from governance.errors import Refused
from governance.execute.sources import ensure_pins
from governance.planning.views import TempView, expand, view_name
from governance.session.governed import table_statement
from governance.sql.constructs import (
    DENIED_FUNCTIONS,
    IDENTITY_MEMBER,
    IDENTITY_USER,
    METADATA_COLUMNS,
    SPARK_BUILTINS,
    govern_expression,
)
from governance.sql.parse import MAX_STATEMENT_CHARS, parse_statement
from governance.sql.resolve import checked_parts, qualify_name
from governance.verify.plan import Expected, Verified, columns_used, verify_plan
from governance.verify.readable import Seen, seen_by

if TYPE_CHECKING:
    from api.connect.backend import Backend
    from governance.planning.planned import Planned
    from governance.planning.writes import FrameInsert
    from governance.session.governed import GovernedSession

Relation = relations_pb2.Relation
Expression = expressions_pb2.Expression
MAX_DEPTH = 256
#: The reason on a read's lines when the plan it was placed in did not run.
NOT_RUN = "not run: the plan this read was placed in was refused or failed before it ran"

#: Relation types whose every field is walked (inputs governed, expressions checked).
RELATIONS = frozenset(
    {
        "project",
        "filter",
        "join",
        "set_op",
        "sort",
        "limit",
        "offset",
        "tail",
        "aggregate",
        "local_relation",
        "sample",
        "deduplicate",
        "range",
        "subquery_alias",
        "repartition",
        "repartition_by_expression",
        "to_df",
        "with_columns_renamed",
        "show_string",
        "html_string",
        "drop",
        "with_columns",
        "unpivot",
        "to_schema",
        "fill_na",
        "drop_na",
        "replace",
        "summary",
        "describe",
        "crosstab",
        "cov",
        "corr",
        "approx_quantile",
        "freq_items",
        "sample_by",
        "collect_metrics",
    }
)
#: Refused relation types with the reason the caller reads.
REFUSED_RELATIONS = {
    "map_partitions": "Python UDFs (mapInPandas/mapInArrow) are refused",
    "group_map": "Python UDFs (applyInPandas) are refused",
    "co_group_map": "Python UDFs (cogroup applyInPandas) are refused",
    "apply_in_pandas_with_state": "Python UDFs (applyInPandasWithState) are refused",
    "common_inline_user_defined_table_function": "user-defined table functions are refused",
    "catalog": "catalog calls (spark.catalog.*) are refused: they expose tables and "
    "locations the policies hide; use spark.sql('SHOW TABLES') or "
    "spark.sql('DESCRIBE t')",
    "cached_local_relation": "server-side cached relations are refused",
    "cached_remote_relation": "server-side cached DataFrames are refused",
    "with_watermark": "streaming is refused",
    "parse": "parsing a DataFrame of strings as JSON or CSV is refused",
    "hint": "DataFrame hints are refused",
    "extension": "relation extensions are refused",
}
#: Expression types walked field by field; anything else is refused.
EXPRESSIONS = frozenset(
    {
        "unresolved_attribute",
        "unresolved_function",
        "call_function",
        "unresolved_star",
        "alias",
        "cast",
        "unresolved_regex",
        "sort_order",
        "lambda_function",
        "window",
        "unresolved_extract_value",
        "update_fields",
        "unresolved_named_lambda_variable",
    }
)
#: Nodes an expression string may not contain: they read tables or are statements.
_READS = (exp.Query, exp.Table, exp.Subquery, exp.Command, exp.DDL, exp.DML, exp.Lateral)


class PlanGovernor:
    """Rewrites the relations of one Connect request for one user's governed session."""

    def __init__(self, session: GovernedSession, sent: bytes = b"") -> None:
        self.session = session
        self.expected = Expected()
        self._sent = sent  # the request as the caller sent it: the words it may be told of
        self._views: list[tuple[str, tuple[str, ...]]] = []  # (alias, visible columns)
        self._hidden: set[str] = set()
        self._is_member = session.lg.enforcer.identity(
            session.user, session.claims.groups
        ).is_member
        self._expanded = 0  # bytes of DataFrame views substituted into this request
        # each read's outcome lines, held until the plan's analysis says what it reads
        self._held: list[Callable[[str | None], None]] = []
        self._planned: list[Planned] = []
        # parallel to `expected.views[location]`: the read's plan and its view's index
        self._owners: dict[str, list[tuple[Planned, int]]] = {}
        self.noted: list[Columns] = []  # the columns each verification found, in order

    # the read lines ---------------------------------------------------------------------

    @contextlib.contextmanager
    def held_lines(self, *, reads: bool = True) -> Iterator[None]:
        """Writes the held read lines on leaving (`record`), or, when the block fails, as
        reads that did not run; `reads=False`: the request reads no data (a schema, a
        `spark.sql` query not yet run), so the lines name no column."""
        try:
            yield
        except BaseException:
            self.record(NOT_RUN)
            raise
        if not reads:
            for planned in self._planned:
                planned.reads_nothing()
        self.record()

    def record(self, reason: str | None = None) -> None:
        """Write the held read lines, with the columns the verified plans read of each view
        (docs/audit-columns.md); before the plan runs, so no read goes unrecorded."""
        held, self._held = self._held, []
        for write in held:
            write(reason)

    # temporary views --------------------------------------------------------------------

    def create_view(
        self, name: str, rel: Relation, replace: bool, backend: Backend, session_id: str
    ) -> None:
        """df.createOrReplaceTempView(name): kept in the user's governed session, never in
        the backend. A `spark.sql(...)` or `spark.table(...)` DataFrame becomes a SQL temp
        view (`CREATE TEMP VIEW` planned, audited and analysed by the session, readable by
        spark.sql too); any other relation is stored as the user's own proto relation, its
        temp-view reads substituted, and governed and verified now and again at each read."""
        views = self.session.temp_views
        if views is None:
            raise Refused("temporary views need a session")
        name = view_name(exp.Table(this=exp.to_identifier(name)))
        views.check_new(name, replace)
        stored = Relation()
        stored.CopyFrom(rel)
        self._expand(stored, 0)
        query = _as_query(stored)
        if query is not None:
            create = exp.Create(
                kind="VIEW",
                this=exp.Table(this=exp.to_identifier(name)),
                replace=replace,
                properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
                expression=query,
            )
            self.session.sql(create.sql("spark"))
            return
        size = stored.ByteSize()
        if size > MAX_STATEMENT_CHARS:
            raise Refused(f"a temporary view's plan may be at most {MAX_STATEMENT_CHARS} bytes")
        self.verify(self.relation(stored), backend, session_id)
        views.put(TempView(name, relation=stored.SerializeToString(), size=size), replace)

    def _view(self, rel: Relation) -> TempView | None:
        """The session's temp view a plain one-part `read.named_table` names, if any."""
        r = rel.read
        views = self.session.temp_views
        if views is None or r.WhichOneof("read_type") != "named_table" or r.is_streaming:
            return None
        ident = r.named_table.unparsed_identifier
        return None if "." in ident or r.named_table.options else views.get(ident)

    def _expand(self, msg: Any, depth: int) -> None:
        """Temp views in a relation about to be stored, replaced by their definitions now
        (as Spark captures them): DataFrame views by their relation, SQL views and SQL text
        by SQL with the views expanded. The stored relation then names no temp view."""
        if depth > MAX_DEPTH:
            raise Refused(f"plan nests more than {MAX_DEPTH} levels; refused")
        if isinstance(msg, Relation):
            kind = msg.WhichOneof("rel_type")
            view = self._view(msg) if kind == "read" else None
            if view is not None:
                self._substitute(msg, view)
                return
            if kind == "read" and msg.read.WhichOneof("read_type") == "named_table":
                # qualified now, as a SQL view's tables are: a later USE or a later view of
                # the same name must not change what the stored relation reads
                named = msg.read.named_table
                parts = checked_parts(named.unparsed_identifier.split("."))
                named.unparsed_identifier = ".".join(qualify_name(parts, self.session.namespace))
                return
            if kind == "sql" and not (msg.sql.args or msg.sql.pos_args):
                tree = parse_statement(msg.sql.query)
                msg.sql.query = expand(tree, self.session.temp_views).sql("spark")
                return
        for child in message_children(msg):
            self._expand(child, depth + 1)

    def _substitute(self, rel: Relation, view: TempView) -> None:
        """`rel` (a read of `view`) becomes the view's definition, ungoverned: the caller
        governs the result (no read of a view ever escapes `_relation`)."""
        if view.relation is not None:
            self._expanded += view.size
            if self._expanded > MAX_STATEMENT_CHARS:
                raise Refused(
                    f"the plan's temporary views expand beyond {MAX_STATEMENT_CHARS} bytes"
                )
            stored = Relation.FromString(view.relation)
        else:
            assert view.query is not None
            query = exp.Select(expressions=[exp.Star()]).from_(
                exp.Subquery(
                    this=view.query.copy(),
                    alias=exp.TableAlias(this=exp.to_identifier(view.name)),
                )
            )
            stored = Relation(sql=relations_pb2.SQL(query=query.sql("spark")))
        if rel.HasField("common"):
            stored.common.CopyFrom(rel.common)
        rel.Clear()
        rel.MergeFrom(stored)

    # relations --------------------------------------------------------------------------

    def relation(self, rel: Relation) -> Relation:
        """A governed copy of `rel`; raises Refused/AccessDenied with one line."""
        out = Relation()
        out.CopyFrom(rel)
        self._relation(out, 0)
        return out

    def _relation(self, rel: Relation, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Refused(f"plan nests more than {MAX_DEPTH} levels; refused")
        kind = rel.WhichOneof("rel_type")
        if kind == "sql":
            self._sql(rel)
        elif kind == "read":
            self._read(rel, depth)
        elif kind in RELATIONS:
            self._walk(getattr(rel, kind), depth + 1)
        elif kind in REFUSED_RELATIONS:
            raise Refused(f"{REFUSED_RELATIONS[kind]} through the Lakegate gateway")
        else:
            raise Refused(
                f"Spark Connect relation type {kind or 'unset'} is not governed by "
                "Lakegate; refused"
            )

    def _sql(self, rel: Relation) -> None:
        q = rel.sql
        if q.args or q.pos_args:
            raise Refused("SQL parameters are not governed; inline the values")
        tree = parse_statement(q.query)
        if not isinstance(tree, exp.Query | exp.Values):
            raise Refused(
                "only queries can be DataFrames; statements run once, through spark.sql(...)"
            )
        rel.sql.query = self._plan(q.query)

    def _read(self, rel: Relation, depth: int) -> None:
        view = self._view(rel)
        if view is not None and view.relation is not None:  # SQL views: session.table
            self._substitute(rel, view)
            self._relation(rel, depth + 1)
            return
        r = rel.read
        if r.is_streaming:
            raise Refused("streaming reads are refused through the Lakegate gateway")
        if r.WhichOneof("read_type") != "named_table":
            raise Refused(
                "path reads (spark.read.load/parquet/json/csv/format) are refused; "
                "read governed tables with spark.table(...) or spark.sql(...)"
            )
        if r.named_table.options:
            raise Refused(
                "read options are not governed; for time travel use "
                "spark.sql('SELECT ... FROM t VERSION AS OF n')"
            )
        governed = self._plan(table_statement(r.named_table.unparsed_identifier))
        common = Relation()
        common.common.CopyFrom(rel.common)
        rel.Clear()
        rel.MergeFrom(common)
        rel.sql.query = governed

    def _plan(self, text: str) -> str:
        """Plan (through the plan cache) and audit a read in the governed session, once per
        use; the rewritten query SQL. Not analysed or verified here: the composed plan is,
        in the backend, before it runs (`verify`, which finds every view placed here)."""
        planned = self.session.plan_read(text, self._held)
        self._planned.append(planned)
        assert planned.sql is not None
        if planned.derived:
            raise Refused(
                "system.access.audit is not readable through Spark Connect; use "
                "`lakegate audit query` or spark.sql through the REST API"
            )
        # the backend's sessions share the driver's global temp views
        ensure_pins(self.session.lg.sources, self.session.lg.spark, planned.pins)
        self._views += [(v.alias, v.access.visible_columns) for v in planned.views]
        self._hidden.update(h for v in planned.views for h in v.access.hidden_columns)
        for loc, views in planned.expected.views.items():
            self.expected.views.setdefault(loc, []).extend(views)
            owners = self._owners.setdefault(loc, [])
            owners += [(planned, k) for k in planned.expected.owners.get(loc, [])]
        self.expected.policy_reads.update(planned.expected.policy_reads)
        return planned.sql

    def seen(self) -> Seen:
        """What an error about this request may name (governance/verify/readable.py)."""
        return seen_by(self._sent.decode("utf-8", "replace"), self._views, self._hidden)

    # expressions ------------------------------------------------------------------------

    def _expression(self, e: Expression, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Refused(f"expression nests more than {MAX_DEPTH} levels; refused")
        kind = e.WhichOneof("expr_type")
        if kind == "literal":
            return
        if kind == "common_inline_user_defined_function":
            raise Refused("Python and Scala UDFs are refused through the Lakegate gateway")
        if kind == "expression_string":
            e.expression_string.expression = self._expression_text(e.expression_string.expression)
            return
        if kind in ("unresolved_function", "call_function"):
            f = getattr(e, kind)
            if kind == "unresolved_function" and f.is_user_defined_function:
                raise Refused("user-defined functions are refused through the Lakegate gateway")
            if self._function(e, f.function_name.lower(), list(f.arguments)):
                return
        elif kind not in EXPRESSIONS:
            raise Refused(
                f"Spark Connect expression type {kind or 'unset'} is not governed "
                "by Lakegate; refused"
            )
        self._walk(getattr(e, kind), depth + 1)

    def _function(self, e: Expression, name: str, args: list[Expression]) -> bool:
        """Apply the function rules; True when `e` was replaced by a literal."""
        if name in IDENTITY_USER:
            if args:
                raise Refused(f"{name}() takes no arguments")
            e.Clear()  # named as Spark names the call, so df columns read the same
            e.alias.expr.literal.string = self.session.user
            e.alias.name.append(f"{name}()")
            return True
        if name in IDENTITY_MEMBER:
            if len(args) != 1 or args[0].literal.WhichOneof("literal_type") != "string":
                raise Refused(f"{name}() takes one string literal (a group name)")
            member = self._is_member(args[0].literal.string)
            e.Clear()
            e.literal.boolean = member
            return True
        if name in DENIED_FUNCTIONS:
            raise Refused(f"function {name}() is refused through the Lakegate gateway")
        if name not in SPARK_BUILTINS:
            raise Refused(f"function {name}() is not a Spark built-in; refused")
        return False

    def _expression_text(self, text: str) -> str:
        """A user's expression string, checked and regenerated from its sqlglot tree."""
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.ParseError:
            raise Refused("cannot parse expression string; refused") from None
        if any(isinstance(node, _READS) for node in tree.walk()):
            raise Refused(
                "expression strings may not read tables or run statements; use "
                "spark.sql(...) or spark.table(...)"
            )
        tree = govern_expression(
            tree, self.session.user, self._is_member, where="expression string"
        )
        return tree.sql("spark")

    # the generic walk -------------------------------------------------------------------

    def _walk(self, msg: Any, depth: int) -> None:
        """Every set field: relations and expressions governed, names checked."""
        for field, value in msg.ListFields():
            if field.type == FieldDescriptor.TYPE_STRING:
                for s in value if _repeated(field) else [value]:
                    _check_name(s)
                continue
            if field.type != FieldDescriptor.TYPE_MESSAGE:
                continue
            if field.message_type.GetOptions().map_entry:
                items = list(value.items())
                for k, v in items:
                    if isinstance(k, str):
                        _check_name(k)
                    if isinstance(v, str):
                        _check_name(v)
                    elif not isinstance(v, str | int | float | bool | bytes):
                        self._walk(v, depth + 1)
                continue
            for v in value if _repeated(field) else [value]:
                if isinstance(v, Relation):
                    self._relation(v, depth + 1)
                elif isinstance(v, Expression):
                    self._expression(v, depth + 1)
                else:
                    self._walk(v, depth + 1)

    # verification -----------------------------------------------------------------------

    def verify(
        self,
        rel: Relation,
        backend: Backend,
        session_id: str,
        *,
        whole: bool = True,
        keep: str | None = None,
    ) -> None:
        """The verifier's guarantee on the composed plan: analysed in the backend session the
        plan will run in, every read must be one of the views placed here. Spark's planner
        runs jobs while it plans some relations (`EAGER`) and hands back their result as a
        LocalRelation, which the verifier would see instead of the reads: so each such
        relation's inputs are analysed and verified on their own first, innermost first, and
        no job runs on a plan before it is verified. `whole=False`: only those inputs (the
        caller analyses the whole plan itself and verifies it later, e.g. a write). `keep`:
        the whole plan's Dataset stays in the backend session under this key, for the caller
        to run as verified (the caller forgets it, whether or not this accepts it)."""
        if not self.session.lg.config.verify_plans:
            backend.secure(self.session.user, session_id)
            return
        for inner in eager_inputs(rel):
            self._verify_one(inner, backend, session_id)
        if whole:
            self._verify_one(rel, backend, session_id, keep)

    def _verify_one(
        self, rel: Relation, backend: Backend, session_id: str, keep: str | None = None
    ) -> None:
        sent, user = rel.SerializeToString(), self.session.user
        if keep is None:
            plan = backend.analyze(sent, user, session_id)
        else:
            plan = backend.keep(sent, user, session_id, keep)
        self.note_reads(verify_plan(plan, self.expected, self.session.lg.analyze_view))

    def note_reads(self, verified: Verified) -> None:
        """The columns a verified plan reads of each view placed here, to each read's plan
        (added to what other verifications of this request found)."""
        self.note_columns(tuple(columns_used(verified)))

    def note_columns(self, columns: Columns) -> None:
        """`note_reads` from columns found before: a verified query run again
        (api/connect/verified.py) whose governed plan is this one."""
        self.noted.append(columns)
        for loc, i, positions in columns:
            planned, k = self._owners[loc][i]
            planned.add_read(k, self.expected.views[loc][i][1], positions)


class WriteSourceGovernor(PlanGovernor):
    """Governs the source of a DataFrame write and keeps the plan of every governed read in
    it (`sources`): the write may copy no column those reads mask for the user."""

    def __init__(self, session: GovernedSession, sent: bytes = b"") -> None:
        super().__init__(session, sent)
        self.sources: list[Planned] = []

    def _plan(self, text: str) -> str:
        sql = super()._plan(text)
        planned = self.session.last_planned
        if planned is None or planned.sql != sql:  # fail closed: the read's plan is unknown
            raise Refused("the DataFrame's reads could not be checked for a write; refused")
        self.sources.append(planned)
        return sql


def checked_write(source: Relation, frame: FrameInsert) -> Relation:
    """The relation a DataFrame write stores: the governed source's columns renamed to the
    target's (`to_df`), the stored row selected, and the writer's row check as a filter; the
    expressions are generated from writes.py's trees (as plan_insert's SQL wrapper is)."""
    rel = Relation()
    rel.to_df.input.CopyFrom(source)
    rel.to_df.column_names.extend(frame.columns)
    project = Relation()
    project.project.input.CopyFrom(rel)
    for e in frame.row:
        project.project.expressions.add().expression_string.expression = e.sql("spark")
    if frame.condition is None:
        return project
    checked = Relation()
    checked.filter.input.CopyFrom(project)
    checked.filter.condition.expression_string.expression = frame.condition.sql("spark")
    return checked


def _as_query(rel: Relation) -> exp.Expression | None:
    """A DataFrame that is plain SQL (`spark.sql`) or a plain table read (`spark.table`) as a
    query tree; None for any other relation."""
    kind = rel.WhichOneof("rel_type")
    if kind == "sql" and not (rel.sql.args or rel.sql.pos_args):
        tree = parse_statement(rel.sql.query)
        return tree if isinstance(tree, exp.Query | exp.Values) else None
    r = rel.read
    if (
        kind == "read"
        and r.WhichOneof("read_type") == "named_table"
        and not r.is_streaming
        and not r.named_table.options
    ):
        parts = [exp.to_identifier(p) for p in r.named_table.unparsed_identifier.split(".")]
        if len(parts) > 3:
            raise Refused("a table name has at most 3 parts")
        table = exp.Table(
            this=parts[-1],
            db=parts[-2] if len(parts) > 1 else None,
            catalog=parts[-3] if len(parts) > 2 else None,
        )
        return exp.Select(expressions=[exp.Star()]).from_(table)
    return None


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _check_name(text: str) -> None:
    """Column names, aliases and identifiers: file metadata columns are never readable."""
    low = text.lower()
    for name in METADATA_COLUMNS:
        if name in low:
            raise Refused(f"file metadata columns ({name}) are not readable")
