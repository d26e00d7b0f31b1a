"""Step 5: check the plan Spark itself analyzed before anything runs (defense in depth).

The rewriter and Spark parse SQL with different parsers; a differential could smuggle a raw
table read past the rewriter, or strip a filter or mask from a view. So the analyzed plan
is walked (subquery expressions and command fields included) and the statement is refused
unless every leaf that reads data is one the rewriter built:

- a read of a catalog table sits under a projection that is, by Spark's own `sameResult`,
  the governed view the rewriter generated for it, analyzed on its own (same columns,
  masks, filters, format and version), once per view placed; and, checked independently
  of the generated text, its output columns are exactly those the rewriter chose from the
  ones the enforcer made visible (all of them, or for a query those it can name);
- a write target (INSERT's table, UPDATE/DELETE/MERGE's target) is a catalog location the
  rewriter chose, in target position only;
- a derived table (the audit log) reads only files under its directory, under its
  governed projection;
- a mapping table a row filter or mask reads (policy rights) is read raw only inside a
  subquery held by a governed view that matched and whose policies name that table; the
  match covers the subquery (sameResult compares subquery plans), so the read is exactly
  the one the rewriter generated.

Anything else that reads data is refused.
"""

from __future__ import annotations

import base64
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from catalog.catalog import normalise_location
from catalog.identity import IdentityUnreadable, delta_identity
from governance.errors import Refused
from governance.planning.expected import Expected
from governance.runtime.java import compiled
from governance.spark_line import LINE

# Leaves that read no stored data. ResolvedIdentifier only names a table to create;
# CTERelationRef points at a CTE whose definition is a child of WithCTE, and so is walked.
_HARMLESS_LEAVES = frozenset(
    {
        "OneRowRelation",
        "LocalRelation",
        "Range",
        "EmptyRelation",
        "ResolvedIdentifier",
        "CTERelationRef",
    }
)
# Plans hanging off fields rather than children: (field, is a write target). Delta's
# commands as the Spark line's Delta names them (governance/spark_line.py).
_PLAN_FIELDS: dict[str, tuple[tuple[str, bool], ...]] = {
    **dict(LINE.command_plan_fields),
    "CreateTableAsSelect": (("query", False),),
    "ReplaceTableAsSelect": (("query", False),),
    "AppendData": (("table", True), ("query", False)),
    "OverwriteByExpression": (("table", True), ("query", False)),
    "OverwritePartitionsDynamic": (("table", True), ("query", False)),
    "InsertIntoStatement": (("table", True), ("query", False)),
}
# Nodes between a governed view's projection and its relation (View: a pinned source,
# governance/execute/sources.py; canonicalisation drops it, so sameResult still decides).
_VIEW_INNER = frozenset({"SubqueryAlias", "View", "Filter", "Sample", "GlobalLimit", "LocalLimit"})


# (view SQL, fresh) -> Spark's analyzed plan of it; fresh=False may answer from a cache
Analyze = Callable[[str, bool], Any]
# a Delta path in SQL the rewriter generated: delta.`<location>`, backticks doubled
_DELTA_PATH = re.compile(r"\bdelta\.`((?:[^`]|``)+)`")


def analysis_key(sql: str) -> tuple:
    """What a view body's analyzed plan depends on besides its text: the Delta table (own id
    and version) at each path it reads, so a cached analysis is never one of the table that
    was there before (dropped and created again, or replaced behind the catalog's back).
    A pinned source's name already carries its table's id (governance/execute/sources.py). One log
    listing per path; an unreadable log keys as unreadable, and Spark's fresh analysis
    decides."""
    paths = dict.fromkeys(p.replace("``", "`") for p in _DELTA_PATH.findall(sql))
    idents: list[object] = []
    for p in paths:
        try:
            idents.append(delta_identity(p))
        except IdentityUnreadable:
            idents.append(None)
    return (sql, tuple(idents))


MAX_NODES = 100_000
_FIELD_SPEC = ";".join(
    f"{kind}:" + ",".join(f"{name}:{int(target)}" for name, target in fields)
    for kind, fields in _PLAN_FIELDS.items()
)
_UNESCAPE = re.compile(r"\\([\\tnrs])")
_ESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r", "s": "\x1f"}


def _unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: _ESCAPES[m.group(1)], text)


@dataclass
class _Node:
    """One analyzed-plan node as the JVM-side walker described it."""

    id: int
    parent: int  # -1: a fresh ancestry (root, subquery, plan held in a field)
    kind: str
    in_target: bool
    leaf: bool
    paths: list[str]
    columns: tuple[str, ...]  # a Project's output names, lower-case
    holder: int  # for a subquery's root: the node whose expressions hold it; else -1


def _the_walker() -> Any:
    from pyspark import SparkContext

    jvm, gateway = SparkContext._jvm, SparkContext._gateway
    if jvm is None or gateway is None:
        raise Refused("plan verification needs the SparkSession's JVM")
    return compiled(
        jvm,
        gateway,
        "PlanWalker",
        lambda: Path(__file__).with_name("PlanWalker.java").read_text(),
    )


def describe_plan(plan: Any) -> tuple[list[_Node], Any]:
    """Every node of an analyzed plan (children, subqueries, plan fields) in one JVM call;
    the second value holds the JVM nodes by 1 + id."""
    out = _the_walker().apply(plan, f"{MAX_NODES}\n{_FIELD_SPEC}")
    text = str(out[0])
    if text == "TOO_LARGE":
        raise Refused("plan is too large to verify")
    text = zlib.decompress(base64.b64decode(text, validate=True)).decode("utf-8")
    nodes = []
    for line in text.splitlines():
        nid, parent, kind, target, leaf, paths, columns, holder = line.split("\t")
        nodes.append(
            _Node(
                int(nid),
                int(parent),
                kind,
                target == "1",
                leaf == "1",
                [normalise_location(_unescape(p)) for p in paths.split("\x1f")] if paths else [],
                tuple(_unescape(c).lower() for c in columns.split("\x1f")) if columns else (),
                int(holder),
            )
        )
    return nodes, out


def lineage_of(plan: Any, field: str) -> str | None:
    """PlanWalker.lineage's answer for a write's analyzed plan (`field`: the plan field
    holding its query); None when the JVM call failed (the caller fails closed)."""
    try:
        return str(_the_walker().lineage(plan, field))
    except Exception:  # py4j: a plan shape the walker's casts do not fit
        return None


@dataclass
class Verified:
    """A verified plan: its nodes, and each governed view placed in it as (location, index
    of the view in `Expected.views[location]`, id of the view's projection node)."""

    nodes: list[_Node]
    handles: Any
    views: list[tuple[str, int, int]]


def verify_plan(plan: Any, expected: Expected, analyze: Analyze) -> Verified:
    """Raise Refused unless the analyzed plan reads exactly what the rewriter built."""
    nodes, handles = describe_plan(plan)
    check = _Check(nodes, handles, expected, analyze)
    mapped = expected.mapping_locations
    deferred: list[_Node] = []
    for node in nodes:
        fields = _PLAN_FIELDS.get(node.kind, ())
        if not node.leaf or node.kind in _HARMLESS_LEAVES or fields:
            continue
        if node.kind not in ("LogicalRelation", "DataSourceV2Relation"):
            raise Refused(
                f"plan verification: a {node.kind} leaf reads data the rewriter "
                "did not build; statement refused"
            )
        if not node.paths:
            raise Refused("plan verification: a relation with no known location")
        if node.in_target:
            check.target(node)
        elif len(node.paths) == 1 and node.paths[0] in mapped and _held(nodes, node) >= 0:
            deferred.append(node)  # a policy's read, once every view has been matched
        else:
            check.read(node)
    for node in deferred:
        if not check.policy_read(node):
            check.read(node)
    return Verified(nodes, handles, check.placed)


def columns_used(verified: Verified) -> list[tuple[str, int, tuple[int, ...]]]:
    """For each governed view placed in a verified plan: (location, index in
    `Expected.views[location]`, positions in the view's projection of the columns the plan
    reads of it), by Spark's own plan after analysis: what an operator above the view uses
    (PlanWalker.live; a column only a row filter or mask reads is read inside the view and
    is not the statement's). A plan the pass cannot follow (deeper than it goes) reads
    every column of each view (an over-statement, never an omission)."""
    if not verified.views:
        return []
    fresh = ",".join(str(n.id) for n in verified.nodes if n.parent < 0 and n.holder < 0)
    roots = ",".join(str(root) for _, _, root in verified.views)
    try:
        answer = str(_the_walker().live(verified.handles, roots, fresh))
    except Exception:  # py4j: the pass gave up (a plan too deep); say every column
        return [
            (loc, i, tuple(range(len(verified.nodes[root].columns))))
            for loc, i, root in verified.views
        ]
    lines = answer.split("\n")
    return [
        (loc, i, tuple(int(p) for p in lines[k].split(",") if p))
        for k, (loc, i, _) in enumerate(verified.views)
    ]


class _Check:
    """The verifier's bookkeeping: views still to place, targets, derived reads, and the
    nodes of the views matched so far (with the mapping tables their policies read)."""

    def __init__(self, nodes: list[_Node], handles: Any, expected: Expected, analyze: Analyze):
        self.nodes, self.handles, self.analyze = nodes, handles, analyze
        self.pending = {loc: list(views) for loc, views in expected.views.items()}
        # each pending view's index in `expected.views[loc]`, deleted alongside it
        self.origin = {loc: list(range(len(views))) for loc, views in expected.views.items()}
        self.placed: list[tuple[str, int, int]] = []  # (location, index, projection node id)
        self.built: dict[str, list[Any]] = {}  # location -> analyzed views, made on demand
        self.targets = Counter(expected.targets)
        self.derived = {k: list(v) for k, v in expected.derived.items()}
        self.reads_of = expected.policy_reads
        self.inside: dict[int, frozenset[str]] = {}  # matched view node id -> mapping reads

    def target(self, node: _Node) -> None:
        paths = node.paths
        if len(paths) == 1 and self.targets.get(paths[0], 0) > 0:
            self.targets[paths[0]] -= 1
            return
        raise Refused(
            "plan verification: a write goes to a location the rewriter did "
            "not choose; statement refused"
        )

    def read(self, node: _Node) -> None:
        paths = node.paths
        ancestors = _ancestors(self.nodes, node)
        if len(paths) == 1 and paths[0] in self.pending:
            root = _view_root(ancestors)
            if root is not None:
                at = _match_view(
                    self.handles,
                    root.id,
                    root.columns,
                    paths[0],
                    self.pending,
                    self.built,
                    self.analyze,
                )
                if at is not None:
                    body = self.pending[paths[0]].pop(at)[0]
                    self.placed.append((paths[0], self.origin[paths[0]].pop(at), root.id))
                    reads = self.reads_of.get(body, frozenset())
                    for n in ancestors[: ancestors.index(root) + 1]:
                        self.inside[n.id] = reads
                    return
        elif _derived_ok(paths, ancestors, self.derived):
            return
        raise Refused(
            "plan verification: a table location is read outside its governed "
            "view; statement refused"
        )

    def policy_read(self, node: _Node) -> bool:
        """The relation sits in a subquery (nested at any depth) held by a matched view
        whose policies read this location."""
        holder = _held(self.nodes, node)
        for _ in range(64):
            if holder < 0:
                return False
            if holder in self.inside:
                return node.paths[0] in self.inside[holder]
            holder = _held(self.nodes, self.nodes[holder])
        return False


def _held(nodes: list[_Node], node: _Node) -> int:
    """The holder of the subquery `node` sits in (-1 when its ancestry is no subquery)."""
    while node.parent >= 0:
        node = nodes[node.parent]
    return node.holder


def _ancestors(nodes: list[_Node], node: _Node, depth: int = 16) -> list[_Node]:
    """The nearest ancestors first, within the node's own ancestry (as many as matter)."""
    out: list[_Node] = []
    parent = node.parent
    while parent >= 0 and len(out) < depth:
        out.append(nodes[parent])
        parent = nodes[parent].parent
    return out


def _view_root(ancestors: list[_Node]) -> _Node | None:
    """The projection a governed view starts with, just above its relation."""
    for node in ancestors:
        if node.kind in _VIEW_INNER:
            continue
        return node if node.kind == "Project" else None
    return None


def _match_view(
    handles: Any,
    root_id: int,
    columns: tuple[str, ...],
    loc: str,
    pending: dict[str, list[tuple[str, tuple[str, ...], tuple[int, ...] | None]]],
    built: dict[str, list[Any]],
    analyze: Analyze,
) -> int | None:
    """The index of the pending view the projection is, by sameResult, or None (its
    analysis is dropped from `built`; the caller takes it off `pending`). Cached
    analyses first; a miss is re-checked against fresh ones (the table may have changed
    since the cache entry) before it counts. A narrowed view is compared with the whole
    view's projection cut to the picked expressions, over the whole view's own child; the
    cut and the comparison are one JVM call (PlanWalker.same)."""
    walker = _the_walker()
    for fresh in (False, True):
        if fresh or loc not in built:
            built[loc] = [analyze(body, fresh) for body, _, _ in pending[loc]]
        for i, view in enumerate(built[loc]):
            _, wanted, picks = pending[loc][i]
            if columns != wanted:
                continue
            cut = "" if picks is None else ",".join(map(str, picks))
            if walker.same(handles, root_id, view, cut):
                del built[loc][i]
                return i
    return None


def _derived_ok(
    paths: list[str], ancestors: list[_Node], derived: dict[str, list[tuple[str, ...]]]
) -> bool:
    """Files all inside one derived table's directory, under its governed projection."""
    for directory, shapes in derived.items():
        if not all(p.startswith(directory + "/") for p in paths):
            continue
        for node in ancestors:
            if node.kind == "Project" and node.columns in shapes:
                shapes.remove(node.columns)
                return True
    return False
