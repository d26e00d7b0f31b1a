"""Tags follow the data: the column tags a write carries from its sources to its target.

`CREATE TABLE ... AS SELECT`, `INSERT ... SELECT` and DataFrame writes copy values; a copy
of a tagged column must stay under the rules its tag drives. Each target column takes the
tags of every source column it is computed from (column lineage of the user's query, on the
sqlglot tree with `sqlglot.lineage`: projections through subqueries, CTEs and set
operations; columns read only in WHERE, JOIN or GROUP BY carry nothing). One expression
drops a tag: the tag's own mask applied to the column (`sha2(cast(email AS string), 256)`
for a `pii` column whose every mask is `hash`), since the copy then holds what the mask
shows. When the lineage cannot be derived, every target column takes every tag the query's
tables carry (fail closed). The tags go into the target's governed state
(governance.policy.tag_state): only a holder of APPLY_TAG removes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.lineage import Node, lineage
from sqlglot.optimizer.qualify import qualify

from catalog.model import TableInfo
from governance.errors import Refused
from governance.masks import mask_sql
from governance.policy.model import PolicySet
from governance.policy.tags import column_tags

_PLACEHOLDER = "__lg_col"


@dataclass(frozen=True)
class Propagation:
    """`tags` carried from `source` (table, column) to the target's column at `position`
    (`column`: its name where known before the write, else `#position`)."""

    position: int
    column: str
    source_table: str
    source_column: str
    tags: tuple[str, ...]


def propagate(
    ps: PolicySet,
    query: exp.Expression,
    sources: Iterable[tuple[exp.Table, TableInfo]],
    target_columns: list[str] | None,
) -> list[Propagation]:
    """What the target's columns (`target_columns`, in the query's output order; None:
    named as the query names them, CTAS) inherit from the tables `sources` (the query's
    table nodes, resolved) through `query`."""
    sources = list(sources)
    tags = {info.full_name: column_tags(ps, info).columns for _, info in sources}
    if not any(tags.values()):
        return []
    try:
        names, paths = _lineage(query, sources, target_columns)
    except Exception:  # lineage not derivable: every column takes every tag (fail closed)
        if target_columns is None:
            raise CannotPropagate(
                "the columns of this CREATE TABLE AS SELECT cannot be traced to its "
                "sources, whose columns carry tags; name each column in the query"
            ) from None
        names = list(target_columns)
        every = [(t, c, frozenset[str]()) for t, cols in tags.items() for c in cols]
        paths = [every for _ in names]
    masks = _own_masks(ps)
    out: list[Propagation] = []
    for position, (target, leaves) in enumerate(zip(names, paths, strict=True)):
        for table, column, masked in leaves:
            have = tags.get(table, {}).get(column, frozenset())
            kept = sorted(t for t in have if not (t in masks and masks[t] <= masked))
            if kept:
                out.append(Propagation(position, target, table, column, tuple(kept)))
    return _merged(out)


class CannotPropagate(Refused):
    """A write whose target columns cannot be traced to tagged sources (fail closed)."""


def _merged(props: list[Propagation]) -> list[Propagation]:
    seen: dict[tuple[int, str, str, str], set[str]] = {}
    for p in props:
        key = (p.position, p.column, p.source_table, p.source_column)
        seen.setdefault(key, set()).update(p.tags)
    return [Propagation(*k, tuple(sorted(v))) for k, v in seen.items()]


def by_position(props: list[Propagation]) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """The target's column position -> tags, for its governed state."""
    out: dict[int, set[str]] = {}
    for p in props:
        out.setdefault(p.position, set()).update(p.tags)
    return tuple((i, tuple(sorted(t))) for i, t in sorted(out.items()))


# ---- lineage on the tree ---------------------------------------------------------------


def _lineage(
    query: exp.Expression,
    sources: list[tuple[exp.Table, TableInfo]],
    target_columns: list[str] | None,
) -> tuple[list[str], list[list[tuple[str, str, frozenset[str]]]]]:
    """The output columns' names and, per output column (by position), (table, column,
    masks on the way) per source path."""
    tree = query.copy()
    copies = {id(o): c for o, c in zip(query.walk(), tree.walk(), strict=True)}
    schema: dict = {}
    for node, info in sources:
        table = copies.get(id(node))
        if not isinstance(table, exp.Table):
            raise ValueError("source node not found")
        alias = table.alias or table.name
        table.set("catalog", exp.to_identifier(info.catalog))
        table.set("db", exp.to_identifier(info.schema))
        table.set("this", exp.to_identifier(info.name))
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        cols = {c.name.lower(): "STRING" for c in info.columns}
        schema.setdefault(info.catalog, {}).setdefault(info.schema, {})[info.name] = cols
    tree = qualify(tree, schema=schema, dialect="spark", validate_qualify_columns=False)
    first = tree
    while isinstance(first, exp.SetOperation):
        first = first.this
    if not isinstance(first, exp.Select):
        raise ValueError("the query's output is not a SELECT list")
    width = len(first.expressions)
    if target_columns is not None and len(target_columns) != width:
        raise ValueError("the query's output does not match the target's columns")
    names = list(target_columns or [])
    keys = [f"__lg_out{i}" for i in range(width)]
    for i, (projection, key) in enumerate(zip(list(first.expressions), keys, strict=True)):
        if target_columns is None:
            names.append(projection.alias_or_name or f"#{i}")
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        projection.replace(exp.alias_(inner.copy(), key))
    return names, [_leaves(lineage(k, tree, schema=schema, dialect="spark")) for k in keys]


def _leaves(root: Node) -> list[tuple[str, str, frozenset[str]]]:
    out: list[tuple[str, str, frozenset[str]]] = []
    stack: list[tuple[Node, frozenset[str]]] = [(root, frozenset())]
    while stack:
        node, masked = stack.pop()
        if isinstance(node.expression, exp.Table) and not node.downstream:
            t = node.expression
            table = ".".join(p.lower() for p in (t.catalog, t.db, t.name))
            out.append((table, node.name.split(".")[-1].strip('"`').lower(), masked))
            continue
        here = masked | {_shape(node.expression)}
        stack += [(child, here) for child in node.downstream]
    return out


def _shape(expression: exp.Expression) -> str:
    """An expression over one column, that column replaced by a placeholder: comparable
    with a mask's own expression."""
    inner = expression.this if isinstance(expression, exp.Alias) else expression
    tree = inner.copy()
    columns = list(tree.find_all(exp.Column))
    if len(columns) != 1:
        return ""
    placeholder = exp.column(_PLACEHOLDER)
    if columns[0] is tree:
        return placeholder.sql("spark")
    columns[0].replace(placeholder)
    return _normal(tree)


def _normal(tree: exp.Expression) -> str:
    for ident in tree.find_all(exp.Identifier):
        ident.set("quoted", False)
    return tree.sql("spark", normalize=True)


def _own_masks(ps: PolicySet) -> dict[str, frozenset[str]]:
    """tag -> the shapes of the masks it drives (every one must be applied to drop it)."""
    out: dict[str, set[str]] = {}
    for m in ps.column_masks:
        tags = (m.match.tag,) if m.match is not None else m.tags
        for tag in tags:
            try:
                text = mask_sql(m.mask, _PLACEHOLDER, "string", _bound(m))
            except Exception:  # a mask that cannot be built never drops a tag
                out.setdefault(tag, set()).add("\0unbuildable")
                continue
            out.setdefault(tag, set()).add(_normal(sqlglot.parse_one(text, read="spark")))
    return {t: frozenset(s) for t, s in out.items()}


def _bound(m: object) -> str | None:
    """A custom mask's expression with its `as` name written as `{col}`."""
    expression = getattr(m, "expression", None)
    match = getattr(m, "match", None)
    if expression and match is not None and match.as_:
        tree = sqlglot.parse_one(expression, read="spark")
        for c in list(tree.find_all(exp.Column)):
            if not c.table and c.name.lower() == match.as_:
                c.replace(exp.column(_PLACEHOLDER))
        return tree.sql("spark")
    return expression
