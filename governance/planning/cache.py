"""The plan cache: dashboards and notebooks re-run the same text, so a repeated query skips
parse, decide and rewrite (issue 14).

A plan depends on more than its text; the key holds all of it: the statement exactly as
sent (str and bytes never meet), the canonical user and the groups its identity provider
asserted for this request, the namespace, the policy set that decides (its enforcer object,
which also fixes the user's YAML groups, and its version), the
catalog's generation (registrations, locations, columns; mapping tables are found through
it), the session's temp-view version (0 with no views: nothing to expand), and the layer's
derived relations. What is at a table's location cannot be keyed up front: an entry keeps
the Delta identity (the table's own `metaData.id` and version, catalog/identity.py) of every
table it reads, and the (root, table id, version) key of every table whose tags decided it,
and a hit re-reads them (one listing of each `_delta_log`) and misses when one moved: a
table dropped and created again at its place, or replaced behind the catalog's back, is
planned afresh (its pin, its tags), and so is a table that took a commit.

Only query plans are cached: never writes, DDL, USE, metadata, temp-view statements, a plan
that read the clock (`TIMESTAMP AS OF now() - ...` is folded to a literal at plan time), or
anything refused (a refusal raises, so it is never stored and is decided again next time).
A hit hands out a copy whose containers are its own: nothing a statement's run, audit or
the Connect gateway does to its plan reaches the cached one or another statement's.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, replace

from sqlglot import exp

from catalog.identity import DeltaIdentity, IdentityUnreadable, delta_identity
from catalog.model import TableInfo
from governance.metrics import cache_lookup
from governance.planning.dispatch import Planner
from governance.planning.expected import Expected
from governance.planning.planned import Planned
from governance.planning.views import TempViews
from governance.policy.tags import TagsUnreadable, delta_tags
from governance.sql.resolve import Namespace

#: Entries held; the least recently used goes first.
MAX_ENTRIES = 2048
#: Longer statements are planned every time: 2048 of the 1 MB the parser accepts would hold
#: gigabytes.
MAX_CACHED_CHARS = 65_536


@dataclass(frozen=True)
class PlanKey:
    """Everything a query's plan depends on that is known before planning it."""

    statement: str | bytes
    user: str
    groups: frozenset[str]  # the identity provider's groups (IdpClaims.groups)
    namespace: Namespace
    policy: object  # the enforcer in force (compared by identity): policies and groups
    policy_version: str
    generation: int  # the catalog store's generation, read before planning
    temp_views: int  # TempViews.version (0: none)
    derived: tuple[tuple[str, str], ...]


def plan_key(
    statement: str | bytes,
    *,
    user: str,
    groups: frozenset[str] = frozenset(),
    namespace: Namespace,
    policy: object,
    policy_version: str,
    generation: int,
    temp_views: TempViews | None,
    derived: dict[str, str],
) -> PlanKey | None:
    """The key of a statement's plan; None when it is not cacheable by its text alone (a
    str or bytes subclass may compare as it likes; a very long statement)."""
    if type(statement) not in (str, bytes) or len(statement) > MAX_CACHED_CHARS:
        return None
    return PlanKey(
        statement,
        user,
        groups,
        namespace,
        policy,
        policy_version,
        generation,
        temp_views.version if temp_views is not None else 0,
        tuple(sorted(derived.items())),
    )


@dataclass(frozen=True)
class _Entry:
    planned: Planned
    decided: dict[str, tuple[str, ...]]  # what the planner learnt, for denial audit lines
    filters: dict[str, tuple[str, ...]]
    tags: tuple[tuple[TableInfo, tuple], ...]  # tables whose Delta tags decided, their keys
    identities: tuple[tuple[str, DeltaIdentity], ...]  # location -> the table planned over


class PlanCache:
    """A bounded, thread-safe LRU of query plans, shared by every session of a Lakegate
    (REST plans each statement in a session of its own)."""

    def __init__(self, size: int = MAX_ENTRIES) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[PlanKey, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def plan(self, planner: Planner, statement: str | bytes, key: PlanKey | None) -> Planned:
        """The statement's plan: a copy of the cached one, or planned now (and kept when it
        may be)."""
        if key is None:
            return planner.plan(statement)
        entry = self._get(key)
        if entry is not None:
            planner.ctx.decided.update(entry.decided)
            planner.ctx.filters.update(entry.filters)
            return _copy(entry.planned)
        planned = planner.plan(statement)
        if _cacheable(planned, planner):
            self._put(key, _entry(planned, planner))
        return planned

    def _get(self, key: PlanKey) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and not (_identities_hold(entry) and _tags_hold(entry)):
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry = None
        with self._lock:
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
        cache_lookup("plan", entry is not None)
        return entry

    def _put(self, key: PlanKey, entry: _Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


def _cacheable(planned: Planned, planner: Planner) -> bool:
    """Plain query plans only (a temp-view statement's plan is a subclass), and none that
    read the clock."""
    return (
        type(planned) is Planned
        and planned.is_query
        and planned.cmd == "select"
        and planned.sql is not None
        and not planner.ctx.clock_read
    )


def _entry(planned: Planned, planner: Planner) -> _Entry:
    tags = {v.access.table.full_name: (v.access.table, v.access.tags.key) for v in planned.views}
    return _Entry(
        _detached(_copy(planned)),
        dict(planner.ctx.decided),
        dict(planner.ctx.filters),
        tuple(t for t in tags.values() if t[1]),
        tuple(planned.identities.items()),
    )


def _detached(planned: Planned) -> Planned:
    """The plan without the statement's parsed tree: each view's table node is a copy of
    that node alone. A node's parent links reach the whole tree (about 500 objects per
    TPC-DS query), which a full cache would keep alive by the million for the collector to
    walk at every full collection; only planning reads the node, never a hit."""
    planned.views = [replace(v, ref=replace(v.ref, node=_alone(v.ref.node))) for v in planned.views]
    return planned


def _alone(node: exp.Table) -> exp.Table:
    """A copy of the table node: the rewrite replaced the node and reused its identifiers in
    the statement's tree, so even a node with no parent reaches the tree through them."""
    return node.copy()


def _identities_hold(entry: _Entry) -> bool:
    """Every table the plan reads is still the Delta table it was planned over, at the same
    version; an unreadable log is a miss (planning then refuses, as it would have)."""
    for location, known in entry.identities:
        try:
            if delta_identity(location) != known:
                return False
        except IdentityUnreadable:
            return False
    return True


def _tags_hold(entry: _Entry) -> bool:
    """Every table whose Delta tags decided the plan still has them at the same version; an
    unreadable log is a miss (planning then refuses, as it would have)."""
    for table, key in entry.tags:
        try:
            if delta_tags(table)[0] != key:
                return False
        except TagsUnreadable:
            return False
    return True


def _copy(planned: Planned) -> Planned:
    """A plan whose containers are its own (their items are immutable or never changed)."""
    e = planned.expected
    return replace(
        planned,
        views=list(planned.views),
        expected=Expected(
            views={k: list(v) for k, v in e.views.items()},
            targets=Counter(e.targets),
            derived={k: list(v) for k, v in e.derived.items()},
            policy_reads=dict(e.policy_reads),
            owners={k: list(v) for k, v in e.owners.items()},
        ),
        columns={k: list(v) for k, v in planned.columns.items()},
        derived=set(planned.derived),
        policy_reads=list(planned.policy_reads),
        pins=dict(planned.pins),
        identities=dict(planned.identities),
    )
