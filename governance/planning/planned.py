"""What planning returns: plain data that the session audits and executes.

`Planned` is one statement's plan (the SQL that runs, the views it reads, what the verifier
must find, the audit lines); DDL effects are frozen dataclasses of plain data (`Action`)
that `governance.execute.actions` runs at the Spark edge, after the intent record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from catalog.identity import DeltaIdentity
from governance.planning.expected import Expected
from governance.planning.lineage import Carry, Propagation
from governance.policy.enforcer import TableAccess
from governance.rewrite.dynamic_views import PolicyRead, ReadView
from governance.sql.resolve import Namespace
from governance.verify.readable import Seen, seen_by

# The message of our own raise_error/assert_true when a written row (INSERT, the new version
# of an UPDATEd or MERGEd row) fails the writer's row filter; the session maps it to
# AccessDenied. Users cannot call raise_error or assert_true themselves.
ROW_FILTER_VIOLATION = "LAKEGATE_ROW_FILTER_VIOLATION: a written row is outside the row filter"


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
    tags: tuple[tuple[str, tuple[str, ...]], ...] = ()  # column -> tags CTAS carries


@dataclass(frozen=True)
class PropagateTags:
    """Add tags a write carries from its sources to the target's governed state (before
    the write, so no reader sees the copy without them)."""

    catalog: str
    schema: str
    name: str
    tags: tuple[tuple[str, tuple[str, ...]], ...]  # column -> tags


@dataclass(frozen=True)
class SetAside:
    """A managed location no registered table owns that already holds files: the leftover
    of a CREATE TABLE killed between Delta's commit and its registration (or of a DROP
    killed between unregistering and deleting). Renamed to `<location>.orphan-<time>` so
    the new table starts empty; nothing is deleted."""

    location: str


@dataclass(frozen=True)
class DropTable:
    """Unregister the table; delete its files only if they are its own managed files."""

    catalog: str
    schema: str
    name: str
    location: str


@dataclass(frozen=True)
class AlterTable:
    """Run `statement` (an ALTER TABLE on the table's Delta location, generated from a
    tree; None: catalog only), then re-read the table's schema into the catalog, its
    comment replaced by `comment` when `set_comment`."""

    catalog: str
    schema: str
    name: str
    location: str
    statement: str | None
    set_comment: bool = False
    comment: str | None = None
    tags: tuple[tuple[str, tuple[str, ...]], ...] | None = None  # columns' new governed tags


@dataclass(frozen=True)
class ReadHistory:
    """DESCRIBE HISTORY: the table's Delta commits, with what the user may not learn left
    out: `parameters` (predicate texts quote values of any column) only for a user who sees
    every row and column unmasked, `metrics` (row counts) and user metadata only for a user
    with no row filter on the table."""

    location: str
    parameters: bool
    metrics: bool


# A DDL effect as plain data: the session executes it (governance/execute/actions.py), so planning
# needs no handle on the session or Spark.
Action = (
    CreateCatalog | CreateSchema | RegisterTable | DropTable | AlterTable | PropagateTags | SetAside
)


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
    columns: dict[int, list[str]] = field(default_factory=dict)  # view index -> columns named
    #: view index -> the columns Spark's plan reads of the view (after pruning, found when
    #: the plan was verified: `add_read`); the audit lines record these once known, else
    #: `columns`, the visible columns the statement names (docs/audit-columns.md)
    pruned: dict[int, list[str]] | None = None
    local_rows: list[tuple] | None = None
    local_schema: str | None = None
    before: tuple[Action, ...] = ()  # run after the intent record, before the SQL
    after: tuple[Action, ...] = ()  # run after the SQL succeeded
    namespace: Namespace | None = None
    derived: set[str] = field(default_factory=set)  # derived tables read (need a temp view)
    decided_by: tuple[str, ...] = ()  # policies that allowed a DDL statement
    history: ReadHistory | None = None  # DESCRIBE HISTORY: the result, read at the Spark edge
    policy_reads: list[PolicyRead] = field(default_factory=list)  # mapping tables read
    pins: dict[str, str] = field(default_factory=dict)  # pinned source -> location (sources.py)
    propagated: list[Propagation] = field(default_factory=list)  # tags carried to the target
    #: a CTAS's or INSERT ... SELECT's tags, learnt from Spark's analysed plan before it runs
    #: (governance.planning.lineage); `propagated` and the actions are then filled in
    carry: Carry | None = None
    #: location -> the Delta table found there while planning (its own id and version):
    #: the plan cache holds a plan only while each is still the table there
    identities: dict[str, DeltaIdentity] = field(default_factory=dict)
    statement: str | bytes | None = None  # as the caller sent it (governance/verify/readable.py)

    @property
    def placeholders(self) -> list[str]:
        return [v.placeholder for v in self.views]

    def seen(self) -> Seen:
        """What the caller may be told of in an error about this statement."""
        accesses = [v.access for v in self.views] + ([self.target] if self.target else [])
        return seen_by(
            self.statement,
            [(v.alias, v.access.visible_columns) for v in self.views],
            [h for a in accesses for h in a.hidden_columns],
        )

    def hidden_column(self, name: str) -> tuple[str, str] | None:
        low = name.lower()
        accesses = [v.access for v in self.views] + ([self.target] if self.target else [])
        for a in accesses:
            for h in a.hidden_columns:
                if h.lower() == low:
                    return a.table.full_name, h
        return None

    def add_read(self, view: int, projected: tuple[str, ...], positions: tuple[int, ...]) -> None:
        """Spark's plan reads the columns at `positions` of view `view`'s projection
        (`projected`, lower-case; governance.verify.plan.columns_used): recorded in the table's
        column order, added to what other placements of the view read."""
        if not 0 <= view < len(self.views):
            return
        used = {projected[p] for p in positions if 0 <= p < len(projected)}
        pruned = dict(self.pruned or {})
        had = set(pruned.get(view, ()))
        pruned[view] = [
            c for c in self.views[view].access.visible_columns if c.lower() in used or c in had
        ]
        self.pruned = pruned

    def reads_nothing(self) -> None:
        """The statement reads no data (a schema request, a query defined but not run):
        its lines name no column."""
        self.pruned = {i: [] for i in range(len(self.views))}

    def audit_lines(self) -> list[dict[str, Any]]:
        """One line per table touched (views of one table merge), else one with src=null."""
        lines: list[dict[str, Any]] = []
        merged: dict[str, dict[str, Any]] = {}
        for i, v in enumerate(self.views):
            name = v.access.table.full_name
            found = self.pruned.get(i) if self.pruned is not None else None
            cols = found if found is not None else self.columns.get(i, [])
            line = merged.get(name)
            if line is None:
                line = {
                    "cmd": self.cmd,
                    "src": name,
                    "dst": self.dst,
                    "columns": [],
                    "masked": [],
                    "row_filters": [],
                    "policies": [],
                }
                merged[name] = line
                lines.append(line)
            if any(c not in line["columns"] for c in cols):  # views of one table merge,
                # in the table's column order
                order = {c: k for k, c in enumerate(v.access.visible_columns)}
                line["columns"] = sorted(
                    {*line["columns"], *cols}, key=lambda c: (order.get(c, len(order)), c)
                )
            for c in cols:
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
            lines.append(
                {
                    "cmd": self.cmd,
                    "src": self.target_name,
                    "dst": self.dst,
                    "row_filters": [f.id for f in t.row_filters] if t else [],
                    "policies": list(t.policy_ids) if t else list(self.decided_by),
                }
            )
        lines += self._policy_read_lines()
        lines += self.propagation_lines()
        if not lines:
            lines.append({"cmd": self.cmd, "src": None, "dst": self.dst})
        return lines

    def _policy_read_lines(self) -> list[dict[str, Any]]:
        """`cmd=policyRead`, one line per mapping table a policy read for this statement
        (audit/README.md: extends docs/spec/audit-format.md), with `readVersion` when the
        lookup was answered at plan time (the Delta version read)."""
        merged: dict[str, dict[str, Any]] = {}
        for r in self.policy_reads:
            line = merged.setdefault(
                r.table.full_name,
                {
                    "cmd": "policyRead",
                    "src": r.table.full_name,
                    "dst": self.dst,
                    "columns": [],
                    "policies": [],
                },
            )
            line["columns"] += [c for c in r.columns if c not in line["columns"]]
            line["policies"] += [p for p in r.policies if p not in line["policies"]]
            if r.inlined and r.version is not None:  # read now, at this version
                line["read_version"] = r.version
        return list(merged.values())

    def propagation_lines(self) -> list[dict[str, Any]]:
        """`cmd=tagPropagate`, one line per source table whose column tags a write carried
        to its target (audit/README.md: extends docs/spec/audit-format.md): `columns` the
        source columns, `policies` the tags carried, as `tag:NAME`."""
        merged: dict[str, dict[str, Any]] = {}
        for p in self.propagated:
            line = merged.setdefault(
                p.source_table,
                {
                    "cmd": "tagPropagate",
                    "src": p.source_table,
                    "dst": self.target_name,
                    "columns": [],
                    "policies": [],
                },
            )
            if p.source_column not in line["columns"]:
                line["columns"].append(p.source_column)
            line["policies"] += [f"tag:{t}" for t in p.tags if f"tag:{t}" not in line["policies"]]
        return list(merged.values())

    def describe(self) -> str:
        return f"-- {self.cmd}: handled by Lakegate, no Spark SQL"
