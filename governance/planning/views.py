"""Session-scoped temporary views: CREATE [OR REPLACE] TEMP VIEW, DROP VIEW, and their use.

Spark keeps temp views in the SparkSession, which every user of a process shares (REST
server, Connect gateway), so Lakegate never registers one. A view lives in one
`GovernedSession` (`TempViews`) as the user's own query tree: table names qualified against
the namespace it was created in, CTEs renamed, earlier temp views already expanded, nothing
governed yet. A single-part name that matches a view of the session (and no CTE in scope)
is expanded on the parsed tree before planning, so every use is decided, rewritten and
verified again, as the session user, with the policies then in force. That is at least as
strict as storing the governed rewrite of the creator: the stored tree contains no raw read
(every table in it becomes its governed view at use); a tightened policy applies at once;
a loosened one shows only what the user could read by running the query directly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from sqlglot import exp

from governance.errors import LakegateError, Refused
from governance.planning.context import PlanningContext
from governance.planning.planned import Planned
from governance.planning.queries import QUERY_TYPES
from governance.sql.parse import MAX_STATEMENT_CHARS, parse_statement
from governance.sql.resolve import resolve_tables, table_parts

#: Temporary views one session may hold.
MAX_TEMP_VIEWS = 100
NO_SESSION = (
    "temporary views need a governed session that outlives the statement (the embedded "
    "session or Spark Connect); REST statements and one-off plans have none"
)
#: Table arguments a temp view reference may carry; anything else (time travel, samples,
#: pivots) is refused rather than guessed at.
_REFERENCE_ARGS = frozenset({"this", "alias"})


@dataclass(frozen=True)
class TempView:
    """One view: `query` (a SQL view's stored tree) or `relation` (a Connect DataFrame
    view's serialized proto relation, its temp-view reads already substituted)."""

    name: str
    query: exp.Expression | None = None
    relation: bytes | None = None
    size: int = 0  # characters of the stored SQL (bytes of the relation)


#: Versions of temp-view sets, unique across sessions: a plan cache keys on them.
_VERSIONS = itertools.count(1)


class TempViews:
    """The temporary views of one session, by lower-case name (Spark compares them so);
    `version` moves on every change and is never shared by two sessions (0: no views)."""

    def __init__(self) -> None:
        self._views: dict[str, TempView] = {}
        self.version = 0

    def get(self, name: str) -> TempView | None:
        return self._views.get(name.lower())

    def names(self) -> list[str]:
        return sorted(v.name for v in self._views.values())

    def __len__(self) -> int:
        return len(self._views)

    def check_new(self, name: str, replace: bool) -> None:
        """Refuse a second view of the same name without OR REPLACE, and the cap."""
        if name.lower() in self._views:
            if not replace:
                raise LakegateError(f"temporary view {name} already exists")
            return
        if len(self._views) >= MAX_TEMP_VIEWS:
            raise Refused(
                f"a session holds at most {MAX_TEMP_VIEWS} temporary views; drop one first"
            )

    def put(self, view: TempView, replace: bool) -> None:
        self.check_new(view.name, replace)
        self._views[view.name.lower()] = view
        self.version = next(_VERSIONS)

    def drop(self, name: str) -> bool:
        dropped = self._views.pop(name.lower(), None) is not None
        self.version = next(_VERSIONS) if self._views else 0
        return dropped


@dataclass
class ViewPlanned(Planned):
    """A temp-view statement's plan: the session applies `create` or `drop` to its views
    once the intent is on record and (for CREATE) Spark analysed and verified the query."""

    create: TempView | None = None
    replace: bool = False
    drop: str | None = None
    drop_if_exists: bool = False

    def apply(self, views: TempViews) -> None:
        if self.create is not None:
            views.put(self.create, self.replace)
        elif self.drop is not None and not views.drop(self.drop) and not self.drop_if_exists:
            raise LakegateError(f"temporary view {self.drop} does not exist")


def is_view_statement(stmt: exp.Expression) -> bool:
    """CREATE ... VIEW and DROP VIEW, which this module plans (or refuses)."""
    return isinstance(stmt, exp.Create | exp.Drop) and (
        (stmt.args.get("kind") or "").upper() == "VIEW"
    )


def plan_view_statement(
    ctx: PlanningContext, stmt: exp.Create | exp.Drop, views: TempViews | None
) -> Planned:
    if isinstance(stmt, exp.Drop):
        ctx.cmd = "drop"
        return _plan_drop(stmt, views)
    ctx.cmd = "create"
    return _plan_create(ctx, stmt, views)


def view_name(node: exp.Expression) -> str:
    """A temp view's name: one part, a valid catalog name (`global_temp.v` and other
    qualified names are refused: those views would be shared or permanent)."""
    if not isinstance(node, exp.Table):
        raise Refused("a temporary view's name must be a plain identifier")
    parts = table_parts(node)
    if len(parts) != 1:
        raise Refused(
            f"temporary view name {'.'.join(parts)!r} is qualified; only session-scoped "
            "temporary views with one-part names are governed (global_temp and permanent "
            "views would be shared across users)"
        )
    return parts[0]


def _plan_create(ctx: PlanningContext, stmt: exp.Create, views: TempViews | None) -> Planned:
    props = stmt.args.get("properties")
    kinds = [type(p) for p in (props.expressions if props else [])]
    if exp.TemporaryProperty not in kinds:
        raise Refused(
            "CREATE VIEW (a permanent view) is not governed by Lakegate: it would be shared "
            "across users; use CREATE TEMPORARY VIEW"
        )
    if exp.GlobalProperty in kinds:
        raise Refused(
            "global temporary views are refused: global_temp is shared by every user of "
            "the Spark session"
        )
    if any(k is not exp.TemporaryProperty for k in kinds) or stmt.expression is None:
        raise Refused("CREATE TEMPORARY VIEW ... USING reads files by path; refused")
    if stmt.args.get("exists"):
        raise Refused("CREATE TEMPORARY VIEW IF NOT EXISTS is not valid; use OR REPLACE")
    for key in ("unique", "refresh", "concurrently"):
        if stmt.args.get(key):
            raise Refused(f"CREATE TEMPORARY VIEW with {key.upper()} is not governed")
    if views is None:
        raise Refused(NO_SESSION)
    target = stmt.this
    columns = None
    if isinstance(target, exp.Schema):
        columns = [_column_name(c) for c in target.expressions]
        target = target.this
    name = view_name(target)
    replace = bool(stmt.args.get("replace"))
    views.check_new(name, replace)
    query = stmt.expression
    if not isinstance(query, QUERY_TYPES):
        raise Refused("a temporary view is defined by a query")
    stored = expand(query.copy(), views)  # an old view of the same name is expanded here
    if columns is not None:
        stored = exp.Select(expressions=[exp.Star()]).from_(
            exp.Subquery(
                this=stored,
                alias=exp.TableAlias(this=exp.to_identifier(name), columns=columns),
            )
        )
    for ref in resolve_tables(stored, ctx.catalog, ctx.ns, ctx.user).reads:
        info = ref.info  # qualified now: a later USE must not change what the view reads
        ref.node.set("catalog", exp.to_identifier(info.catalog))
        ref.node.set("db", exp.to_identifier(info.schema))
        ref.node.set("this", exp.to_identifier(info.name))
    text = stored.sql("spark")
    checked = parse_statement(text)  # the size and nesting limits hold for the view
    planned = ViewPlanned(cmd="create", is_query=True, replace=replace)
    planned.create = TempView(name, query=stored, size=len(text))
    checked = ctx.govern(checked)
    _, reads = ctx.reads(checked)
    checked = ctx.views_sql(checked, reads, planned)
    planned.sql = ctx.generate(checked, planned)
    return planned


def _column_name(col: exp.Expression) -> exp.Identifier:
    """A view column list entry: a name, optionally with a COMMENT (kept nowhere)."""
    if isinstance(col, exp.Identifier):
        return col.copy()
    if isinstance(col, exp.ColumnDef) and col.args.get("kind") is None:
        for con in col.args.get("constraints") or []:
            if not isinstance(con.kind, exp.CommentColumnConstraint):
                raise Refused(f"view column {col.sql('spark')!r} is not governed")
        return col.this.copy()
    raise Refused(f"view column {col.sql('spark')!r} is not governed")


def _plan_drop(stmt: exp.Drop, views: TempViews | None) -> Planned:
    tables = stmt.args.get("tables") or []
    if len(tables) != 1:
        raise Refused("DROP VIEW takes one view")
    name = view_name(tables[0])
    if views is None:
        raise Refused(NO_SESSION)
    if_exists = bool(stmt.args.get("exists"))
    if views.get(name) is None and not if_exists:
        raise LakegateError(f"temporary view {name} does not exist")
    return ViewPlanned(
        cmd="drop",
        local_rows=[],
        local_schema="result string",
        drop=name,
        drop_if_exists=if_exists,
    )


@dataclass
class _Expansion:
    views: TempViews
    size: int = 0
    found: bool = False
    statement: exp.Expression | None = None
    written: set[int] = field(default_factory=set)  # ids of Table nodes a statement writes


def expand(stmt: exp.Expression, views: TempViews | None) -> exp.Expression:
    """`stmt` with every reference to a temp view of the session replaced by its stored
    query (one level: stored queries hold no view references). A CTE in scope shadows a
    view, a view shadows a catalog table (as in Spark). The expanded statement is
    re-parsed from its generated SQL, so the statement limits of governance.sql.parse apply to
    what is planned, not to what was typed."""
    if not views or isinstance(stmt, exp.Use):
        return stmt
    state = _Expansion(views, statement=stmt, written=_written(stmt))
    stack: list[tuple[exp.Expression, frozenset[str]]] = [(stmt, frozenset())]
    while stack:
        node, ctes = stack.pop()
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With):
            inner = set(ctes)
            for cte in with_.expressions:
                stack.append((cte.this, frozenset(inner)))  # sees earlier CTEs only
                inner.add(cte.alias_or_name.lower())
            children = [v for k, v in node.args.items() if k != "with_"]
            _push(stack, children, frozenset(inner))
            continue
        if isinstance(node, exp.Table) and _expand_reference(node, ctes, state):
            continue
        _push(stack, list(node.args.values()), ctes)
    if not state.found:
        return stmt
    if isinstance(stmt, exp.Describe):
        raise Refused("DESCRIBE of a temporary view is not governed; SELECT from it instead")
    return parse_statement(stmt.sql("spark"))


def _push(
    stack: list[tuple[exp.Expression, frozenset[str]]], values: list, ctes: frozenset[str]
) -> None:
    for v in values:
        for c in v if isinstance(v, list) else [v]:
            if isinstance(c, exp.Expression):
                stack.append((c, ctes))


def _written(stmt: exp.Expression) -> set[int]:
    """The Table nodes a statement writes, creates or drops: never expanded."""
    if isinstance(stmt, exp.Drop):
        return {id(t) for t in stmt.args.get("tables") or []}
    if not isinstance(stmt, exp.Insert | exp.Update | exp.Delete | exp.Merge | exp.Create):
        return set()
    node = stmt.this
    if isinstance(node, exp.Schema):
        node = node.this
    return {id(node)} if isinstance(node, exp.Table) else set()


def _expand_reference(node: exp.Table, ctes: frozenset[str], state: _Expansion) -> bool:
    """Replace `node` by its view's query if it names one; True when it did."""
    ident = node.this
    if (
        not isinstance(ident, exp.Identifier)
        or node.args.get("db") is not None
        or node.args.get("catalog") is not None
        or ident.this.lower() in ctes
    ):
        return False
    view = state.views.get(ident.this)
    if view is None:
        return False
    if id(node) in state.written:
        if isinstance(state.statement, exp.Create):
            return False  # CREATE TABLE v names a catalog table, not the view
        if isinstance(state.statement, exp.Drop):
            raise Refused(f"{view.name} is a temporary view; drop it with DROP VIEW")
        raise Refused(f"temporary view {view.name} cannot be written to")
    if view.query is None:
        raise Refused(
            f"temporary view {view.name} was made from a DataFrame; read it with "
            f"spark.table('{view.name}')"
        )
    extra = [k for k, v in node.args.items() if v and k not in _REFERENCE_ARGS]
    if extra:
        raise Refused(
            f"{extra[0].upper()} on temporary view {view.name} is not governed; "
            "apply it to the view's tables"
        )
    state.size += view.size
    if state.size > MAX_STATEMENT_CHARS:
        raise Refused(
            f"the statement's temporary views expand beyond {MAX_STATEMENT_CHARS} characters"
        )
    alias = node.args.get("alias")
    if alias is None:
        alias = exp.TableAlias(this=exp.to_identifier(ident.this, quoted=ident.quoted))
    node.replace(exp.Subquery(this=view.query.copy(), alias=alias.copy()))
    state.found = True
    return True
