"""Step 5: check the plan Spark itself analyzed before anything runs (defense in depth).

The rewriter and Spark parse SQL with different parsers; a differential could smuggle a raw
table read past the rewriter, or strip a filter or mask from a view. So the analyzed plan
is walked (subquery expressions and command fields included) and the statement is refused
unless every leaf that reads data is one the rewriter built:

- a read of a catalog table sits under a projection that is, by Spark's own `sameResult`,
  the governed view the rewriter generated for it, analyzed on its own (same columns,
  masks, filters, format and version), once per view placed; and, checked independently
  of the generated text, its output columns are exactly those the enforcer made visible;
- a write target (INSERT's table, UPDATE/DELETE/MERGE's target) is a catalog location the
  rewriter chose, in target position only;
- a derived table (the audit log) reads only files under its directory, under its
  governed projection.

Anything else that reads data is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from catalog.catalog import normalise_location
from governance.errors import Refused

# Leaves that read no stored data. ResolvedIdentifier only names a table to create;
# CTERelationRef points at a CTE whose definition is a child of WithCTE, and so is walked.
_HARMLESS_LEAVES = frozenset({"OneRowRelation", "LocalRelation", "Range", "EmptyRelation",
                              "ResolvedIdentifier", "CTERelationRef"})
# Plans hanging off fields rather than children: (field, is a write target).
_PLAN_FIELDS: dict[str, tuple[tuple[str, bool], ...]] = {
    "UpdateCommand": (("target", True),),
    "DeleteCommand": (("target", True),),
    "MergeIntoCommand": (("target", True), ("source", False)),
    "CreateTableAsSelect": (("query", False),),
    "ReplaceTableAsSelect": (("query", False),),
    "AppendData": (("table", True), ("query", False)),
    "OverwriteByExpression": (("table", True), ("query", False)),
    "OverwritePartitionsDynamic": (("table", True), ("query", False)),
    "InsertIntoStatement": (("table", True), ("query", False)),
}
# Nodes between a governed view's projection and its relation.
_VIEW_INNER = frozenset({"SubqueryAlias", "Filter", "Sample", "GlobalLimit", "LocalLimit"})


@dataclass
class Expected:
    """What the rewriter built: per location, the SQL of its views; write targets."""

    # location -> (view body SQL, the visible columns the enforcer decided)
    views: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)
    targets: Counter = field(default_factory=Counter)
    # derived tables (the audit log): files under a directory, shaped by layer-owned code
    derived: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)

    def add_view(self, location: str, body: str, columns: tuple[str, ...]) -> None:
        self.views.setdefault(normalise_location(location), []).append(
            (body, tuple(c.lower() for c in columns)))

    def add_derived(self, directory: str, columns: tuple[str, ...]) -> None:
        self.derived.setdefault(normalise_location(directory), []).append(
            tuple(c.lower() for c in columns))

    def add_target(self, location: str) -> None:
        self.targets[normalise_location(location)] += 1


# (view SQL, fresh) -> Spark's analyzed plan of it; fresh=False may answer from a cache
Analyze = Callable[[str, bool], Any]


def _seq(jseq: Any) -> list[Any]:
    return [jseq.apply(i) for i in range(jseq.size())]


def _name(node: Any) -> str:
    return str(node.getClass().getSimpleName()).rstrip("$")


def relation_paths(node: Any) -> list[str]:
    """The root paths of a file-based (or Delta V2) relation; empty when it has none."""
    try:
        if _name(node) == "DataSourceV2Relation":
            return [normalise_location(str(node.table().path().toUri().getPath()))]
        paths = _seq(node.relation().location().rootPaths())
    except Exception:
        return []
    return [normalise_location(str(p.toUri().getPath())) for p in paths]


def verify_plan(plan: Any, expected: Expected, analyze: Analyze) -> None:
    """Raise Refused unless the analyzed plan reads exactly what the rewriter built."""
    pending = {loc: list(views) for loc, views in expected.views.items()}
    built: dict[str, list[Any]] = {}  # location -> analyzed expected views, made on demand
    targets = Counter(expected.targets)
    derived = {k: list(v) for k, v in expected.derived.items()}
    # (node, nearest ancestors first, inside a write target)
    stack: list[tuple[Any, tuple[Any, ...], bool]] = [(plan, (), False)]
    seen = 0
    while stack:
        node, ancestors, in_target = stack.pop()
        seen += 1
        if seen > 100_000:
            raise Refused("plan is too large to verify")
        kind = _name(node)
        for sub in _seq(node.subqueries()):
            stack.append((sub, (), False))
        fields = _PLAN_FIELDS.get(kind, ())
        for name, is_target in fields:
            stack.append((getattr(node, name)(), (), is_target))
        children = _seq(node.children())
        if kind in _PLAN_FIELDS:
            children = [c for c in children if not any(
                c.equals(getattr(node, f)()) for f, _ in fields)]
        if children:
            chain = (node, *ancestors[:15])
            for c in children:
                stack.append((c, chain, in_target))
            continue
        if kind in _HARMLESS_LEAVES or (fields and not children):
            continue
        if kind not in ("LogicalRelation", "DataSourceV2Relation"):
            raise Refused(f"plan verification: a {kind} leaf reads data the rewriter did not "
                          "build; statement refused")
        paths = relation_paths(node)
        if not paths:
            raise Refused("plan verification: a relation with no known location")
        if in_target:
            if len(paths) == 1 and targets.get(paths[0], 0) > 0:
                targets[paths[0]] -= 1
                continue
            raise Refused("plan verification: a write goes to a location the rewriter did "
                          "not choose; statement refused")
        if len(paths) == 1 and paths[0] in pending:
            root = _view_root(ancestors)
            if root is not None and _match_view(root, paths[0], pending, built, analyze):
                continue
        elif _derived_ok(paths, ancestors, derived):
            continue
        raise Refused("plan verification: a table location is read outside its governed "
                      "view; statement refused")


def _view_root(ancestors: tuple[Any, ...]) -> Any | None:
    """The projection a governed view starts with, just above its relation."""
    for node in ancestors:
        kind = _name(node)
        if kind in _VIEW_INNER:
            continue
        return node if kind == "Project" else None
    return None


def _match_view(root: Any, loc: str, pending: dict[str, list[tuple[str, tuple[str, ...]]]],
                built: dict[str, list[Any]], analyze: Analyze) -> bool:
    """Match against cached analyses first; a miss is re-checked against fresh ones (the
    table may have changed since the cache entry) before it counts."""
    columns = tuple(str(a.name()).lower() for a in _seq(root.projectList()))
    for fresh in (False, True):
        if fresh or loc not in built:
            built[loc] = [analyze(body, fresh) for body, _ in pending[loc]]
        for i, view in enumerate(built[loc]):
            if columns == pending[loc][i][1] and root.sameResult(view):
                del built[loc][i]
                del pending[loc][i]
                return True
    return False


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
