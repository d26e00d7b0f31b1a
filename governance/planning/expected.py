"""What the plan verifier must find in Spark's analyzed plan: pure data the planner fills.

It lives with planning, not with the verifier, so that planning stays free of Spark; the
verifier (`governance.verify.plan`, at the Spark edge) reads it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from catalog.catalog import normalise_location


@dataclass
class Expected:
    """What the rewriter built: per location, the SQL of its views; write targets."""

    # location -> (the whole view's body SQL, the columns the statement reads of it, and
    # when those are fewer than the whole view's, their positions in it)
    views: dict[str, list[tuple[str, tuple[str, ...], tuple[int, ...] | None]]] = field(
        default_factory=dict
    )
    targets: Counter = field(default_factory=Counter)
    # derived tables (the audit log): files under a directory, shaped by layer-owned code
    derived: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    # view body -> the mapping-table locations its policies read (with the policy's rights):
    # the only places those locations may be read raw are inside that view once matched
    policy_reads: dict[str, frozenset[str]] = field(default_factory=dict)
    # location -> for each of its views, the index of the plan's view (`Planned.views`) it
    # is, so the columns Spark's plan reads of it reach that view's audit line
    owners: dict[str, list[int]] = field(default_factory=dict)

    def add_view(
        self,
        location: str,
        body: str,
        columns: tuple[str, ...],
        reads: Iterable[str] = (),
        picks: tuple[int, ...] | None = None,
        owner: int = -1,
    ) -> None:
        """`body` is the whole view; `picks`, the positions of `columns` in its projection
        when the statement reads a narrowed view (the verifier builds that projection from
        the whole view's analysis, so a new statement costs Spark no new view analysis)."""
        location = normalise_location(location)
        self.views.setdefault(location, []).append((body, tuple(c.lower() for c in columns), picks))
        self.owners.setdefault(location, []).append(owner)
        mapped = frozenset(normalise_location(r) for r in reads)
        if mapped:
            self.policy_reads[body] = mapped

    @property
    def mapping_locations(self) -> frozenset[str]:
        """Every location some view's policies read raw."""
        return frozenset().union(*self.policy_reads.values())

    def add_derived(self, directory: str, columns: tuple[str, ...]) -> None:
        self.derived.setdefault(normalise_location(directory), []).append(
            tuple(c.lower() for c in columns)
        )

    def add_target(self, location: str) -> None:
        self.targets[normalise_location(location)] += 1
