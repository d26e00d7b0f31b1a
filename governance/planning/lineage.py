"""Tags follow the data: the column tags a write carries from its sources to its target.

`CREATE TABLE ... AS SELECT`, `INSERT ... SELECT`, UPDATE and MERGE assignments and
DataFrame writes copy values; a copy of a tagged column must stay under the rules its tag
drives. Each target column takes the tags of exactly the source columns its value is
computed from, by attribute lineage in Spark's ANALYSED plan of the governed statement that
runs (PlanWalker.lineage, one JVM call: projections, aggregates, windows, generators,
joins, set operations child by child, CTE references, down to the Delta relations, whose
root paths name the tables read). Columns read only in WHERE, JOIN, GROUP BY or ORDER BY
carry nothing; no column is matched to another by its position in the user's text.

One expression drops a tag: the tag's own mask applied to the column
(`sha2(cast(email AS string), 256)` for a `pii` column whose every mask is `hash`), on every
path to it, since the copy then holds what the mask shows. That is read from sqlglot's
column lineage of the user's tree, and used for a target column only when the projections
whose sources are exactly the target column's (by Spark) all drop the tag; otherwise the
tag stays. When Spark's plan cannot be traced (a node or expression the pass does not
know) every target column takes every tag of the sources (fail closed; the enforcer then
applies the strongest of the masks the tags drive), and a write that would put on one
column tags whose masks cannot be ordered by strength is refused before it runs. The tags
go into the target's governed state (governance.policy.tag_state): only a holder of
APPLY_TAG removes them.

UPDATE and MERGE assignments are traced on the tree, each assigned value on its own (by
the assignment, never by position); Connect DataFrame writes over-tag (every target column
takes every tag its governed reads read).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.lineage import Node, lineage
from sqlglot.optimizer.qualify import qualify

from catalog.locations import normalise_location
from catalog.model import TableInfo
from governance.errors import Refused
from governance.policy.enforcer import AmbiguousMask, strongest
from governance.policy.masks import mask_sql
from governance.policy.model import ColumnMask, PolicySet
from governance.policy.tags import column_tags

_PLACEHOLDER = "__lg_col"


@dataclass(frozen=True)
class Propagation:
    """`tags` carried from `source` (table, column) to the target's column at `position`
    (`column`: its name)."""

    position: int
    column: str
    source_table: str
    source_column: str
    tags: tuple[str, ...]


Source = tuple[exp.Table, TableInfo, tuple[str, ...]]  # a read: node, table, columns it shows
Leaf = tuple[str, str, frozenset[str]]  # (table, column, masks on the way)


@dataclass(frozen=True)
class Traced:
    """One projection of the user's query as sqlglot traces it: its name ("" for one
    making several columns), and per source column the tags every path to it drops."""

    name: str
    sources: frozenset[tuple[str, str]]
    dropped: Mapping[tuple[str, str], frozenset[str]]


@dataclass
class Carry:
    """What a write (CTAS, INSERT ... SELECT) needs to learn its tags from Spark's analysed
    plan: the plan field holding its query, each read's location -> (table, column -> tags),
    the user's projections as traced (for the mask-drop rule), the target's tags before the
    write and the tag-driven masks
    (for the strength check), and an existing target's columns (the fallback's)."""

    field: str
    target: str
    reads: dict[str, tuple[str, dict[str, frozenset[str]]]]
    traced: tuple[Traced, ...]
    existing: dict[str, frozenset[str]] = field(default_factory=dict)
    masks: tuple[ColumnMask, ...] = ()
    columns: tuple[str, ...] = ()  # an existing target's columns


def plan_carry(
    ps: PolicySet,
    query: exp.Expression,
    sources: Iterable[Source],
    target: str,
    existing: TableInfo | None = None,
) -> Carry | None:
    """The Carry of a write reading `sources` through `query` into `target` (None when no
    column it reads carries a tag). `existing`: the target table, when it exists."""
    sources = list(sources)
    reads = {
        normalise_location(info.location): (info.full_name, dict(column_tags(ps, info).columns))
        for _, info, _ in sources
    }
    if not any(tags for _, tags in reads.values()):
        return None
    masks = _own_masks(ps)
    try:
        traced = tuple(_traced(query, sources, reads, masks))
    except Exception:  # sqlglot cannot trace it: no tag is dropped
        traced = ()
    have = dict(column_tags(ps, existing).columns) if existing is not None else {}
    columns = tuple(c.name for c in existing.columns) if existing is not None else ()
    return Carry("query", target, reads, traced, have, tag_masks(ps, target), columns)


def carried(carry: Carry, answer: str | None) -> list[Propagation]:
    """The tags each column of the write's output takes, from PlanWalker.lineage's `answer`
    (None or "!...": not traced, every column takes every tag)."""
    if answer is None:  # the JVM call failed: every column the write may fill
        if not carry.columns:
            raise Refused(
                f"the tags the write to {carry.target} carries cannot be traced in Spark's "
                "plan; refused"
            )
        return _every(carry, list(carry.columns))
    lines = answer.split("\n")[:-1]
    if answer.startswith("!"):  # the kind not traced, then the output's names
        return _every(carry, [_unescape(n) for n in lines[1:]])
    out: list[Propagation] = []
    for position, line in enumerate(lines):
        head, *leaves = line.split("\t")
        names = [_unescape(n) for n in head.split("\x1f")]
        name, known = names[0], {n.lower() for n in names}
        found = {_leaf(x) for x in leaves}
        sources = frozenset(
            (carry.reads[loc][0], col.lower()) for loc, col in found if loc in carry.reads
        )
        candidates = [
            t for t in carry.traced if t.sources == sources and (t.name == "" or t.name in known)
        ]
        for table, column in sorted(sources):
            have = next(tags for t, tags in carry.reads.values() if t == table).get(column)
            if not have:
                continue
            drop = (
                frozenset.intersection(
                    *(t.dropped.get((table, column), frozenset()) for t in candidates)
                )
                if candidates
                else frozenset()
            )
            kept = tuple(sorted(have - drop))
            if kept:
                out.append(Propagation(position, name, table, column, kept))
    return out


def _every(carry: Carry, names: list[str]) -> list[Propagation]:
    """Fail closed: every output column takes every tag of every read."""
    out: list[Propagation] = []
    for position, name in enumerate(names):
        for table, tags in carry.reads.values():
            for column, have in sorted(tags.items()):
                out.append(Propagation(position, name, table, column, tuple(sorted(have))))
    return out


_UNESCAPE = re.compile(r"\\([\\tnrs])")
_ESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r", "s": "\x1f"}


def _unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: _ESCAPES[m.group(1)], text)


def _leaf(text: str) -> tuple[str, str]:
    """(location, column) of one leaf: root paths, then the column, US-separated."""
    paths, _, column = text.rpartition("\x1f")
    roots = _unescape(paths).split("\x1f")
    loc = normalise_location(roots[0]) if len(roots) == 1 else ""
    return loc, _unescape(column)


def refuse_unorderable(
    carry_masks: Iterable[ColumnMask],
    target: str,
    props: list[Propagation],
    existing: Mapping[str, frozenset[str]],
) -> None:
    """Refuse a write that would put on one target column tags whose masks cannot be
    ordered by strength (governance.policy.enforcer: a reader would be refused, so the copy
    is never made): for each column, any two masks driven by two of its tags."""
    by_tag: dict[str, list[ColumnMask]] = {}
    for m in carry_masks:
        for t in _mask_tags(m):
            by_tag.setdefault(t, []).append(m)
    tags: dict[str, set[str]] = {}
    for p in props:
        tags.setdefault(p.column.lower(), set(existing.get(p.column.lower(), ()))).update(p.tags)
    for column, have in sorted(tags.items()):
        routes = sorted(t for t in have if t in by_tag)
        for i, a in enumerate(routes):
            for b in routes[i + 1 :]:
                for ma in by_tag[a]:
                    for mb in by_tag[b]:
                        if ma is not mb and not _orderable(ma, mb):
                            raise Refused(
                                f"the write would tag column {column} of {target} with "
                                f"{a} and {b}, whose masks {ma.id} and {mb.id} cannot be "
                                "ordered by strength; refused"
                            )


def _orderable(a: ColumnMask, b: ColumnMask) -> bool:
    """The enforcer's own rule for two masks reaching one column through different tags."""
    try:
        strongest([a, b], "")
    except AmbiguousMask:
        return False
    return True


def _mask_tags(m: ColumnMask) -> tuple[str, ...]:
    return (m.match.tag,) if m.match is not None else m.tags


def tag_masks(ps: PolicySet, target: str) -> tuple[ColumnMask, ...]:
    """The tag-driven masks that may apply to the target table."""
    parts = target.split(".")
    return tuple(
        m
        for m in ps.column_masks
        if _mask_tags(m) and (len(parts) != 3 or m.on.matches_table(*parts))
    )


def assigned(
    ps: PolicySet,
    query: exp.Select,
    sources: Iterable[Source],
    names: Mapping[str, str],
) -> list[Propagation]:
    """UPDATE's and MERGE's assignments: `query` selects each assigned value under an
    alias that `names` maps to the assigned column; each takes the tags of the columns its
    value is computed from (sqlglot's lineage, by the alias). A value that cannot be traced
    gives its column every tag of the sources (fail closed)."""
    sources = list(sources)
    tags = {info.full_name: column_tags(ps, info).columns for _, info, _ in sources}
    if not any(tags.values()):
        return []
    every = [(t, c) for t, cols in tags.items() for c in cols]
    masks = _own_masks(ps)
    reads = {
        normalise_location(i.location): (i.full_name, dict(tags[i.full_name]))
        for _, i, _ in sources
    }
    try:
        traced = {t.name: t for t in _traced(query, sources, reads, masks)}
    except Exception:
        traced = {}
    out: list[Propagation] = []
    for position, (alias, column) in enumerate(names.items()):
        t = traced.get(alias)
        for table, col in sorted(t.sources if t is not None else every):
            have = tags.get(table, {}).get(col, frozenset())
            kept = tuple(sorted(have - (t.dropped.get((table, col), frozenset()) if t else set())))
            if kept:
                out.append(Propagation(position, column, table, col, kept))
    return out


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


def _traced(
    query: exp.Expression,
    sources: list[Source],
    reads: Mapping[str, tuple[str, Mapping[str, frozenset[str]]]],
    masks: dict[str, frozenset[str]],
) -> list[Traced]:
    """Each projection of the query's output as sqlglot's column lineage traces it, with
    the tags each source column's every path drops (its own mask applied). Star expansion
    follows the columns each read shows; a projection sqlglot cannot trace raises."""
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
                continue  # the top SELECT's generator or struct star: read as one
            if _multi(projection) is not None or any(_is_generator(n) for n in projection.walk()):
                raise ValueError("a projection making several columns below the output")
            if isinstance(projection, exp.Star) or (
                isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
            ):
                raise ValueError("a * not expanded")
    keys = [f"__lg_out{i}" for i in range(len(first.expressions))]
    named: list[str] = []
    for projection, key in zip(list(first.expressions), keys, strict=True):
        multi = _multi(projection)
        named.append("" if multi is not None else projection.alias_or_name.lower())
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        read = inner if multi is None or _is_generator(multi) else multi
        projection.replace(exp.alias_(read.copy(), key))
    tags = {table: cols for table, cols in reads.values()}
    out: list[Traced] = []
    for name, key in zip(named, keys, strict=True):
        root = lineage(key, tree, schema=schema, dialect="spark")
        # a set operation's root holds its first branch's expression: each branch is its
        # own path, so the first branch's mask never counts for the others
        starts = root.downstream if isinstance(tree, exp.SetOperation) else [root]
        kept: dict[tuple[str, str], set[str]] = {}
        for start in starts:
            for table, column, masked in _leaves(start):
                have = tags.get(table, {}).get(column, frozenset())
                keep = {t for t in have if not (t in masks and masks[t] <= masked)}
                kept.setdefault((table, column), set()).update(keep)
        out.append(
            Traced(
                name,
                frozenset(kept),
                {
                    leaf: frozenset(tags.get(leaf[0], {}).get(leaf[1], frozenset()) - k)
                    for leaf, k in kept.items()
                },
            )
        )
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
