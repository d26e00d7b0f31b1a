"""Aggregation policies (minimum group size): aggregate-only tables, checked and rewritten.

For a user under an aggregation policy on a table (TableAccess.aggregate), every read of
that table must sit directly in the FROM / JOIN of an aggregating SELECT (the "guarded"
SELECT), and that SELECT must only expose aggregates over groups of at least
`min_group_size` of the table's rows:

- every output, HAVING and ORDER BY expression is a GROUP BY key, a literal, or an allowed
  aggregate (count, sum, avg, approx_count_distinct, stddev / variance) whose argument is a
  column or arithmetic on columns (no CASE / IF / comparison / function: those isolate one
  row inside a large group); min, max, first, last, any_value, collect_list / collect_set,
  percentile, median, mode, max_by ... are refused on columns that may be the protected
  table's (they return one row's value);
- no window function, QUALIFY, PIVOT, ROLLUP / CUBE / GROUPING SETS (subtotals difference
  a small group out of large ones), no subquery in its outputs, HAVING or ORDER BY;
- no RIGHT / FULL join, and no LEFT join with the protected table on the nullable side;
- identifying columns (the policy's `identifying_columns`) are only ever counted:
  count(col) / count(DISTINCT col) / approx_count_distinct(col), nowhere else in the
  statement (a filter on them is the known differencing shape `... WHERE id <> 42`).

The guarded SELECT then gets `HAVING <counter> >= k AND (<the user's HAVING>)`: the
user's HAVING is AND-ed, never able to weaken the guard. The counter is `count(1)` when
the protected table is the SELECT's only source; with joins or LATERAL VIEWs it is, per
protected read, `count(DISTINCT struct(<its visible columns>))`, which never exceeds that
table's rows in the group, whatever the join multiplies. `on_small_group: suppress` drops
the small groups; `refuse` makes Spark fail the statement with AGG_MARK in the message
(mapped to a one-line refusal by governance.execute.run). Anything else reading the table
(a non-aggregating SELECT, a subquery that re-exposes rows, a write) is refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from sqlglot import exp

from governance.errors import Refused
from governance.policy.enforcer import AggregateOnly, TableAccess
from governance.sql.resolve import TableRef

#: In the run-time error of `on_small_group: refuse`; random per process, so no user text
#: can forge or predict it.
AGG_MARK = "__lg_small_group_" + secrets.token_hex(8) + "__"

#: Aggregates whose value over >= k rows is not one row's value.
ALLOWED_AGGREGATES: tuple[type[exp.Expression], ...] = (
    exp.Count,
    exp.Sum,
    exp.Avg,
    exp.ApproxDistinct,
    exp.Stddev,
    exp.StddevPop,
    exp.StddevSamp,
    exp.Variance,
    exp.VariancePop,
)
#: What an allowed aggregate's argument may be made of.
_ARGUMENT_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Star,
    exp.Distinct,
    exp.Paren,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Neg,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Null,
)
#: Aggregates that may count an identifying column (a count says nothing of its values).
_COUNTING = (exp.Count, exp.ApproxDistinct)
_MAP_TYPES = ("map<", "map(")


def enforce_aggregation(
    stmt: exp.Expression, reads: list[tuple[TableRef, TableAccess]], user: str
) -> bool:
    """Check every read of an aggregate-only table and guard its SELECT (in place);
    whether anything was rewritten. Refused (one line naming the policy) otherwise."""
    protected = [(ref, a) for ref, a in reads if a.aggregate is not None]
    if not protected:
        return False
    by_select: dict[int, tuple[exp.Select, list[tuple[exp.Table, TableAccess]]]] = {}
    for ref, access in protected:
        node = ref.node
        rule = access.aggregate
        assert rule is not None
        name = access.table.full_name
        parent = node.parent
        select = parent.parent if isinstance(parent, exp.From | exp.Join) else None
        if not isinstance(select, exp.Select):
            raise _refused(rule, name, user, "it may only be read in the FROM of an aggregation")
        if node.args.get("pivots"):
            raise _refused(rule, name, user, "PIVOT is not an aggregation it can guard")
        by_select.setdefault(id(select), (select, []))[1].append((node, access))
    _check_identifying(stmt, protected, user)  # before the guards add their counters
    for select, nodes in by_select.values():
        _guard(select, nodes, user)
    return True


def _refused(rule: AggregateOnly, table: str, user: str, why: str) -> Refused:
    return Refused(
        f"aggregation policy {', '.join(rule.ids)}: table {table} is aggregate-only for user "
        f"{user} (groups of at least {rule.min_group_size} rows); {why}",
        tables=(table,),
    )


def _qualifier(node: exp.Table) -> str:
    alias = node.args.get("alias")
    if alias is not None and alias.this is not None:
        return alias.this.name
    return node.name


def _guard(select: exp.Select, nodes: list[tuple[exp.Table, TableAccess]], user: str) -> None:
    """Check one guarded SELECT and add its minimum-group-size HAVING."""
    first_access = nodes[0][1]
    rule = _combined([a.aggregate for _, a in nodes if a.aggregate is not None])
    table = first_access.table.full_name

    def refuse(why: str) -> Refused:
        return _refused(rule, table, user, why)

    qualifiers = {_qualifier(n).lower() for n, _ in nodes}
    group = select.args.get("group")
    having = select.args.get("having")
    parts = [*select.expressions, *([having] if having is not None else [])]
    aggregates = [
        a
        for e in parts
        for a in e.find_all(exp.AggFunc)
        if not isinstance(a.find_ancestor(exp.Window, exp.Select), exp.Window)
    ]
    if group is None and not aggregates:
        raise refuse("the query must aggregate it (GROUP BY and/or aggregate functions)")
    if group is not None and any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup")):
        raise refuse("ROLLUP, CUBE and GROUPING SETS are refused (subtotals difference groups)")
    if group is not None and any(
        isinstance(k, exp.Rollup | exp.Cube | exp.GroupingSets) for k in group.expressions
    ):
        raise refuse("ROLLUP, CUBE and GROUPING SETS are refused (subtotals difference groups)")
    if select.args.get("qualify") is not None:
        raise refuse("QUALIFY is refused in its aggregation")
    for clause in ("expressions", "having", "order"):
        value = select.args.get(clause)
        for part in value if isinstance(value, list) else [value] if value is not None else []:
            if any(isinstance(n, exp.Window) for n in part.walk()):
                raise refuse("window functions are refused in its aggregation")
            if any(isinstance(n, exp.Subquery | exp.Query) for n in part.walk() if n is not part):
                raise refuse("a subquery in its aggregation's outputs is refused")
    for join in select.args.get("joins") or []:
        side = (join.args.get("side") or "").upper()
        if side in ("RIGHT", "FULL"):
            raise refuse(f"{side} JOIN is refused (its rows could be NULL-extended)")
        if side == "LEFT" and any(join.this is n for n, _ in nodes):
            raise refuse("LEFT JOIN with it on the nullable side is refused")
    keys = _group_keys(select, group)
    for e in select.expressions:
        _check_output(e.unalias() if isinstance(e, exp.Alias) else e, keys, qualifiers, refuse)
    # HAVING and ORDER BY may name an output by its alias (checked above)
    named = keys | {e.alias.lower() for e in select.expressions if isinstance(e, exp.Alias)}
    if having is not None:
        _check_output(having.this, named, qualifiers, refuse)
    order = select.args.get("order")
    for o in order.expressions if order is not None else []:
        _check_output(o.this, named, qualifiers, refuse)
    guard = _counter_guard(select, nodes, rule)
    if rule.on_small_group == "refuse":
        guard = exp.Case(
            ifs=[exp.If(this=guard, true=exp.true())],
            default=exp.Anonymous(this="raise_error", expressions=[exp.Literal.string(AGG_MARK)]),
        )
    condition = guard if having is None else exp.and_(guard, exp.Paren(this=having.this))
    select.set("having", exp.Having(this=condition))


def _combined(rules: list[AggregateOnly]) -> AggregateOnly:
    return AggregateOnly.of(tuple(dict.fromkeys(p for r in rules for p in r.policies)))


def _group_keys(select: exp.Select, group: exp.Group | None) -> set[str]:
    """The GROUP BY keys as SQL text; an ordinal or an output alias stands for its output;
    GROUP BY ALL: every output without an aggregate."""
    if group is None:
        return set()
    outputs = {e.alias.lower(): e.unalias() for e in select.expressions if isinstance(e, exp.Alias)}
    keys: set[str] = set()
    if group.args.get("all"):
        for e in select.expressions:
            if not e.find(exp.AggFunc):
                keys.add(_text(e.unalias()))
        return keys
    for k in group.expressions:
        if isinstance(k, exp.Literal) and k.is_int:
            i = int(k.this) - 1
            if 0 <= i < len(select.expressions):
                keys.add(_text(select.expressions[i].unalias()))
            continue
        if isinstance(k, exp.Column) and not k.table and k.name.lower() in outputs:
            keys.add(_text(outputs[k.name.lower()]))
        keys.add(_text(k))
    return keys


def _text(e: exp.Expression) -> str:
    return e.sql("spark").lower()


def _may_be_protected(col: exp.Column, qualifiers: set[str]) -> bool:
    """An unqualified column may be the protected table's; a qualified one is if its
    qualifier names a protected read."""
    return not col.table or col.table.lower() in qualifiers


def _check_output(
    e: exp.Expression, keys: set[str], qualifiers: set[str], refuse: Callable[[str], Refused]
) -> None:
    """`e` is made of GROUP BY keys, literals and allowed aggregates only."""
    if _text(e) in keys:
        return
    if isinstance(e, exp.AggFunc | exp.Filter):
        agg = e.this if isinstance(e, exp.Filter) else e
        if isinstance(e, exp.Filter):
            raise refuse("an aggregate FILTER clause is refused (it isolates rows in a group)")
        reads_protected = any(_may_be_protected(c, qualifiers) for c in agg.find_all(exp.Column))
        if isinstance(agg, exp.Count) and agg.find(exp.Star) is agg.this:
            return
        if not reads_protected:
            return
        if not isinstance(agg, ALLOWED_AGGREGATES):
            raise refuse(
                f"aggregate {agg.sql_name().lower()} is not allowed on its columns "
                "(it returns one row's value); use count, sum, avg or approx_count_distinct"
            )
        for arg in agg.iter_expressions():
            for n in arg.walk():
                if not isinstance(n, _ARGUMENT_NODES):
                    raise refuse(
                        f"{type(n).__name__.lower()} in the argument of "
                        f"{agg.sql_name().lower()} is refused (an aggregate's argument is "
                        "a column or arithmetic on columns)"
                    )
        return
    if isinstance(e, exp.Column):
        raise refuse(f"column {e.sql('spark')} is neither aggregated nor a GROUP BY key")
    for child in e.iter_expressions():
        _check_output(child, keys, qualifiers, refuse)


def _visible_struct(node: exp.Table, access: TableAccess) -> exp.Expression:
    """struct(<the read's visible, comparable columns>), qualified by the read's name."""
    qualifier = _qualifier(node)
    types = {c.name.lower(): c.type_text.lower() for c in access.table.columns}
    columns = [
        exp.column(c, table=qualifier, quoted=True)
        for c in access.visible_columns
        if not any(m in types.get(c.lower(), "") for m in _MAP_TYPES)
    ]
    return exp.Anonymous(this="struct", expressions=columns)


def _counter_guard(
    select: exp.Select, nodes: list[tuple[exp.Table, TableAccess]], rule: AggregateOnly
) -> exp.Expression:
    """`count(1) >= k` for a lone source; else one distinct-row counter per protected read."""
    from_ = select.args.get("from_")
    lone = (
        from_ is not None
        and len(nodes) == 1
        and from_.this is nodes[0][0]
        and not select.args.get("joins")
        and not select.args.get("laterals")
    )
    k = exp.Literal.number(rule.min_group_size)
    if lone:
        return exp.GTE(this=exp.Count(this=exp.Literal.number(1)), expression=k)
    conditions = [
        exp.GTE(
            this=exp.Count(this=exp.Distinct(expressions=[_visible_struct(n, a)])),
            expression=k,
        )
        for n, a in nodes
    ]
    out = conditions[0]
    for c in conditions[1:]:
        out = exp.and_(out, c)
    return out


def _check_identifying(
    stmt: exp.Expression, protected: list[tuple[TableRef, TableAccess]], user: str
) -> None:
    """An identifying column is only ever counted: anywhere else (a filter, a key, an
    argument) it is the known differencing shape, refused."""
    names: dict[str, tuple[AggregateOnly, str, set[str]]] = {}
    for ref, access in protected:
        rule = access.aggregate
        assert rule is not None
        for c in rule.identifying_columns:
            entry = names.setdefault(c, (rule, access.table.full_name, set()))
            entry[2].add(_qualifier(ref.node).lower())
    if not names:
        return
    for col in stmt.find_all(exp.Column):
        hit = names.get(col.name.lower())
        if hit is None or not _may_be_protected(col, hit[2]):
            continue
        counting = col.find_ancestor(*_COUNTING, exp.Select)
        if isinstance(counting, _COUNTING) and all(
            isinstance(n, _ARGUMENT_NODES) for n in counting.this.walk()
        ):
            continue
        rule, table, _ = hit
        raise _refused(
            rule,
            table,
            user,
            f"identifying column {col.name} may only be counted (filters, keys and "
            "expressions on it single out rows)",
        )
