"""Tags follow the data: the column tags a write carries from its sources to its target.

`CREATE TABLE ... AS SELECT`, `INSERT ... SELECT`, UPDATE and MERGE assignments and
DataFrame writes copy values; a copy of a tagged column must stay under the rules its tag
drives. Each target column takes the tags of every source column it is computed from
(column lineage of the user's query, on the sqlglot tree with `sqlglot.lineage`:
projections through subqueries, CTEs and set operations, each branch on its own; columns
read only in WHERE, JOIN or GROUP BY carry nothing). Tags are matched to the columns
Spark's query makes, not to the parsed list by position: a `*` expands to the columns each
read shows the writer, and the one projection making several columns (a generator, a
struct's `s.*`) takes the columns Spark made beyond the others (a CTAS learns how many at
registration: `Layout`). One expression drops a tag: the tag's own mask applied to the
column (`sha2(cast(email AS string), 256)` for a `pii` column whose every mask is `hash`),
on every path to it, since the copy then holds what the mask shows. When the lineage
cannot be derived or matched, every target column takes every tag the query's tables
carry (fail closed; governance.policy.enforcer then applies the strongest of the masks the
tags drive). The tags go into the target's governed state
(governance.policy.tag_state): only a holder of APPLY_TAG removes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.lineage import Node, lineage
from sqlglot.optimizer.qualify import qualify

from catalog.model import TableInfo
from governance.errors import Refused
from governance.policy.masks import mask_sql
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


Source = tuple[exp.Table, TableInfo, tuple[str, ...]]  # a read: node, table, columns it shows
Leaf = tuple[str, str, frozenset[str]]  # (table, column, masks on the way)


@dataclass(frozen=True)
class Layout:
    """A CTAS's tags before Spark says how many columns its query makes: per projection of
    the query, the columns it makes (None: known only from Spark's output, a generator or a
    struct's `s.*`) and the tags they carry; `every` all tags of the sources (fail closed)."""

    segments: tuple[tuple[int | None, tuple[str, ...]], ...]
    every: tuple[str, ...]

    def at(self, width: int) -> tuple[tuple[int, tuple[str, ...]], ...]:
        """Column position -> tags for the `width` columns Spark made; when the projections
        cannot be matched to them, every column takes every tag."""
        widths = _spread([w for w, _ in self.segments], width)
        if widths is None:
            return tuple((i, self.every) for i in range(width)) if self.every else ()
        out: list[tuple[int, tuple[str, ...]]] = []
        position = 0
        for w, (_, tags) in zip(widths, self.segments, strict=True):
            out += [(position + k, tags) for k in range(w)] if tags else []
            position += w
        return tuple(out)


def propagate(
    ps: PolicySet,
    query: exp.Expression,
    sources: Iterable[Source],
    target_columns: list[str],
) -> list[Propagation]:
    """What the target's columns (`target_columns`, in the query's output order) inherit
    from the tables `sources` (the query's reads, resolved) through `query`. A query whose
    output cannot be matched to them column by column gives every column every tag."""
    sources = list(sources)
    tags = _source_tags(ps, sources)
    if not any(tags.values()):
        return []
    every = [(t, c, frozenset[str]()) for t, cols in tags.items() for c in cols]
    try:
        traced = _lineage(query, sources)
        widths = _spread([w for w, _, _ in traced], len(target_columns))
    except Exception:  # lineage not derivable: every column takes every tag (fail closed)
        widths = None
    if widths is None:
        paths = [every for _ in target_columns]
    else:
        paths = [leaves for w, (_, _, leaves) in zip(widths, traced, strict=True) for _ in range(w)]
    masks = _own_masks(ps)
    out: list[Propagation] = []
    for position, (target, leaves) in enumerate(zip(target_columns, paths, strict=True)):
        out += _carried(tags, masks, position, target, leaves)
    return _merged(out)


def layout(
    ps: PolicySet, query: exp.Expression, sources: Iterable[Source]
) -> tuple[list[Propagation], Layout | None]:
    """A CTAS's propagation: what each projection carries (`position` the projection's),
    and the Layout its registration matches to the columns Spark made."""
    sources = list(sources)
    tags = _source_tags(ps, sources)
    if not any(tags.values()):
        return [], None
    try:
        traced = _lineage(query, sources)
    except Exception:
        raise CannotPropagate(
            "the columns of this CREATE TABLE AS SELECT cannot be traced to its "
            "sources, whose columns carry tags; name each column in the query"
        ) from None
    masks = _own_masks(ps)
    out: list[Propagation] = []
    segments: list[tuple[int | None, tuple[str, ...]]] = []
    for position, (width, name, leaves) in enumerate(traced):
        props = _carried(tags, masks, position, name or f"#{position}", leaves)
        out += props
        segments.append((width, tuple(sorted({t for p in props for t in p.tags}))))
    every = tuple(sorted({t for cols in tags.values() for ts in cols.values() for t in ts}))
    return _merged(out), Layout(tuple(segments), every)


class CannotPropagate(Refused):
    """A write whose target columns cannot be traced to tagged sources (fail closed)."""


def _source_tags(ps: PolicySet, sources: list[Source]) -> dict[str, Mapping[str, frozenset[str]]]:
    return {info.full_name: column_tags(ps, info).columns for _, info, _ in sources}


def _carried(
    tags: dict[str, Mapping[str, frozenset[str]]],
    masks: dict[str, frozenset[str]],
    position: int,
    target: str,
    leaves: list[Leaf],
) -> list[Propagation]:
    """The tags `leaves` carry to one target column: a tag is dropped on a path that applies
    its own mask, so it is kept when any path to the column keeps it."""
    out: list[Propagation] = []
    for table, column, masked in leaves:
        have = tags.get(table, {}).get(column, frozenset())
        kept = sorted(t for t in have if not (t in masks and masks[t] <= masked))
        if kept:
            out.append(Propagation(position, target, table, column, tuple(kept)))
    return out


def _spread(widths: list[int | None], total: int) -> list[int] | None:
    """Each projection's number of output columns, given Spark's `total`: at most one
    projection's is unknown (Spark allows one generator per SELECT), and it takes the rest;
    None when they cannot match (the caller fails closed)."""
    known = sum(w for w in widths if w is not None)
    unknown = [i for i, w in enumerate(widths) if w is None]
    if not unknown:
        return list(widths) if known == total else None  # type: ignore[arg-type]
    if len(unknown) > 1 or total - known < 1:
        return None
    return [total - known if w is None else w for w in widths]


def _merged(props: list[Propagation]) -> list[Propagation]:
    seen: dict[tuple[int, str, str, str], set[str]] = {}
    for p in props:
        key = (p.position, p.column, p.source_table, p.source_column)
        seen.setdefault(key, set()).update(p.tags)
    return [Propagation(*k, tuple(sorted(v))) for k, v in seen.items()]


# ---- lineage on the tree ---------------------------------------------------------------


_GENERATORS = frozenset(
    {
        "explode",
        "explode_outer",
        "posexplode",
        "posexplode_outer",
        "inline",
        "inline_outer",
        "stack",
        "json_tuple",
        "variant_explode",
        "variant_explode_outer",
    }
)


def _is_generator(node: exp.Expression) -> bool:
    """A function that makes several output columns (or rows) of one projection."""
    if isinstance(node, exp.Explode | exp.Posexplode | exp.Inline | exp.Stack | exp.Unnest):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in _GENERATORS


def _multi(projection: exp.Expression) -> exp.Expression | None:
    """What a projection making an unknown number of columns reads (a generator's call,
    a struct's `s.*` its struct column), else None."""
    inner = projection.this if isinstance(projection, exp.Alias) else projection
    if _is_generator(inner):
        return inner
    if isinstance(inner, exp.Dot) and isinstance(inner.expression, exp.Star):
        return inner.this
    return None


def _lineage(
    query: exp.Expression, sources: list[Source]
) -> list[tuple[int | None, str, list[Leaf]]]:
    """Per projection of the query's output: how many columns it makes (None: known only
    from Spark's output), its name, and its (table, column, masks on the way) per source
    path. Star expansion follows the columns each read shows (a hidden column is not in
    Spark's `*` either); anything whose width Spark alone knows elsewhere raises."""
    tree = query.copy()
    copies = {id(o): c for o, c in zip(query.walk(), tree.walk(), strict=True)}
    schema: dict = {}
    for node, info, shown in sources:
        table = copies.get(id(node))
        if not isinstance(table, exp.Table):
            raise ValueError("source node not found")
        alias = table.alias or table.name
        table.set("catalog", exp.to_identifier(info.catalog))
        table.set("db", exp.to_identifier(info.schema))
        table.set("this", exp.to_identifier(info.name))
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        cols = {c.lower(): "STRING" for c in shown}
        known = schema.setdefault(info.catalog, {}).setdefault(info.schema, {})
        if known.get(info.name, cols) != cols:
            raise ValueError("one table read with two column sets")
        known[info.name] = cols
    tree = qualify(tree, schema=schema, dialect="spark", validate_qualify_columns=False)
    first = tree
    while isinstance(first, exp.SetOperation):
        first = first.this
    if not isinstance(first, exp.Select):
        raise ValueError("the query's output is not a SELECT list")
    top = [] if tree is not first else list(first.expressions)
    for select in tree.find_all(exp.Select):
        for projection in select.expressions:
            if any(p is projection for p in top) and _multi(projection) is not None:
                continue  # the top SELECT's one generator or struct star: Spark gives its width
            if _multi(projection) is not None or any(_is_generator(n) for n in projection.walk()):
                raise ValueError("a projection makes columns only Spark can count")
            if isinstance(projection, exp.Star) or (
                isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
            ):
                raise ValueError("a * not expanded")
    if tree.find(exp.Lateral) is not None and any(_multi(p) is not None for p in top):
        raise ValueError("a lateral view and a generator in one output")
    keys = [f"__lg_out{i}" for i in range(len(first.expressions))]
    out: list[tuple[int | None, str, list[Leaf]]] = []
    for i, (projection, key) in enumerate(zip(list(first.expressions), keys, strict=True)):
        multi = _multi(projection)
        name = "" if multi is not None else projection.alias_or_name
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        read = inner if multi is None or _is_generator(multi) else multi
        projection.replace(exp.alias_(read.copy(), key))
        out.append((None if multi is not None else 1, name or f"#{i}", []))
    for (_, _, leaves), key in zip(out, keys, strict=True):
        root = lineage(key, tree, schema=schema, dialect="spark")
        # a set operation's root holds its first branch's expression: each branch is its
        # own path, so the first branch's mask never counts for the others
        starts = root.downstream if isinstance(tree, exp.SetOperation) else [root]
        for start in starts:
            leaves += _leaves(start)
    return out


def _leaves(root: Node) -> list[Leaf]:
    out: list[Leaf] = []
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
