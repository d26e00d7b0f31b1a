"""Writes (INSERT, UPDATE, DELETE, MERGE): `modify` on the target, reads governed as in
queries, and the writer's row filter guarding every user expression (`coalesce(filter,
false) AND (cond)`, target columns fenced as CASE WHEN <filter> THEN col END) and checking
every row written (INSERT's cast row, UPDATE/MERGE's new row: PostgreSQL's WITH CHECK).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot import exp

from catalog.model import TableInfo
from governance.errors import AccessDenied, LakegateError, Refused
from governance.planning.context import PlanningContext, delta_table
from governance.planning.lineage import (
    Propagation,
    assigned,
    plan_carry,
    refuse_unorderable,
    tag_masks,
)
from governance.planning.planned import ROW_FILTER_VIOLATION, Planned, PropagateTags
from governance.policy.enforcer import TableAccess
from governance.policy.masks import sql_type
from governance.policy.model import PolicySet
from governance.policy.tags import column_tags
from governance.sql.resolve import TableRef


def plan_insert(ctx: PlanningContext, stmt: exp.Insert) -> Planned:
    """`modify` on the target; each row is cast to the column types and checked against the
    writer's row filter as stored, so no row lands outside it."""
    if isinstance(stmt.this, exp.Directory) or stmt.args.get("directory"):
        raise Refused("INSERT OVERWRITE DIRECTORY is refused; write into a governed table")
    for key in ("partition", "by_name", "where", "alternative", "conflict", "returning"):
        if stmt.args.get(key):
            raise Refused(f"INSERT with {key.upper().replace('_', ' ')} is not governed")
    stmt = ctx.govern(stmt)
    schema = stmt.this
    column_list: list[str] | None = None
    table_node = schema
    if isinstance(schema, exp.Schema):
        table_node = schema.this
        column_list = [c.name for c in schema.expressions]
    ref, access = ctx.target(table_node, "modify", "insert")
    info = ref.info
    overwrite = bool(stmt.args.get("overwrite"))
    column_list = insert_columns(ctx, access, column_list, overwrite)
    planned = Planned(cmd="insert", target=access, target_name=info.full_name)
    source = stmt.expression
    if source is None:
        raise Refused("INSERT without a query or VALUES is not governed")
    _, reads = ctx.reads(source)
    if reads:
        planned.dst = info.full_name
        sources = [(r.node, r.info, a.visible_columns) for r, a in reads]
        planned.carry = plan_carry(
            ctx.enforcer.policy_set, source, sources, info.full_name, existing=info
        )
    # the source's columns are renamed to the target's on the tree (a TableAlias with
    # columns), so nothing in the source's text can change the wrapper
    src = exp.Subquery(
        this=source,
        alias=exp.TableAlias(
            this=exp.to_identifier("__lg_src"),
            columns=[exp.to_identifier(c, quoted=True) for c in column_list],
        ),
    )
    query = exp.Select(expressions=[exp.column(c, quoted=True) for c in column_list])
    check = ctx.ps.filter_check(ctx.ident, access)
    if check is None:
        query = query.from_(src, copy=False)
    else:
        # Check what is stored: cast each value to its column's type as Spark's store
        # assignment would, check the filter on the cast row, insert those same values.
        cast = exp.Select(expressions=stored_row(access, column_list)).from_(src, copy=False)
        query = query.from_(
            exp.Subquery(this=cast, alias=exp.TableAlias(this=exp.to_identifier("__lg_chk"))),
            copy=False,
        ).where(row_check(check), copy=False)
    insert = exp.Insert(
        this=exp.Schema(
            this=delta_table(info.location),
            expressions=[exp.to_identifier(c, quoted=True) for c in column_list],
        ),
        expression=query,
        overwrite=overwrite,
    )
    insert = ctx.views_sql(insert, reads, planned, scan=source)
    ctx.refuse_masked_reads(planned)
    planned.sql = ctx.generate(insert, planned)
    planned.expected.add_target(info.location)
    return planned


def carry_tags(info: TableInfo, props: list[Propagation]) -> tuple[PropagateTags, ...]:
    """The action adding propagated tags to the target's governed state, run before the
    write (governance.planning.lineage)."""
    if not props:
        return ()
    tags = tuple(_named(info, props))
    return (PropagateTags(info.catalog, info.schema, info.name, tags),)


def _named(info: TableInfo, props: list[Propagation]) -> list[tuple[str, tuple[str, ...]]]:
    out: dict[str, set[str]] = {}
    for p in props:
        column = info.column(p.column)
        out.setdefault(column.name if column else p.column, set()).update(p.tags)
    return [(c, tuple(sorted(t))) for c, t in sorted(out.items())]


def carry_assignments(
    ctx: PlanningContext,
    stmt: exp.Expression,
    node: exp.Table,
    access: TableAccess,
    reads: list[tuple[TableRef, TableAccess]],
    using: exp.Expression | None = None,
) -> list[Propagation]:
    """UPDATE's and MERGE's assigned values copy data as INSERT's do: each assigned column
    takes the tags of the columns (the target's own, `using`'s) its value is computed from,
    traced as `SELECT <value> ... FROM target [JOIN using]`; a tag the column has already
    carries nothing. Called before the statement is rewritten."""
    pairs = _assignments(stmt)
    if not pairs:
        return []
    twin_stmt = stmt.copy()
    twin = {id(o): c for o, c in zip(stmt.walk(), twin_stmt.walk(), strict=True)}
    names = {f"__lg_set{i}": c for i, (c, _) in enumerate(pairs)}
    select = exp.Select(
        expressions=[
            exp.alias_(twin[id(v)], a, copy=False) for a, (_, v) in zip(names, pairs, strict=True)
        ]
    ).from_(twin[id(node)], copy=False)
    if using is not None:
        select = select.join(twin[id(using)], copy=False)
    inside = {id(n) for n in select.walk()}
    sources = [(twin[id(node)], access.table, access.visible_columns)]
    sources += [(twin[id(r.node)], r.info, a.visible_columns) for r, a in reads]
    sources = [s for s in sources if id(s[0]) in inside]
    ps = ctx.enforcer.policy_set
    props = assigned(ps, select, sources, names)
    have = column_tags(ps, access.table).columns
    info = access.table
    refuse_unorderable(tag_masks(ps, info.full_name), info.full_name, props, have)
    out: list[Propagation] = []
    for p in props:
        new = tuple(t for t in p.tags if t not in have.get(p.column.lower(), ()))
        out += [replace(p, tags=new)] if new else []
    return out


def _assignments(stmt: exp.Expression) -> list[tuple[str, exp.Expression]]:
    """(column, value) for each of UPDATE's SET, MERGE's UPDATE SET and INSERT VALUES."""
    if isinstance(stmt, exp.Update):
        return [(eq.this.name, eq.expression) for eq in stmt.expressions]
    whens = stmt.args.get("whens")
    out: list[tuple[str, exp.Expression]] = []
    for w in whens.expressions if whens is not None else []:
        then = w.args.get("then")
        if isinstance(then, exp.Update):
            out += [(eq.this.name, eq.expression) for eq in then.expressions]
        elif isinstance(then, exp.Insert):
            cols, values = then.this, then.expression
            if isinstance(cols, exp.Tuple) and isinstance(values, exp.Tuple):
                pairs = zip(cols.expressions, values.expressions, strict=False)
                out += [(c.name, v) for c, v in pairs]
    return out


def frame_propagation(
    ps: PolicySet, sources: list[Planned], columns: list[str]
) -> list[Propagation]:
    """A DataFrame's plan is a Spark Connect relation, not a sqlglot tree, so its column
    lineage is not traced: every target column takes the tags of every column the
    DataFrame's governed reads read (fail closed: a copy is never less tagged)."""
    out: list[Propagation] = []
    for s in sources:
        for i, v in enumerate(s.views):
            have = column_tags(ps, v.access.table).columns
            for c in s.columns.get(i, []):
                tags = tuple(sorted(have.get(c.lower(), ())))
                if tags:
                    out += [
                        Propagation(p, t, v.access.table.full_name, c, tags)
                        for p, t in enumerate(columns)
                    ]
    return out


def insert_columns(
    ctx: PlanningContext, access: TableAccess, column_list: list[str] | None, overwrite: bool
) -> list[str]:
    """INSERT's rules on the target's columns, shared by SQL INSERT and Connect DataFrame
    writes: no mapping-table filter on the target, never a hidden column, and no overwrite
    of rows or columns the writer cannot see. `column_list` None is positional: as in
    Trino, the columns the user sees, in order (what DESCRIBE shows them); a hidden column
    gets NULL, so its value, position and count stay unknown. Returns the columns written."""
    ctx.ps.refuse_in_write_condition(access, "insert")  # see PolicySql: writes read no mapping
    info = access.table
    hidden = {h.lower() for h in access.hidden_columns}
    if column_list is None:
        if not access.visible_columns or any(
            not c.nullable for c in info.columns if c.name.lower() in hidden
        ):
            raise AccessDenied(
                f"access denied: INSERT into {info.full_name} without a column list cannot "
                f"fill the columns hidden from user {ctx.user}; ask the table's owner",
                cmd="insert",
                tables=(info.full_name,),
            )
        column_list = list(access.visible_columns)
    for c in column_list:
        if info.column(c) is None:
            raise LakegateError(f"column {c} does not exist in {info.full_name}")
        if c.lower() in hidden:
            raise AccessDenied(
                f"access denied: user {ctx.user} may not write column {c} "
                f"of table {info.full_name}",
                cmd="insert",
                tables=(info.full_name,),
            )
    if overwrite and (access.row_filters or hidden):
        raise AccessDenied(
            f"access denied: INSERT OVERWRITE would replace rows or columns of "
            f"{info.full_name} hidden from user {ctx.user}",
            cmd="insert",
            tables=(info.full_name,),
        )
    return column_list


def stored_row(access: TableAccess, column_list: list[str]) -> list[exp.Expression]:
    """The row as stored, every column of the table: each written column cast to its type
    (as Spark's store assignment would), then the others as NULL of their type."""
    info = access.table
    present = {c.lower() for c in column_list}
    row = [
        exp.alias_(
            exp.cast(exp.column(c, quoted=True), sql_type(info.column(c).type_text)),  # type: ignore[union-attr]
            c,
            quoted=True,
        )
        for c in column_list
    ]
    row += [
        exp.alias_(exp.cast(exp.null(), sql_type(c.type_text)), c.name, quoted=True)
        for c in info.columns
        if c.name.lower() not in present
    ]
    return row


def row_check(check: exp.Expression) -> exp.Expression:
    """`assert_true(check, marker) IS NULL`: true for a row inside the writer's filter, a
    failed job (nothing written) for any other; the session maps the marker to a denial."""
    assert_row = exp.Anonymous(
        this="assert_true", expressions=[check, exp.Literal.string(ROW_FILTER_VIOLATION)]
    )
    return exp.Is(this=assert_row, expression=exp.null())


@dataclass(frozen=True)
class FrameInsert:
    """A Spark Connect DataFrame write planned as INSERT (see `plan_frame_insert`): the
    source's columns renamed to `columns`, the stored `row` selected from them, rows kept
    where `condition` (the writer's filter, `row_check`) holds; written to `location`."""

    columns: list[str]
    row: list[exp.Expression]
    condition: exp.Expression | None
    location: str
    overwrite: bool


def plan_frame_insert(
    ctx: PlanningContext,
    table: exp.Table,
    source_columns: list[str],
    by_name: bool,
    overwrite: bool,
    sources: list[Planned],
) -> tuple[Planned, FrameInsert]:
    """A DataFrame write (df.write.insertInto / saveAsTable / df.writeTo) under INSERT's
    rules: `by_name` takes the DataFrame's column names as the column list, else it is
    positional like INSERT without one. `sources` are the plans of the governed reads the
    DataFrame was built from; a write copies no column masked in any of them (stricter than
    SQL, which refuses only the masked columns its query reads)."""
    ctx.cmd = "insert"
    ref, access = ctx.target(table, "modify", "insert")
    info = ref.info
    named = [c.lower() for c in source_columns]
    if by_name and len(set(named)) != len(named):
        raise LakegateError(f"the DataFrame written to {info.full_name} repeats a column name")
    columns = insert_columns(ctx, access, list(source_columns) if by_name else None, overwrite)
    if len(columns) != len(source_columns):
        raise LakegateError(
            f"the DataFrame has {len(source_columns)} column(s); insertInto {info.full_name} "
            f"takes the {len(columns)} column(s) user {ctx.user} sees, in order"
        )
    columns = [info.column(c).name for c in columns]  # type: ignore[union-attr]
    planned = Planned(cmd="insert", target=access, target_name=info.full_name)
    if any(s.views for s in sources):
        planned.dst = info.full_name
    for s in sources:
        ctx.refuse_masked_reads(
            Planned(cmd="insert", target_name=info.full_name, views=s.views, columns=s.columns)
        )
    ps = ctx.enforcer.policy_set
    planned.propagated = frame_propagation(ps, sources, columns)
    existing = column_tags(ps, info).columns
    refuse_unorderable(tag_masks(ps, info.full_name), info.full_name, planned.propagated, existing)
    planned.before = carry_tags(info, planned.propagated)
    check = ctx.ps.filter_check(ctx.ident, access)
    frame = FrameInsert(
        columns=columns,
        row=stored_row(access, columns),
        condition=None if check is None else row_check(check),
        location=info.location,
        overwrite=overwrite,
    )
    return planned, frame


def plan_update(ctx: PlanningContext, stmt: exp.Update) -> Planned:
    """Row-scoped (see `_row_scoped`); FROM is refused, MERGE says the same governably."""
    if stmt.args.get("from_") or stmt.args.get("joins"):
        raise Refused("UPDATE ... FROM is not governed; use MERGE")
    return _row_scoped(ctx, "update", stmt)


def plan_delete(ctx: PlanningContext, stmt: exp.Delete) -> Planned:
    """Row-scoped (see `_row_scoped`); USING is refused, MERGE says the same governably."""
    if stmt.args.get("using") or stmt.args.get("tables"):
        raise Refused("DELETE ... USING is not governed; use MERGE")
    return _row_scoped(ctx, "delete", stmt)


def _row_scoped(ctx: PlanningContext, cmd: str, stmt: exp.Update | exp.Delete) -> Planned:
    """UPDATE/DELETE: only visible rows are touched, the user's expressions run guarded and
    fenced, and an UPDATE's new row must pass the filter (WITH CHECK)."""
    stmt = ctx.govern(stmt)
    node = stmt.this
    ref, access = ctx.target(node, "modify", cmd)
    ctx.ps.refuse_in_write_condition(access, cmd)  # a mapping-table filter cannot guard here
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
        read += _check_target_columns(ctx, e, access, cmd, alias)
    masked = sorted({c for c in read if c.lower() in access.masks})
    if masked:
        ids = tuple(dict.fromkeys(access.masks[c.lower()].mask.id for c in masked))
        raise AccessDenied(
            f"access denied: {cmd.upper()} may not read masked column(s) "
            f"{', '.join(masked)} of {info.full_name} (user {ctx.user})",
            cmd=cmd,
            tables=(info.full_name,),
            policies=(*ids, *access.grant_ids),
        )
    for eq in stmt.expressions:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            raise Refused(f"{cmd.upper()} SET must assign plain columns")
        _check_target_columns(ctx, eq.this, access, cmd, alias)
    _, reads = ctx.reads(stmt, {id(node)})
    planned.dst = info.full_name if reads else None
    if cmd == "update":
        planned.propagated = carry_assignments(ctx, stmt, node, access, reads)
        planned.before = carry_tags(info, planned.propagated)
    stmt = ctx.views_sql(stmt, reads, planned)
    ctx.refuse_masked_reads(planned)
    check = ctx.ps.filter_check(ctx.ident, access, alias)
    if check is not None:
        fence = _Fence(check, access, alias or info.name, aliased=alias is not None)
        cond = stmt.args.get("where")
        stmt.set("where", exp.Where(this=_guarded(check, fence(cond.this) if cond else None)))
        for eq in stmt.expressions:
            eq.set("expression", fence(eq.expression))
        _with_check(ctx, stmt.expressions, check, access, alias)
    target = delta_table(info.location)
    if alias:
        target.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    stmt.set("this", target)
    planned.sql = ctx.generate(stmt, planned)
    planned.expected.add_target(info.location)
    return planned


def plan_merge(ctx: PlanningContext, stmt: exp.Merge) -> Planned:
    """Hidden target rows never match; every clause runs guarded and fenced; updated and
    inserted rows must pass the writer's filter."""
    stmt = ctx.govern(stmt)
    node = stmt.this
    ref, access = ctx.target(node, "modify", "merge")
    ctx.ps.refuse_in_write_condition(access, "merge")  # a mapping-table filter cannot guard
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
    read = _check_target_columns(ctx, own, access, "merge", alias)
    masked = [c for c in read if c.lower() in access.masks]
    if masked:
        raise AccessDenied(
            f"access denied: MERGE may not read masked column(s) {', '.join(masked)} of "
            f"{info.full_name} (user {ctx.user})",
            cmd="merge",
            tables=(info.full_name,),
        )
    _, reads = ctx.reads(stmt, {id(node)})
    planned.dst = info.full_name
    planned.propagated = carry_assignments(ctx, stmt, node, access, reads, stmt.args.get("using"))
    planned.before = carry_tags(info, planned.propagated)
    stmt = ctx.views_sql(stmt, reads, planned)
    ctx.refuse_masked_reads(planned)
    check = ctx.ps.filter_check(ctx.ident, access, alias)
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
                _with_check(ctx, then.expressions, check, access, alias)
            elif isinstance(then, exp.Insert):
                _merge_insert_check(then, check, access, alias)
    target = delta_table(info.location)
    target.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    stmt.set("this", target)
    planned.sql = ctx.generate(stmt, planned)
    planned.expected.add_target(info.location)
    return planned


def _check_target_columns(
    ctx: PlanningContext, expr: exp.Expression, access: TableAccess, cmd: str, alias: str | None
) -> list[str]:
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
                f"access denied: user {ctx.user} may not use column {by_low[low]} of "
                f"table {access.table.full_name}",
                cmd=cmd,
                tables=(access.table.full_name,),
            )
        if low in by_low and by_low[low] not in read:
            read.append(by_low[low])
    return read


def _with_check(
    ctx: PlanningContext,
    assignments: list[exp.Expression],
    check: exp.Expression,
    access: TableAccess,
    alias: str | None,
) -> None:
    """PostgreSQL's WITH CHECK for UPDATE: the new row must pass the writer's filters.

    Each value is cast to its column's type (what is stored) and becomes
    CASE WHEN <filter over the new row> THEN <value> ELSE raise_error(marker) END, so one
    failing row fails the whole job and nothing is written."""
    if not assignments or not (
        ctx.ps.filter_columns(access) & {eq.this.name.lower() for eq in assignments}
    ):
        return  # the filter reads no assigned column: the new row passes as the old did
    new: dict[str, exp.Expression] = {}
    for eq in assignments:
        col = access.table.column(eq.this.name)
        if col is None:
            raise LakegateError(f"column {eq.this.name} does not exist in {access.table.full_name}")
        new[col.name.lower()] = exp.cast(exp.paren(eq.expression), sql_type(col.type_text))
    passes = _substituted(check, new, alias)
    for eq in assignments:
        eq.set("expression", _checked(passes, new[eq.this.name.lower()]))


def _merge_insert_check(
    then: exp.Insert, check: exp.Expression, access: TableAccess, alias: str
) -> None:
    """MERGE's INSERT follows INSERT's rule: cast to the column types, check, store."""
    cols, values = then.this, then.expression
    if (
        not isinstance(cols, exp.Tuple)
        or not isinstance(values, exp.Tuple)
        or len(cols.expressions) != len(values.expressions)
    ):
        raise Refused("MERGE ... INSERT must name its columns and give one value each")
    table = access.table
    row = {c.name.lower(): exp.cast(exp.null(), sql_type(c.type_text)) for c in table.columns}
    for c, v in zip(cols.expressions, values.expressions, strict=True):
        col = table.column(c.name)
        if col is None:
            raise LakegateError(f"column {c.name} does not exist in {table.full_name}")
        row[col.name.lower()] = exp.cast(exp.paren(v.copy()), sql_type(col.type_text))
    passes = _substituted(check, row, alias)
    values.set(
        "expressions",
        [_checked(passes, row[table.column(c.name).name.lower()]) for c in cols.expressions],
    )  # type: ignore[union-attr]


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

    def __init__(
        self, check: exp.Expression, access: TableAccess, alias: str, aliased: bool = True
    ) -> None:
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


def _substituted(
    check: exp.Expression, row: dict[str, exp.Expression], alias: str | None
) -> exp.Expression:
    """The filter check over a new row: each target column replaced by its new value."""
    out = check.copy()
    for col in list(out.find_all(exp.Column)):
        if alias and col.table and col.table.lower() != alias.lower():
            continue
        value = row.get(col.name.lower())
        if value is None:
            continue
        if any(isinstance(n, exp.Subquery | exp.Select) for n in value.walk()):
            raise Refused(
                "a value computed by a subquery may not be written to a column the "
                "writer's row filter reads"
            )
        col.replace(exp.paren(value.copy()))
    return out


def _checked(passes: exp.Expression, value: exp.Expression) -> exp.Expression:
    """CASE WHEN <new row passes> THEN value ELSE raise_error(marker) END."""
    fail = exp.Anonymous(this="raise_error", expressions=[exp.Literal.string(ROW_FILTER_VIOLATION)])
    return exp.Case(ifs=[exp.If(this=passes.copy(), true=value)], default=fail)
