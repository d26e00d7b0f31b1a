"""Step 5: check the plan Spark itself analyzed before anything runs (defense in depth).

The rewriter and Spark parse SQL with different parsers; a differential could smuggle a raw
table read past the rewriter. So the analyzed plan is walked (subquery expressions
included) and the statement is refused unless every leaf that reads data is one the
rewriter built: a Delta table read at a catalog location, directly under the governed
view's projection with exactly the expected columns, as many times as the rewriter placed
it. Write targets are allowed once each, bare. Any other leaf reading data is refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from catalog.catalog import normalise_location
from governance.errors import Refused

# Leaves that read no stored data.
# ResolvedIdentifier only names a table to create; CTERelationRef points at a CTE whose
# definition is itself a child of the WithCTE node, and so is walked.
_HARMLESS_LEAVES = frozenset({"OneRowRelation", "LocalRelation", "Range", "EmptyRelation",
                              "ResolvedIdentifier", "CTERelationRef"})
# Commands whose plans hang off fields rather than children: the fields to walk.
_PLAN_FIELDS = {
    "UpdateCommand": ("target",),
    "DeleteCommand": ("target",),
    "MergeIntoCommand": ("target", "source"),
    "CreateTableAsSelect": ("query",),
    "ReplaceTableAsSelect": ("query",),
}
# Nodes between a governed view's projection and its relation.
_VIEW_INNER = frozenset({"SubqueryAlias", "Filter", "Sample"})


@dataclass
class Expected:
    """What the rewriter built: per location, the column lists of its views; write targets."""

    views: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    targets: Counter = field(default_factory=Counter)
    # derived tables (the audit log): files under a directory, shaped by layer-owned code
    derived: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)

    def add_view(self, location: str, columns: tuple[str, ...]) -> None:
        self.views.setdefault(normalise_location(location), []).append(
            tuple(c.lower() for c in columns))

    def add_derived(self, directory: str, columns: tuple[str, ...]) -> None:
        self.derived.setdefault(normalise_location(directory), []).append(
            tuple(c.lower() for c in columns))

    def add_target(self, location: str) -> None:
        self.targets[normalise_location(location)] += 1


def _seq(jseq: Any) -> list[Any]:
    return [jseq.apply(i) for i in range(jseq.size())]


def _name(node: Any) -> str:
    return str(node.getClass().getSimpleName()).rstrip("$")


def relation_paths(node: Any) -> list[str]:
    """The root paths of a file-based relation (empty when it has none)."""
    try:
        relation = node.relation()
        location = relation.location()
        paths = _seq(location.rootPaths())
    except Exception:
        return []
    return [normalise_location(str(p.toUri().getPath())) for p in paths]


def verify_plan(plan: Any, expected: Expected) -> None:
    """Raise Refused unless the analyzed plan reads exactly what the rewriter built."""
    views = {k: list(v) for k, v in expected.views.items()}
    derived = {k: list(v) for k, v in expected.derived.items()}
    targets = Counter(expected.targets)
    # (node, ancestors as names/nodes, nearest first, at most a few)
    stack: list[tuple[Any, tuple[Any, ...]]] = [(plan, ())]
    seen = 0
    while stack:
        node, ancestors = stack.pop()
        seen += 1
        if seen > 100_000:
            raise Refused("plan is too large to verify")
        kind = _name(node)
        children = _seq(node.children())
        for sub in _seq(node.subqueries()):
            stack.append((sub, ()))
        fields = _PLAN_FIELDS.get(kind, ())
        for f in fields:
            stack.append((getattr(node, f)(), ()))
        if children:
            chain = (node, *ancestors[:15])
            for c in children:
                stack.append((c, chain))
            continue
        if kind in _HARMLESS_LEAVES or fields:
            continue
        if kind != "LogicalRelation":
            raise Refused(f"plan verification: a {kind} leaf reads data the rewriter did not "
                          "build; statement refused")
        paths = relation_paths(node)
        if not paths:
            raise Refused("plan verification: a relation with no known location")
        if len(paths) > 1 or not (views.get(paths[0]) or targets.get(paths[0])):
            if _derived_ok(paths, ancestors, derived):
                continue
            raise Refused("plan verification: a relation reads files the catalog does not "
                          "govern; statement refused")
        loc = paths[0]
        columns = _view_columns(ancestors)
        if columns is not None and columns in views.get(loc, []):
            views[loc].remove(columns)
            continue
        if targets.get(loc, 0) > 0:
            targets[loc] -= 1
            continue
        raise Refused("plan verification: a table location is read outside its governed view;"
                      " statement refused")


def _derived_ok(paths: list[str], ancestors: tuple[Any, ...],
                derived: dict[str, list[tuple[str, ...]]]) -> bool:
    """Files all inside one derived table's directory, under its governed projection."""
    for directory, shapes in derived.items():
        if not all(p.startswith(directory + "/") for p in paths):
            continue
        for node in ancestors:
            if _name(node) == "Project":
                cols = tuple(str(a.name()).lower() for a in _seq(node.projectList()))
                if cols in shapes:
                    shapes.remove(cols)
                    return True
    return False


def _view_columns(ancestors: tuple[Any, ...]) -> tuple[str, ...] | None:
    for node in ancestors:
        kind = _name(node)
        if kind in _VIEW_INNER:
            continue
        if kind == "Project":
            return tuple(str(a.name()).lower() for a in _seq(node.projectList()))
        return None
    return None
