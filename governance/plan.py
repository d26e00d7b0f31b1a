"""Steps 1-4 for one statement, without Spark: what runs, what it reads, what is recorded.

The statement kinds are an allow-list: queries, INSERT, UPDATE, DELETE, MERGE,
CREATE CATALOG/SCHEMA/TABLE [AS SELECT], DROP TABLE, USE, DESCRIBE, SHOW. Everything else
is refused, never passed through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from catalog.catalog import Catalog, CatalogError
from governance.constructs import govern_expression
from governance.errors import AccessDenied, LakegateError, Refused
from governance.masks import sql_type
from governance.parse import parse_statement
from governance.planning.expected import Expected
from governance.policy.enforcer import AmbiguousMask, Identity, PolicyEnforcer, TableAccess
from governance.resolve import (
    Namespace,
    TableRef,
    checked_parts,
    denied_or_missing,
    qualify_name,
    resolve_tables,
    table_parts,
)
from governance.rewrite import (
    PolicySql,
    ReadView,
    check_hidden_columns,
    columns_named,
    columns_read,
    quote_path,
    replace_reads,
    splice,
    view_sql,
)

# The message of our own raise_error/assert_true when a written row (INSERT, the new version
# of an UPDATEd or MERGEd row) fails the writer's row filter; the session maps it to
# AccessDenied. Users cannot call raise_error or assert_true themselves.
ROW_FILTER_VIOLATION = "LAKEGATE_ROW_FILTER_VIOLATION: a written row is outside the row filter"

_SHOW = re.compile(
    r"^\s*SHOW\s+(TABLES|SCHEMAS|DATABASES|CATALOGS)(?:\s+(?:FROM|IN)\s+([`\w.]+))?\s*;?\s*$",
    re.IGNORECASE,
)
_CREATE_CATALOG = re.compile(
    r"^\s*CREATE\s+CATALOG\s+(IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?\s*;?\s*$", re.IGNORECASE)
_QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery, exp.Values)
_ALLOWED_TABLE_PROPS = (exp.FileFormatProperty, exp.PartitionedByProperty,
                        exp.SchemaCommentProperty)

_CMDS: dict[type, str] = {
    **dict.fromkeys(_QUERY_TYPES, "select"), exp.Insert: "insert", exp.Update: "update",
    exp.Delete: "delete", exp.Merge: "merge", exp.Create: "create", exp.Drop: "drop",
    exp.Use: "use", exp.Describe: "describe",
}


@dataclass(frozen=True)
class CreateCatalog:
    """Add a catalog to the Lakegate catalog."""

    name: str
    if_not_exists: bool


@dataclass(frozen=True)
class CreateSchema:
    """Add a schema; a catalog error (missing catalog, existing schema) is the user's."""

    catalog: str
    schema: str
    if_not_exists: bool


@dataclass(frozen=True)
class RegisterTable:
    """After Spark created the Delta table at `location`: read its schema, register it."""

    catalog: str
    schema: str
    name: str
    location: str
    domain: str | None
    comment: str | None


@dataclass(frozen=True)
class DropTable:
    """Unregister the table; delete its files only if they are its own managed files."""

    catalog: str
    schema: str
    name: str
    location: str


# A DDL effect as plain data: the session executes it (governance/actions.py), so planning
# needs no handle on the session or Spark.
Action = CreateCatalog | CreateSchema | RegisterTable | DropTable


@dataclass
class Planned:
    cmd: str
    sql: str | None = None
    is_query: bool = False
    views: list[ReadView] = field(default_factory=list)
    expected: Expected = field(default_factory=Expected)
    target: TableAccess | None = None
    target_name: str | None = None
    dst: str | None = None
    columns: dict[int, list[str]] = field(default_factory=dict)  # view index -> columns read
    local_rows: list[tuple] | None = None
    local_schema: str | None = None
    before: tuple[Action, ...] = ()  # run after the intent record, before the SQL
    after: tuple[Action, ...] = ()  # run after the SQL succeeded
    namespace: Namespace | None = None
    derived: set[str] = field(default_factory=set)  # derived tables read (need a temp view)
    decided_by: tuple[str, ...] = ()  # policies that allowed a DDL statement

    @property
    def placeholders(self) -> list[str]:
        return [v.placeholder for v in self.views]

    def hidden_column(self, name: str) -> tuple[str, str] | None:
        low = name.lower()
        accesses = [v.access for v in self.views] + ([self.target] if self.target else [])
        for a in accesses:
            for h in a.hidden_columns:
                if h.lower() == low:
                    return a.table.full_name, h
        return None

    def audit_lines(self) -> list[dict[str, Any]]:
        """One line per table touched (views of one table merge), else one with src=null."""
        lines: list[dict[str, Any]] = []
        merged: dict[str, dict[str, Any]] = {}
        for i, v in enumerate(self.views):
            name = v.access.table.full_name
            cols = self.columns.get(i, [])
            line = merged.get(name)
            if line is None:
                line = {"cmd": self.cmd, "src": name, "dst": self.dst, "columns": [],
                        "masked": [], "row_filters": [], "policies": []}
                merged[name] = line
                lines.append(line)
            for c in cols:
                if c not in line["columns"]:
                    line["columns"].append(c)
                m = v.access.masks.get(c.lower())
                if m is not None and (c, m.mask.mask) not in line["masked"]:
                    line["masked"].append((c, m.mask.mask))
            for f in v.access.row_filters:
                if f.id not in line["row_filters"]:
                    line["row_filters"].append(f.id)
            for p in v.access.policy_ids:
                if p not in line["policies"]:
                    line["policies"].append(p)
        if self.target_name is not None and self.target_name not in merged:
            t = self.target
            lines.append({"cmd": self.cmd, "src": self.target_name, "dst": self.dst,
                          "row_filters": [f.id for f in t.row_filters] if t else [],
                          "policies": list(t.policy_ids) if t else list(self.decided_by)})
        if not lines:
            lines.append({"cmd": self.cmd, "src": None, "dst": self.dst})
        return lines

    def describe(self) -> str:
        return f"-- {self.cmd}: handled by Lakegate, no Spark SQL"


class Planner:
    def __init__(self, *, catalog: Catalog, enforcer: PolicyEnforcer, policy_sql: PolicySql,
                 user: str, namespace: Namespace, derived: dict[str, str] | None = None,
                 ) -> None:
        """`derived`: full table name -> the SQL relation it is read from (layer-owned temp
        views, e.g. the audit log), instead of its Delta location."""
        self.derived = derived or {}
        self.cmd = "select"  # the statement's audit cmd, known as soon as its kind is
        self.decided: dict[str, tuple[str, ...]] = {}  # table -> deciding policy ids
        self.filters: dict[str, tuple[str, ...]] = {}  # table -> row filter ids
        self.catalog = catalog
        self.enforcer = enforcer
        self.ps = policy_sql
        self.user = user
        self.ns = namespace
        self.ident: Identity = enforcer.identity(user)

    # entry ------------------------------------------------------------------------------

    def plan(self, statement: str | bytes) -> Planned:
        if isinstance(statement, str):
            m = _SHOW.match(statement)
            if m:
                self.cmd = "show"
                return self._show(m.group(1).upper(), m.group(2))
            m = _CREATE_CATALOG.match(statement)
            if m:
                self.cmd = "create"
                return self._create_catalog(m.group(2), bool(m.group(1)))
        stmt = parse_statement(statement)
        text = statement.decode("utf-8", "replace") if isinstance(statement, bytes) \
            else statement
        self._first_word = (text.split(None, 1) or ["?"])[0].upper()  # only for messages
        for hint in list(stmt.find_all(exp.Hint)):
            hint.pop()  # hints name tables; they only tune plans, so they are dropped
        try:
            return self._dispatch(stmt)
        except AmbiguousMask as e:
            raise Refused(f"policy conflict, statement refused: {e}") from None

    def _dispatch(self, stmt: exp.Expression) -> Planned:
        self.cmd = _CMDS.get(type(stmt), "refused")
        if isinstance(stmt, _QUERY_TYPES):
            return self._query(stmt)
        if isinstance(stmt, exp.Insert):
            return self._insert(stmt)
        if isinstance(stmt, exp.Update):
            return self._update(stmt)
        if isinstance(stmt, exp.Delete):
            return self._delete(stmt)
        if isinstance(stmt, exp.Merge):
            return self._merge(stmt)
        if isinstance(stmt, exp.Create):
            return self._create(stmt)
        if isinstance(stmt, exp.Drop):
            return self._drop(stmt)
        if isinstance(stmt, exp.Use):
            return self._use(stmt)
        if isinstance(stmt, exp.Describe):
            return self._describe(stmt)
        kind = _kind(stmt) if isinstance(stmt, exp.DDL | exp.DML | exp.Command | exp.Set | \
                                          exp.Cache | exp.Uncache | exp.Refresh | exp.Analyze
                                          ) else self._first_word
        raise Refused(f"statement kind {kind} is not governed by Lakegate")

    # shared -----------------------------------------------------------------------------

    def _govern(self, tree: exp.Expression) -> exp.Expression:
        return govern_expression(tree, self.user, self.ident.is_member,
                                 namespace=(self.ns.catalog, self.ns.schema))

    def _note(self, access: TableAccess, extra: tuple[str, ...] = ()) -> None:
        name = access.table.full_name
        self.decided[name] = tuple(dict.fromkeys((*access.policy_ids, *extra)))
        self.filters[name] = tuple(f.id for f in access.row_filters)

    def _access(self, ref: TableRef, privilege: str = "select") -> TableAccess:
        access = self.enforcer.table_access(self.ident, ref.info)
        self._note(access)
        if privilege not in access.privileges:
            raise denied_or_missing(self.user, privilege, ref.info.full_name)
        return access

    def _reads(self, stmt: exp.Expression, targets: set[int] | None = None,
               ) -> tuple[list[TableRef], list[tuple[TableRef, TableAccess]]]:
        resolved = resolve_tables(stmt, self.catalog, self.ns, self.user, targets)
        reads = [(r, self._access(r)) for r in resolved.reads]
        return resolved.targets, reads

    def _views_sql(self, stmt: exp.Expression, reads: list[tuple[TableRef, TableAccess]],
                   planned: Planned, scan: exp.Expression | None = None) -> exp.Expression:
        """Replace reads by views; `scan` is the user's part when `stmt` wraps it."""
        stmt, views = replace_reads(stmt, reads)
        check_hidden_columns(stmt, views, self.user)
        names, _, star, qstars = columns_named(scan if scan is not None else stmt)
        planned.views = views
        for i, v in enumerate(views):
            planned.columns[i] = columns_read(v, names, star, qstars)
            for c in planned.columns[i]:
                leak = v.access.mask_reads_hidden.get(c.lower())
                if leak is not None:  # the mask would show the hidden column's values
                    raise AccessDenied(
                        f"access denied: column mask {leak[0]} on "
                        f"{v.access.table.full_name}.{c} reads column {leak[1]}, which is "
                        f"hidden from user {self.user}", cmd=self.cmd,
                        tables=(v.access.table.full_name,), policies=(leak[0],))
        return stmt

    def _generate(self, stmt: exp.Expression, planned: Planned) -> str:
        """The statement's SQL with each view's body spliced in; the verifier learns the
        bodies it must find in Spark's plan."""
        bodies = []
        for v in planned.views:
            table = v.access.table
            body = view_sql(self.ps, self.ident, v.access, v.ref.node,
                            self.derived.get(table.full_name))
            if table.full_name in self.derived:
                planned.expected.add_derived(table.location, v.access.visible_columns)
                planned.derived.add(table.full_name)
            else:
                planned.expected.add_view(table.location, body, v.access.visible_columns)
            bodies.append(body)
        return splice(stmt.sql("spark", copy=False), planned.views, bodies)

    def _refuse_masked_reads(self, planned: Planned) -> None:
        """No copying masked data: a write may not read a column masked for its user."""
        masked: list[str] = []
        ids: list[str] = []
        for i, v in enumerate(planned.views):
            for c in planned.columns.get(i, []):
                applied = v.access.masks.get(c.lower())
                if applied is not None:
                    masked.append(f"{v.access.table.full_name}.{c}")
                    ids.append(applied.mask.id)
        if masked:
            target = planned.target_name or ""
            raise AccessDenied(
                f"access denied: a write may not read masked column(s) {', '.join(masked)} "
                f"(user {self.user})", cmd=planned.cmd, tables=(target,),
                policies=tuple(dict.fromkeys([*ids, *self.decided.get(target, ())])))

    def _target(self, node: exp.Table, privilege: str, cmd: str) -> tuple[TableRef, TableAccess]:
        if not isinstance(node, exp.Table):
            raise Refused(f"{cmd.upper()} target is not a table")
        targets, _ = self._reads(node, {id(node)})
        if not targets:
            c, s, t = qualify_name(table_parts(node), self.ns)
            raise denied_or_missing(self.user, privilege, f"{c}.{s}.{t}".lower())
        ref = targets[0]
        access = self.enforcer.table_access(self.ident, ref.info)
        ok, ids = self.enforcer.has_privilege(self.ident, privilege, ref.info.catalog,
                                              ref.info.schema, ref.info.name)
        self._note(access, ids)
        if not ok:
            raise denied_or_missing(self.user, privilege, ref.info.full_name)
        return ref, access

    # queries ----------------------------------------------------------------------------

    def _query(self, stmt: exp.Expression) -> Planned:
        planned = Planned(cmd="select", is_query=True)
        stmt = self._govern(stmt)
        _, reads = self._reads(stmt)
        stmt = self._views_sql(stmt, reads, planned)
        planned.sql = self._generate(stmt, planned)
        return planned

    # writes -----------------------------------------------------------------------------

    def _insert(self, stmt: exp.Insert) -> Planned:
        if isinstance(stmt.this, exp.Directory) or stmt.args.get("directory"):
            raise Refused("INSERT OVERWRITE DIRECTORY is refused; write into a governed table")
        for key in ("partition", "by_name", "where", "alternative", "conflict", "returning"):
            if stmt.args.get(key):
                raise Refused(f"INSERT with {key.upper().replace('_', ' ')} is not governed")
        stmt = self._govern(stmt)
        schema = stmt.this
        column_list: list[str] | None = None
        table_node = schema
        if isinstance(schema, exp.Schema):
            table_node = schema.this
            column_list = [c.name for c in schema.expressions]
        ref, access = self._target(table_node, "modify", "insert")
        info = ref.info
        planned = Planned(cmd="insert", target=access, target_name=info.full_name)
        hidden = {h.lower() for h in access.hidden_columns}
        if column_list is None:
            if hidden:
                raise AccessDenied(
                    f"access denied: INSERT into {info.full_name} without a column list would "
                    f"write columns hidden from user {self.user}; name the columns",
                    cmd="insert", tables=(info.full_name,))
            column_list = [c.name for c in info.columns]
        for c in column_list:
            if info.column(c) is None:
                raise LakegateError(f"column {c} does not exist in {info.full_name}")
            if c.lower() in hidden:
                raise AccessDenied(f"access denied: user {self.user} may not write column {c} "
                                   f"of table {info.full_name}", cmd="insert",
                                   tables=(info.full_name,))
        overwrite = bool(stmt.args.get("overwrite"))
        if overwrite and (access.row_filters or hidden):
            raise AccessDenied(
                f"access denied: INSERT OVERWRITE would replace rows or columns of "
                f"{info.full_name} hidden from user {self.user}", cmd="insert",
                tables=(info.full_name,))
        source = stmt.expression
        if source is None:
            raise Refused("INSERT without a query or VALUES is not governed")
        _, reads = self._reads(source)
        if reads:
            planned.dst = info.full_name
        # the source's columns are renamed to the target's on the tree (a TableAlias with
        # columns), so nothing in the source's text can change the wrapper
        src = exp.Subquery(this=source, alias=exp.TableAlias(
            this=exp.to_identifier("__lg_src"),
            columns=[exp.to_identifier(c, quoted=True) for c in column_list]))
        query = exp.Select(expressions=[exp.column(c, quoted=True) for c in column_list])
        check = self.ps.filter_check(self.ident, access)
        if check is None:
            query = query.from_(src, copy=False)
        else:
            # Check what is stored: cast each value to its column's type as Spark's store
            # assignment would, check the filter on the cast row, insert those same values.
            present = {c.lower() for c in column_list}
            row = [exp.alias_(exp.cast(exp.column(c, quoted=True), sql_type(
                info.column(c).type_text)), c, quoted=True) for c in column_list]  # type: ignore[union-attr]
            row += [exp.alias_(exp.cast(exp.null(), sql_type(c.type_text)), c.name, quoted=True)
                    for c in info.columns if c.name.lower() not in present]
            cast = exp.Select(expressions=row).from_(src, copy=False)
            assert_row = exp.Anonymous(this="assert_true", expressions=[
                check, exp.Literal.string(ROW_FILTER_VIOLATION)])
            query = query.from_(exp.Subquery(this=cast, alias=exp.TableAlias(
                this=exp.to_identifier("__lg_chk"))), copy=False).where(
                exp.Is(this=assert_row, expression=exp.null()), copy=False)
        insert = exp.Insert(
            this=exp.Schema(this=_delta_table(info.location),
                            expressions=[exp.to_identifier(c, quoted=True) for c in column_list]),
            expression=query, overwrite=overwrite)
        insert = self._views_sql(insert, reads, planned, scan=source)
        self._refuse_masked_reads(planned)
        planned.sql = self._generate(insert, planned)
        planned.expected.add_target(info.location)
        return planned

    def _check_target_columns(self, expr: exp.Expression, access: TableAccess, cmd: str,
                              alias: str | None) -> list[str]:
        """Columns of the target a write's own expressions read; hidden ones are denied."""
        by_low = {c.name.lower(): c.name for c in access.table.columns}
        hidden = {h.lower() for h in access.hidden_columns}
        read: list[str] = []
        for col in expr.find_all(exp.Column):
            if isinstance(col.this, exp.Star):
                raise Refused(f"{cmd.upper()} with * is not governed; name the columns")
            if col.table and alias and col.table.lower() != alias.lower():
                continue
            low = col.name.lower()
            if low in hidden:
                raise AccessDenied(
                    f"access denied: user {self.user} may not use column {by_low[low]} of "
                    f"table {access.table.full_name}", cmd=cmd, tables=(access.table.full_name,))
            if low in by_low and by_low[low] not in read:
                read.append(by_low[low])
        return read

    def _row_scoped(self, cmd: str, stmt: exp.Update | exp.Delete) -> Planned:
        stmt = self._govern(stmt)
        node = stmt.this
        ref, access = self._target(node, "modify", cmd)
        info = ref.info
        planned = Planned(cmd=cmd, target=access, target_name=info.full_name)
        alias = node.alias or None
        # the target's own expressions: SET right-hand sides and WHERE, subqueries aside
        own: list[exp.Expression] = [eq.expression for eq in stmt.expressions]
        if stmt.args.get("where") is not None:
            own.append(stmt.args["where"])
        read: list[str] = []
        for e in own:
            e = e.copy()
            for sub in list(e.find_all(exp.Subquery, exp.Select)):
                sub.replace(exp.Null())
            read += self._check_target_columns(e, access, cmd, alias)
        masked = sorted({c for c in read if c.lower() in access.masks})
        if masked:
            ids = tuple(dict.fromkeys(access.masks[c.lower()].mask.id for c in masked))
            raise AccessDenied(
                f"access denied: {cmd.upper()} may not read masked column(s) "
                f"{', '.join(masked)} of {info.full_name} (user {self.user})",
                cmd=cmd, tables=(info.full_name,), policies=(*ids, *access.grant_ids))
        for eq in stmt.expressions:
            if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
                raise Refused(f"{cmd.upper()} SET must assign plain columns")
            self._check_target_columns(eq.this, access, cmd, alias)
        _, reads = self._reads(stmt, {id(node)})
        planned.dst = info.full_name if reads else None
        stmt = self._views_sql(stmt, reads, planned)
        self._refuse_masked_reads(planned)
        check = self.ps.filter_check(self.ident, access, alias)
        if check is not None:
            fence = _Fence(check, access, alias or info.name, aliased=alias is not None)
            cond = stmt.args.get("where")
            stmt.set("where", exp.Where(
                this=_guarded(check, fence(cond.this) if cond else None)))
            for eq in stmt.expressions:
                eq.set("expression", fence(eq.expression))
            self._with_check(stmt.expressions, check, access, alias)
        target = _delta_table(info.location)
        if alias:
            target.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        stmt.set("this", target)
        planned.sql = self._generate(stmt, planned)
        planned.expected.add_target(info.location)
        return planned

    def _update(self, stmt: exp.Update) -> Planned:
        if stmt.args.get("from_") or stmt.args.get("joins"):
            raise Refused("UPDATE ... FROM is not governed; use MERGE")
        return self._row_scoped("update", stmt)

    def _delete(self, stmt: exp.Delete) -> Planned:
        if stmt.args.get("using") or stmt.args.get("tables"):
            raise Refused("DELETE ... USING is not governed; use MERGE")
        return self._row_scoped("delete", stmt)

    def _merge(self, stmt: exp.Merge) -> Planned:
        stmt = self._govern(stmt)
        node = stmt.this
        ref, access = self._target(node, "modify", "merge")
        info = ref.info
        planned = Planned(cmd="merge", target=access, target_name=info.full_name)
        alias = node.alias or info.name
        whens = stmt.args.get("whens")
        clauses = whens.expressions if whens is not None else []
        for w in clauses:
            then = w.args.get("then")
            if then is not None and any(isinstance(n, exp.Star) for n in then.walk()):
                raise Refused("MERGE with UPDATE SET * / INSERT * is not governed; name columns")
        own = stmt.copy()
        own.set("this", None)
        own.set("using", None)
        read = self._check_target_columns(own, access, "merge", alias)
        masked = [c for c in read if c.lower() in access.masks]
        if masked:
            raise AccessDenied(
                f"access denied: MERGE may not read masked column(s) {', '.join(masked)} of "
                f"{info.full_name} (user {self.user})", cmd="merge", tables=(info.full_name,))
        _, reads = self._reads(stmt, {id(node)})
        planned.dst = info.full_name
        stmt = self._views_sql(stmt, reads, planned)
        self._refuse_masked_reads(planned)
        check = self.ps.filter_check(self.ident, access, alias)
        if check is not None:
            # hidden target rows never match, and a row that is not matched by the source is
            # acted on only when it passes the filter; the user's expressions read a hidden
            # row's columns as NULL wherever Delta evaluates them (its join runs ON on every
            # target row of the candidate files)
            fence = _Fence(check, access, alias)
            stmt.set("on", _guarded(check, fence(stmt.args["on"])))
            for w in clauses:
                then = w.args.get("then")
                cond = w.args.get("condition")
                if w.args.get("source"):
                    w.set("condition", _guarded(check.copy(), fence(cond) if cond else None))
                elif w.args.get("matched") and cond is not None:
                    w.set("condition", fence(cond))
                if isinstance(then, exp.Update):
                    for eq in then.expressions:
                        eq.set("expression", fence(eq.expression))
                    self._with_check(then.expressions, check, access, alias)
                elif isinstance(then, exp.Insert):
                    self._merge_insert_check(then, check, access, alias)
        target = _delta_table(info.location)
        target.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        stmt.set("this", target)
        planned.sql = self._generate(stmt, planned)
        planned.expected.add_target(info.location)
        return planned

    def _with_check(self, assignments: list[exp.Expression], check: exp.Expression,
                    access: TableAccess, alias: str | None) -> None:
        """PostgreSQL's WITH CHECK for UPDATE: the new row must pass the writer's filters.

        Each value is cast to its column's type (what is stored) and becomes
        CASE WHEN <filter over the new row> THEN <value> ELSE raise_error(marker) END, so one
        failing row fails the whole job and nothing is written."""
        if not assignments or not (self.ps.filter_columns(access) & {
                eq.this.name.lower() for eq in assignments}):
            return  # the filter reads no assigned column: the new row passes as the old did
        new: dict[str, exp.Expression] = {}
        for eq in assignments:
            col = access.table.column(eq.this.name)
            if col is None:
                raise LakegateError(f"column {eq.this.name} does not exist in "
                                    f"{access.table.full_name}")
            new[col.name.lower()] = exp.cast(exp.paren(eq.expression), sql_type(col.type_text))
        passes = _substituted(check, new, alias)
        for eq in assignments:
            eq.set("expression", _checked(passes, new[eq.this.name.lower()]))

    def _merge_insert_check(self, then: exp.Insert, check: exp.Expression,
                            access: TableAccess, alias: str) -> None:
        """MERGE's INSERT follows INSERT's rule: cast to the column types, check, store."""
        cols, values = then.this, then.expression
        if not isinstance(cols, exp.Tuple) or not isinstance(values, exp.Tuple) or \
                len(cols.expressions) != len(values.expressions):
            raise Refused("MERGE ... INSERT must name its columns and give one value each")
        table = access.table
        row = {c.name.lower(): exp.cast(exp.null(), sql_type(c.type_text))
               for c in table.columns}
        for c, v in zip(cols.expressions, values.expressions, strict=True):
            col = table.column(c.name)
            if col is None:
                raise LakegateError(f"column {c.name} does not exist in {table.full_name}")
            row[col.name.lower()] = exp.cast(exp.paren(v.copy()), sql_type(col.type_text))
        passes = _substituted(check, row, alias)
        values.set("expressions", [_checked(passes, row[table.column(c.name).name.lower()])
                                   for c in cols.expressions])  # type: ignore[union-attr]

    # DDL --------------------------------------------------------------------------------

    def _create_catalog(self, name: str, if_not_exists: bool) -> Planned:
        checked_parts([name])
        ok, ids = self.enforcer.has_privilege(self.ident, "manage", name, "*", "*")
        self.decided[f"{name.lower()}.*.*"] = ids
        if not ok:
            raise AccessDenied(f"access denied: user {self.user} may not create catalog "
                               f"{name.lower()} (needs MANAGE on {name.lower()}.*.*)",
                               cmd="create", tables=(f"{name.lower()}.*.*",))
        return Planned(cmd="create", before=(CreateCatalog(name, if_not_exists),),
                       local_rows=[], local_schema="result string", target_name=None,
                       decided_by=ids)

    def _create(self, stmt: exp.Create) -> Planned:
        kind = (stmt.args.get("kind") or "").upper()
        if kind in ("SCHEMA", "DATABASE"):
            return self._create_schema(stmt)
        if kind != "TABLE":
            raise Refused(f"CREATE {kind or '?'} is not governed by Lakegate "
                          "(views, functions and temporary objects are shared across users)")
        for key in ("clone", "replace", "unique", "indexes", "begin", "end", "shallow"):
            value = stmt.args.get(key)
            if value:
                raise Refused(f"CREATE TABLE with {key.upper()} is not governed")
        props = stmt.args.get("properties")
        for p in props.expressions if props else []:
            if not isinstance(p, _ALLOWED_TABLE_PROPS):
                raise Refused(f"CREATE TABLE property {p.sql('spark')!r} is not governed")
            if isinstance(p, exp.FileFormatProperty) and p.name.lower() != "delta":
                raise Refused("only Delta tables can be created (USING delta)")
        schema = stmt.this
        node = schema.this if isinstance(schema, exp.Schema) else schema
        c, s, t = qualify_name(table_parts(node), self.ns)
        name = f"{c}.{s}.{t}".lower()
        if not self.catalog.has_schema(c, s):
            raise LakegateError(f"schema {c}.{s} does not exist")
        decisions = [self.enforcer.has_privilege(self.ident, p, c, s, t)
                     for p in ("create", "manage")]
        ok = any(d[0] for d in decisions)
        ids = tuple(dict.fromkeys(i for d in decisions for i in d[1]))
        self.decided[name] = ids
        if not ok:
            raise AccessDenied(f"access denied: user {self.user} has no CREATE privilege on "
                               f"schema {c}.{s}", cmd="create", tables=(name,))
        exists = self.catalog.table(c, s, t) is not None
        if_not_exists = bool(stmt.args.get("exists"))
        if exists and not if_not_exists:
            raise LakegateError(f"table {name} already exists")
        try:
            location = self.catalog.managed_location(c, s, t)
        except CatalogError as e:
            raise Refused(f"CREATE TABLE {name} refused: {e}") from None
        planned = Planned(cmd="create", target_name=name, decided_by=ids)
        if exists:
            planned.local_rows, planned.local_schema = [], "result string"
            return planned
        query = stmt.expression
        partition = next((p for p in (props.expressions if props else [])
                          if isinstance(p, exp.PartitionedByProperty)), None)
        part_sql = f" PARTITIONED BY {partition.this.sql('spark')}" if partition else ""
        comment = next((p for p in (props.expressions if props else [])
                        if isinstance(p, exp.SchemaCommentProperty)), None)
        if query is not None:
            if isinstance(schema, exp.Schema):
                raise Refused("CREATE TABLE AS SELECT with a column list is not governed")
            query = self._govern(query)
            _, reads = self._reads(query)
            planned.dst = name
            wrapper = exp.Select(expressions=[exp.Star()]).from_(
                exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("__lg_q"))))
            wrapper = self._views_sql(wrapper, reads, planned, scan=query)
            body = self._generate(wrapper, planned)
            planned.sql = (f"CREATE TABLE {quote_path(location)} USING delta{part_sql} "
                           f"AS {body}")
        else:
            if not isinstance(schema, exp.Schema) or not schema.expressions:
                raise Refused("CREATE TABLE needs a column list or AS SELECT")
            cols = []
            for cd in schema.expressions:
                if not isinstance(cd, exp.ColumnDef):
                    raise Refused(f"CREATE TABLE element {cd.sql('spark')!r} is not governed")
                for con in cd.args.get("constraints") or []:
                    allowed = exp.NotNullColumnConstraint | exp.CommentColumnConstraint
                    if not isinstance(con.kind, allowed):
                        raise Refused(f"column constraint {con.sql('spark')!r} is not governed")
                cols.append(cd.sql("spark"))
            planned.sql = (f"CREATE TABLE {quote_path(location)} ({', '.join(cols)}) "
                           f"USING delta{part_sql}")
        comment_text = comment.this.name if comment is not None else None
        domain = self.enforcer.policy_set.domain_of_schema(c, s)
        planned.after = (RegisterTable(c, s, t, location, domain, comment_text),)
        return planned

    def _create_schema(self, stmt: exp.Create) -> Planned:
        node = stmt.this
        parts = table_parts(node)
        if len(parts) == 1:
            c, s = self.ns.catalog, parts[0]
        elif len(parts) == 2:
            c, s = parts
        else:
            raise Refused(f"schema name {'.'.join(parts)} has too many parts")
        c, s = c.lower(), s.lower()
        if stmt.args.get("properties"):
            raise Refused("CREATE SCHEMA with properties or LOCATION is not governed")
        decisions = [self.enforcer.has_privilege(self.ident, p, c, s, "*")
                     for p in ("create", "manage")]
        ok = any(d[0] for d in decisions)
        ids = tuple(dict.fromkeys(i for d in decisions for i in d[1]))
        self.decided[f"{c}.{s}"] = ids
        if not ok:
            raise AccessDenied(f"access denied: user {self.user} may not create schema {c}.{s} "
                               f"(needs CREATE or MANAGE on {c}.{s}.*)", cmd="create",
                               tables=(f"{c}.{s}",))
        if_not_exists = bool(stmt.args.get("exists"))
        return Planned(cmd="create", before=(CreateSchema(c, s, if_not_exists),),
                       local_rows=[], local_schema="result string", target_name=f"{c}.{s}",
                       decided_by=ids)

    def _drop(self, stmt: exp.Drop) -> Planned:
        kind = (stmt.args.get("kind") or "").upper()
        if kind != "TABLE":
            raise Refused(f"DROP {kind or '?'} is not governed by Lakegate")
        tables = stmt.args.get("tables") or []
        if len(tables) != 1:
            raise Refused("DROP TABLE takes one table")
        node = tables[0]
        c, s, t = qualify_name(table_parts(node), self.ns)
        info = self.catalog.table(c, s, t)
        name = f"{c}.{s}.{t}".lower()
        ok, ids = self.enforcer.has_privilege(self.ident, "manage", c, s, t)
        self.decided[name] = ids
        if info is None:
            if stmt.args.get("exists") and ok:
                return Planned(cmd="drop", local_rows=[], local_schema="result string",
                               target_name=name, decided_by=ids)
            raise denied_or_missing(self.user, "manage", name)
        if not ok:
            raise denied_or_missing(self.user, "manage", name)
        return Planned(cmd="drop", before=(DropTable(c, s, t, info.location),), local_rows=[],
                       local_schema="result string", target_name=name, decided_by=ids)

    # session and metadata ---------------------------------------------------------------

    def _use(self, stmt: exp.Use) -> Planned:
        kind = (stmt.args.get("kind").name.upper() if stmt.args.get("kind") else "")
        parts = [p.lower() for p in table_parts(stmt.this)]
        if kind == "CATALOG":
            if len(parts) != 1 or not self.catalog.has_catalog(parts[0]):
                raise LakegateError(f"catalog {'.'.join(parts)} does not exist")
            ns = Namespace(parts[0], "default")
        else:
            if len(parts) == 1:
                ns = Namespace(self.ns.catalog, parts[0])
            elif len(parts) == 2:
                ns = Namespace(parts[0], parts[1])
            else:
                raise LakegateError(f"USE {'.'.join(parts)}: too many name parts")
            if not self.catalog.has_schema(ns.catalog, ns.schema):
                raise LakegateError(f"schema {ns.catalog}.{ns.schema} does not exist")
        return Planned(cmd="use", local_rows=[], local_schema="result string", namespace=ns)

    def _describe(self, stmt: exp.Describe) -> Planned:
        style = (stmt.args.get("style") or "").upper()
        if style in ("HISTORY", "DETAIL") or stmt.args.get("partition"):
            raise Refused(f"DESCRIBE {style or 'PARTITION'} is not governed by Lakegate")
        kind = (stmt.args.get("kind") or "TABLE").upper()
        if kind != "TABLE":
            raise Refused(f"DESCRIBE {kind} is not governed by Lakegate")
        node = stmt.this
        if not isinstance(node, exp.Table):
            raise Refused("DESCRIBE of a query is not governed")
        _, reads = self._reads(node)
        ref, access = reads[0]
        planned = Planned(cmd="describe", target=access, target_name=ref.info.full_name)
        rows = []
        for name in access.visible_columns:
            col = ref.info.column(name)
            assert col is not None
            applied = access.masks.get(name.lower())
            if applied is None:
                rows.append((col.name, col.type_text, col.comment))
                continue
            rows.append((col.name, masked_type(applied.mask.mask, col.type_text),
                         f"masked ({applied.mask.mask})"
                         + (f"; {col.comment}" if col.comment else "")))
        planned.local_rows = rows
        planned.local_schema = "col_name string, data_type string, comment string"
        return planned

    def _show(self, what: str, where: str | None) -> Planned:
        visible = [t for t in self.catalog.tables()
                   if self.enforcer.table_access(self.ident, t).can_select]
        planned = Planned(cmd="show")
        if what == "TABLES":
            parts = checked_parts((where or "").replace("`", "").split(".")) if where else []
            c, s = (parts if len(parts) == 2 else [self.ns.catalog, parts[0] if parts
                                                   else self.ns.schema])
            rows = [(t.catalog, t.schema, t.name) for t in visible
                    if t.catalog == c.lower() and t.schema == s.lower()]
            planned.local_rows = rows
            planned.local_schema = "catalog string, namespace string, tableName string"
        elif what in ("SCHEMAS", "DATABASES"):
            c = checked_parts([(where or self.ns.catalog).replace("`", "")])[0].lower()
            rows = sorted({(t.schema,) for t in visible if t.catalog == c})
            planned.local_rows = rows
            planned.local_schema = "namespace string"
        else:
            planned.local_rows = sorted({(t.catalog,) for t in visible})
            planned.local_schema = "catalog string"
        return planned


def _delta_table(location: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(location, quoted=True), db=exp.to_identifier("delta"))


def _guarded(check: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
    """`check AND (cond)`: the user's condition runs only on rows the filter lets through.

    `check` is coalesce(filter, false), never NULL, so Spark's AND (interpreted and
    generated code) skips its right side when it is false; Spark keeps conjunct order when
    it splits and pushes predicates, and a CASE WHEN guard would be simplified into this
    same AND (SimplifyConditionalsInPredicate) anyway. Delta's DELETE/UPDATE/MERGE only
    wrap the whole condition (`NOT (c <=> true)`, join conditions), never reorder it."""
    if cond is None:
        return check
    return exp.and_(check, exp.paren(cond), copy=False)


class _Fence:
    """Rewrites a user's write expression so that it reads each target column as
    `CASE WHEN check THEN col END`: on a row the filter hides it sees only NULLs.

    The guard `check AND (cond)` already skips hidden rows where Spark evaluates the AND
    itself, but Delta may evaluate a user's expression elsewhere (MERGE's join runs the ON
    condition on every target row of the candidate files, and its outputs are projections
    over them). Fenced, whatever runs on a hidden row computes over NULLs only: its result,
    its errors and its cost cannot depend on a hidden value. Inside a subquery only columns
    qualified by the target's alias are the target's, and only when `check` is qualified by
    it too (`aliased`); an unqualified check there would read the subquery's columns."""

    def __init__(self, check: exp.Expression, access: TableAccess, alias: str,
                 aliased: bool = True) -> None:
        self.check = check
        self.alias = alias.lower()
        self.columns = {c.name.lower() for c in access.table.columns}
        self.aliased = aliased

    def __call__(self, expr: exp.Expression) -> exp.Expression:
        expr = expr.copy()
        for col in [c for c in expr.find_all(exp.Column) if self._is_target(c, expr)]:
            fenced = exp.Case(ifs=[exp.If(this=self.check.copy(), true=col.copy())])
            if col is expr:
                return fenced
            col.replace(fenced)
        return expr

    def _is_target(self, col: exp.Column, root: exp.Expression) -> bool:
        if isinstance(col.this, exp.Star) or col.name.lower() not in self.columns:
            return False
        in_subquery = False
        node = col.parent
        while node is not None and node is not root.parent:
            if isinstance(node, exp.Subquery | exp.Select):
                in_subquery = True
                break
            node = node.parent
        if col.table:
            return col.table.lower() == self.alias and (self.aliased or not in_subquery)
        return not in_subquery


def _substituted(check: exp.Expression, row: dict[str, exp.Expression],
                 alias: str | None) -> exp.Expression:
    """The filter check over a new row: each target column replaced by its new value."""
    out = check.copy()
    for col in list(out.find_all(exp.Column)):
        if alias and col.table and col.table.lower() != alias.lower():
            continue
        value = row.get(col.name.lower())
        if value is None:
            continue
        if any(isinstance(n, exp.Subquery | exp.Select) for n in value.walk()):
            raise Refused("a value computed by a subquery may not be written to a column the "
                          "writer's row filter reads")
        col.replace(exp.paren(value.copy()))
    return out


def _checked(passes: exp.Expression, value: exp.Expression) -> exp.Expression:
    """CASE WHEN <new row passes> THEN value ELSE raise_error(marker) END."""
    fail = exp.Anonymous(this="raise_error",
                         expressions=[exp.Literal.string(ROW_FILTER_VIOLATION)])
    return exp.Case(ifs=[exp.If(this=passes.copy(), true=value)], default=fail)


def masked_type(mask: str, type_text: str) -> str:
    """The type a masked column has for the user (what DESCRIBE shows)."""
    if mask in ("hash", "last4", "first4", "email_domain"):
        return "string"
    if mask == "redact":
        return "string" if type_text.lower().startswith(("string", "varchar", "char")) \
            else type_text
    if mask == "year" and not type_text.lower().startswith(("date", "timestamp")):
        return "date"
    if mask == "custom":
        return "masked"
    return type_text


def _kind(stmt: exp.Expression) -> str:
    return type(stmt).__name__.upper()

