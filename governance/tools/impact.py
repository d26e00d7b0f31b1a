"""What a policy change does to the data (`lakegate policy impact`, docs/policy-review.md).

`policy diff` says who gains or loses which right; a reviewer also wants the size of it:
for each user or group the diff names, the rows of each affected table it would see before
and after, and the columns that go clear <-> masked <-> hidden. Both policy sets are
evaluated against the same live tables without touching the policies in force: each side
gets its own enforcer and rewriter, plans the table's read as the user and Spark counts the
governed result. Only counts leave this module, never a value; the run is one admin act on
the audit log (`cmd=policyImpact`).
"""

from __future__ import annotations

import getpass
import re
import threading
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from catalog.model import TableInfo
from governance.errors import AccessDenied, LakegateError
from governance.execute.run import run_planned
from governance.planning.dispatch import Planner
from governance.policy.analysis import NOBODY, OTHER_USER, Access, diff_policies, effective_access
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.model import PolicySet
from governance.policy.tag_state import governed_state
from governance.rewrite.dynamic_views import PolicySql
from governance.session.governed import table_statement
from governance.sql.resolve import Namespace

SEED = 40  # one fixed seed: a sampled run is repeatable
# diff changes that can change rows or columns (APPLY_TAG rights change neither)
DATA_KINDS = frozenset({"privilege", "columns", "mask", "row_filter", "mapping", "error"})


@dataclass(frozen=True)
class Count:
    """The rows one side shows: `rows` None when the side cannot read the table (no select)
    or the count did not finish (`note` says which: "no access", "timed out", "failed")."""

    rows: int | None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, **({"note": self.note} if self.note else {})}

    def text(self, estimated: bool) -> str:
        if self.rows is None:
            return self.note
        return f"~{self.rows}" if estimated else str(self.rows)


@dataclass
class TableImpact:
    """One affected user or group on one table, before and after."""

    who: str  # a named user, `<any other user>`, or `group:NAME`
    table: str
    tags: tuple[str, ...]  # the table's and its columns' tags (either side, governed state)
    before: Count
    after: Count
    columns: list[tuple[str, str, str]] = field(default_factory=list)  # (column, old, new)

    @property
    def gained_rows(self) -> int:
        """Rows more than before (a side without access shows 0); 0 if a count is unknown."""
        if self._unknown:
            return 0
        return max(0, (self.after.rows or 0) - (self.before.rows or 0))

    @property
    def lost_rows(self) -> int:
        if self._unknown:
            return 0
        return max(0, (self.before.rows or 0) - (self.after.rows or 0))

    @property
    def _unknown(self) -> bool:
        return any(c.rows is None and c.note != "no access" for c in (self.before, self.after))

    @property
    def unmasked(self) -> list[str]:
        """Columns newly readable in clear (from masked or hidden)."""
        return [c for c, old, new in self.columns if new == "clear"]

    def to_json(self) -> dict[str, Any]:
        return {
            "who": self.who,
            "table": self.table,
            "tags": list(self.tags),
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "columns": [{"column": c, "before": o, "after": n} for c, o, n in self.columns],
        }


@dataclass
class Impact:
    """Every affected (user or group, table), and how the rows were counted."""

    method: str  # "full count", "sample 10% (estimated)", "time limit 30 s per count"
    estimated: bool
    entries: list[TableImpact] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "estimated": self.estimated,
            "impact": [e.to_json() for e in self.entries],
        }

    def to_markdown(self) -> str:
        if not self.entries:
            return f"### Data impact: no change\n\nRows counted by {self.method}.\n"
        lines = [
            "### Data impact",
            "",
            f"Rows counted by {self.method}; counts only, no values.",
            "",
            "| who | table | rows before | rows after | columns |",
            "|---|---|---|---|---|",
        ]
        for e in self.entries:
            cols = ", ".join(f"{c}: {o} -> {n}" for c, o, n in e.columns) or "-"
            b, a = e.before.text(self.estimated), e.after.text(self.estimated)
            lines.append(f"| {e.who} | {e.table} | {b} | {a} | {cols} |")
        if any(e.who == OTHER_USER or e.who.startswith("group:") for e in self.entries):
            lines += [
                "",
                f"`group:NAME` and `{OTHER_USER}` are counted as `{NOBODY}`, a user no "
                "policy names (with only that group).",
            ]
        return "\n".join(lines) + "\n"


def column_states(access: Access, table: TableInfo) -> dict[str, str]:
    """Each column as one side shows it: clear, masked (MASK) or hidden."""
    masks = {c.lower(): m for c, m, _ in access.masks}
    shown = {c.lower() for c in access.columns}
    out = {}
    for col in table.columns:
        name = col.name.lower()
        if not access.can_select or name not in shown:
            out[col.name] = "hidden"
        elif name in masks:
            out[col.name] = f"masked ({masks[name]})"
        else:
            out[col.name] = "clear"
    return out


def table_tags(table: TableInfo, sets: Collection[PolicySet]) -> tuple[str, ...]:
    """Tags of the table or any of its columns, in either policy set or its governed state."""
    c, s, t = table.catalog, table.schema, table.name
    tags: set[str] = set()
    for ps in sets:
        tags |= ps.table_tags(c, s, t)
        for col in table.columns:
            tags |= ps.column_tags(c, s, t, col.name.lower())
    try:
        for col_tags in governed_state(table).values():
            tags |= set(col_tags)
    except ValueError:
        pass
    return tuple(sorted(tags))


class _Side:
    """One policy set ready to plan reads with, apart from the policies in force."""

    def __init__(self, lg: Any, ps: PolicySet) -> None:
        self.lg = lg
        self.enforcer = PolicyEnforcer(ps)
        self.sql = PolicySql(self.enforcer, lg.catalog, lg.config.mapping_inline_max_keys)

    def count(
        self,
        uid: str,
        groups: frozenset[str],
        table: TableInfo,
        sample: float | None,
        time_limit: float | None,
    ) -> Count:
        """The governed rows `uid` (with provider `groups`) reads from `table`."""
        lg = self.lg
        planner = Planner(
            catalog=lg.catalog,
            enforcer=self.enforcer,
            policy_sql=self.sql,
            user=uid,
            groups=groups,
            namespace=Namespace(lg.config.default_catalog, lg.config.default_schema),
        )
        try:
            planned = planner.plan(table_statement(table.full_name))
        except AccessDenied:
            return Count(None, "no access")
        except LakegateError:
            return Count(None, "failed")
        return _count(lg, planned, sample, time_limit)


def _count(lg: Any, planned: Any, sample: float | None, time_limit: float | None) -> Count:
    """Spark counts the governed plan (sampled: an estimate), stopped after `time_limit`."""
    spark = lg.spark
    group = f"lakegate-impact-{uuid.uuid4().hex}"
    result: list[Count] = []

    def run() -> None:
        try:
            if time_limit is not None:
                spark.sparkContext.setJobGroup(group, "policy impact", interruptOnCancel=True)
            df = run_planned(
                planned,
                spark,
                lg.catalog,
                verify=lg.config.verify_plans,
                analyze=lg.analyze_view,
                refresh_derived=lg.refresh_audit_view,
            )
            if sample is None:
                result.append(Count(df.count()))
            else:
                n = df.sample(fraction=sample, seed=SEED).count()
                result.append(Count(round(n / sample)))
        except Exception:  # Spark's text never reaches the output
            result.append(Count(None, "failed"))

    if time_limit is None:
        run()
        return result[0]
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(time_limit)
    if worker.is_alive():
        spark.sparkContext.cancelJobGroup(group)
        worker.join()
        return Count(None, "timed out")
    return result[0]


def policy_impact(
    lg: Any,
    old: PolicySet,
    new: PolicySet,
    *,
    provider_groups: Collection[str] = (),
    sample: float | None = None,
    time_limit: float | None = None,
) -> Impact:
    """The data impact of replacing `old` by `new` on `lg`'s live tables, for the users and
    groups whose access to a table `diff_policies` says changes (nobody else is counted).
    A group is counted as a synthetic member of that group alone (`NOBODY`, a name no
    policy names); `<any other user>` as NOBODY without groups."""
    if sample is not None and not 0 < sample <= 1:
        raise LakegateError("--sample must be a fraction in (0, 1]")
    if time_limit is not None and time_limit <= 0:
        raise LakegateError("--time-limit must be a positive number of seconds")
    tables = {t.full_name: t for t in lg.catalog.tables()}
    diff = diff_policies(old, new, list(tables.values()), sorted(provider_groups))
    affected = list(dict.fromkeys((c.user, c.table) for c in diff.changes if c.kind in DATA_KINDS))
    method = "full count"
    if sample is not None:
        method = f"sample {sample:g} of the rows (seed {SEED}; counts estimated)"
    if time_limit is not None:
        method += f", time limit {time_limit:g} s per count"
    out = Impact(method, sample is not None)
    sides = (_Side(lg, old), _Side(lg, new))
    for who, name in affected:
        table = tables[name]
        uid = NOBODY if who == OTHER_USER or who.startswith("group:") else who
        groups = frozenset({who[len("group:") :]}) if who.startswith("group:") else frozenset()
        before, after = (s.count(uid, groups, table, sample, time_limit) for s in sides)
        a = column_states(effective_access(sides[0].enforcer, uid, table, groups), table)
        b = column_states(effective_access(sides[1].enforcer, uid, table, groups), table)
        out.entries.append(
            TableImpact(
                who,
                name,
                table_tags(table, (old, new)),
                before,
                after,
                [(c, a[c], b[c]) for c in a if a[c] != b[c]],
            )
        )
    return out


# --fail-on thresholds ------------------------------------------------------------------

METRICS = ("gain-rows", "lose-rows", "unmask-columns")
_THRESHOLD = re.compile(
    r"(?P<metric>[a-z-]+)>(?P<n>[0-9]{1,18})"
    r"(?::(?P<key>tag|table|who)=(?P<value>[A-Za-z0-9_.:<>*\- ]{1,200}))?"
)


@dataclass(frozen=True)
class Threshold:
    """`METRIC>N[:tag=T|:table=C.S.T|:who=NAME]`: exceeded when one affected (who, table)
    entry matching the filter goes over N (docs/policy-review.md)."""

    metric: str
    limit: int
    key: str | None = None
    value: str | None = None

    @classmethod
    def parse(cls, text: str) -> Threshold:
        m = _THRESHOLD.fullmatch(text.strip())
        if m is None or m["metric"] not in METRICS:
            raise ValueError(
                f"--fail-on {text!r}: expected METRIC>N[:tag=T|:table=C.S.T|:who=NAME] "
                f"with METRIC one of {', '.join(METRICS)}"
            )
        return cls(m["metric"], int(m["n"]), m["key"], m["value"] and m["value"].lower())

    def __str__(self) -> str:
        return f"{self.metric}>{self.limit}" + (f":{self.key}={self.value}" if self.key else "")

    def exceeded(self, impact: Impact) -> list[TableImpact]:
        return [e for e in impact.entries if self._applies(e) and self._value(e) > self.limit]

    def _applies(self, e: TableImpact) -> bool:
        if self.key == "tag":
            return self.value in e.tags
        if self.key == "table":
            return e.table == self.value
        if self.key == "who":
            return e.who.lower() == self.value
        return True

    def _value(self, e: TableImpact) -> int:
        if self.metric == "gain-rows":
            return e.gained_rows
        if self.metric == "lose-rows":
            return e.lost_rows
        return len(e.unmasked)


def audited_impact(lg: Any, compute: Callable[[], Impact]) -> Impact:
    """Run `compute()` as an admin act: its intent on the audit log before any count, its
    outcome after (cmd=policyImpact, proto=cli), like registerTable."""
    qid = uuid.uuid4().hex
    admin = getpass.getuser()
    lg._audit_admin(admin, "policyImpact", None, qid, True, None, phase="intent")
    try:
        impact = compute()
    except Exception as e:
        reason = str(e).splitlines()[0] if isinstance(e, LakegateError) else type(e).__name__
        lg._audit_admin(admin, "policyImpact", None, qid, False, reason, phase="outcome")
        raise
    lg._audit_admin(admin, "policyImpact", None, qid, True, None, phase="outcome")
    return impact
