"""Checks over column masks, and the audience arithmetic they share with the validator.

Two masks of equal priority must never both reach one column for one user, and a custom
mask must not read a column its users are denied. Users are compared as sets after group
expansion, tables and columns as patterns; anything not provably disjoint is reported.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from governance.policy.build import FileMeta
from governance.policy.enforcer import mask_columns
from governance.policy.model import (
    MASKS,
    ColumnMask,
    NamePattern,
    PolicySet,
    Principal,
    Source,
    TagAssignment,
    group_users,
)
from governance.policy.problems import Problem, Severity, did_you_mean
from governance.policy.source import Locations


def _meet(a: NamePattern, b: NamePattern) -> NamePattern | None:
    """The table pattern both match, or None when no table matches both."""
    parts: list[str] = []
    for x, y in ((a.catalog, b.catalog), (a.schema, b.schema), (a.table, b.table)):
        if x == "*":
            parts.append(y)
        elif y == "*" or x == y:
            parts.append(x)
        else:
            return None
    return NamePattern(*parts)


def _table_pairs(masks: Sequence[ColumnMask]) -> Iterator[tuple[ColumnMask, ColumnMask]]:
    """Equal-priority mask pairs whose tables can meet, without comparing every pair.

    Masks on one concrete table share a bucket; only wildcard masks are compared widely.
    """
    by_priority: dict[int, list[ColumnMask]] = defaultdict(list)
    for m in masks:
        by_priority[m.priority].append(m)
    for group in by_priority.values():
        concrete: dict[tuple[str, str, str], list[ColumnMask]] = defaultdict(list)
        wild: list[ColumnMask] = []
        for m in group:
            (wild if "*" in m.on.table_key else concrete[m.on.table_key]).append(m)
        for bucket in concrete.values():
            yield from combinations(bucket, 2)
        for i, w in enumerate(wild):
            for other in wild[i + 1 :]:
                if _meet(w.on, other.on) is not None:
                    yield (w, other)
            for key, bucket in concrete.items():
                if w.on.matches_table(*key):
                    for m in bucket:
                        yield (w, m)


@dataclass(frozen=True)
class _Audience:
    """Users a mask reaches: everyone except `users`, or exactly `users`."""

    everyone: bool
    users: frozenset[str]

    def meet(self, other: _Audience) -> str | None:
        """A user both reach (as text for a message), or None when provably nobody."""
        if self.everyone and other.everyone:
            return "any user not exempted by either"
        if self.everyone or other.everyone:
            finite, cofinite = (other, self) if self.everyone else (self, other)
            common = finite.users - cofinite.users
        else:
            common = self.users & other.users
        return f"user '{min(common)}'" if common else None


@dataclass(frozen=True)
class _Atom:
    """A (table pattern, column) a mask can hit, and why."""

    table: NamePattern
    column: str  # a name or '*'
    why: str


class CheckContext:
    """A policy set under check, where its values were written, and the problems found."""

    def __init__(
        self,
        ps: PolicySet,
        locations: Locations,
        meta: list[FileMeta],
        *,
        full_meta: bool,
    ) -> None:
        self.ps = ps
        self.locations = locations
        self.meta = meta
        self.full_meta = full_meta
        self.problems: list[Problem] = []
        self.groups = set(ps.groups)
        self._members: dict[str, frozenset[str]] = {}

    # ---- helpers

    def where(self, rule: Source, key: str, index: int = -1) -> Source:
        return self.locations.get((rule, key, index)) or self.locations.get((rule, key, -1), rule)

    def report(
        self,
        source: Source,
        code: str,
        message: str,
        hint: str = "",
        severity: Severity = "error",
    ) -> None:
        self.problems.append(Problem.at(source, code, message, hint, severity))

    def members(self, group: str) -> frozenset[str]:
        """Users in `group`, directly or through nesting (cycles are reported elsewhere)."""
        if group not in self._members:
            self._members[group] = group_users(self.ps.groups, group)
        return self._members[group]

    def expand(self, principals: Iterable[Principal]) -> tuple[bool, set[str]]:
        everyone, users = False, set()
        for p in principals:
            if p.kind == "any":
                everyone = True
            elif p.kind == "user":
                users.add(p.name)
            else:
                users |= self.members(p.name)
        return everyone, users

    def audience(self, mask: ColumnMask) -> _Audience:
        everyone, users = self.expand(mask.principals)
        exempt_all, exempt = self.expand(mask.except_)
        if exempt_all:
            return _Audience(False, frozenset())
        if everyone:
            return _Audience(True, frozenset(exempt))
        return _Audience(False, frozenset(users - exempt))

    # ---- groups and principals


class MaskChecks(CheckContext):
    """The mask checks of the validator."""

    def check_mask_overlap(self) -> None:
        """Two equal-priority masks must never both reach one column for one user.

        Conservative: tables, columns and users are compared as patterns and sets, so a pair
        is reported unless some part is provably disjoint.
        """
        masks = [m for m in self.ps.column_masks if m.mask in MASKS]
        order = {id(m): i for i, m in enumerate(masks)}
        by_tag: dict[str, list[TagAssignment]] = defaultdict(list)
        for t in self.ps.tags:
            for tag in t.tags:
                by_tag[tag].append(t)
        atoms = {id(m): self._atoms(m, by_tag) for m in masks}
        audiences = {id(m): self.audience(m) for m in masks}
        pairs = sorted(
            (tuple(sorted(pair, key=lambda m: order[id(m)])) for pair in _table_pairs(masks)),
            key=lambda pair: (order[id(pair[1])], order[id(pair[0])]),
        )
        for a, b in pairs:
            if a.id == b.id:  # reported as duplicate-id
                continue
            hit = self._common_column(a, b, atoms[id(a)], atoms[id(b)])
            if hit is None:
                continue
            who = audiences[id(a)].meet(audiences[id(b)])
            if who is None:
                continue
            self.report(
                self.where(b.source, "id"),
                "mask-overlap",
                f"column masks '{a.id}' ({a.source}) and '{b.id}' both have "
                f"priority {a.priority} and can both mask {hit} for {who}",
                "give one a higher priority (higher wins), or make their "
                "tables, columns or principals disjoint",
            )

    def _atoms(self, m: ColumnMask, by_tag: Mapping[str, list[TagAssignment]]) -> list[_Atom]:
        out = [_Atom(m.on, c, f"column '{c}'") for c in m.columns]
        seen: set[int] = set()
        for tag in m.tags:
            for t in by_tag.get(tag, ()):
                if id(t) in seen:
                    continue
                seen.add(id(t))
                table = _meet(m.on, NamePattern(t.on.catalog, t.on.schema, t.on.table))
                if table is None:
                    continue
                if t.on.column is None:
                    out.append(_Atom(table, "*", f"table tag '{tag}' ({t.source})"))
                else:
                    out.append(_Atom(table, t.on.column, f"tag '{tag}' ({t.source})"))
        return out

    def _common_column(
        self,
        a: ColumnMask,
        b: ColumnMask,
        atoms_a: list[_Atom],
        atoms_b: list[_Atom],
    ) -> str | None:
        table = _meet(a.on, b.on)
        shared = sorted(set(a.tags) & set(b.tags))
        if shared:
            return f"any column tagged '{shared[0]}' on {table}"
        for x in atoms_a:
            for y in atoms_b:
                t = _meet(x.table, y.table)
                if t is None:
                    continue
                if x.column == y.column or "*" in (x.column, y.column):
                    col = y.column if x.column == "*" else x.column
                    target = f"column {t}.{col}" if col != "*" else f"columns of {t}"
                    return f"{target} (via {x.why} and {y.why})"
        return None

    def check_mask_reads_denied(self) -> None:
        """A warning where some user gets both a column deny and a custom mask reading that
        column: such a mask would show the denied values, so at run time every statement by
        that user reading the masked column is refused (only explicit denies are known here)."""
        denies = [
            g
            for g in self.ps.grants
            if g.effect == "deny" and "select" in g.privileges and g.columns
        ]
        for m in self.ps.column_masks:
            read = mask_columns(m)
            if not read:
                continue
            audience = self.audience(m)
            for g in denies:
                shared = sorted(read.intersection(g.columns or ()))
                table = _meet(m.on, g.on)
                if not shared or table is None:
                    continue
                everyone, users = self.expand(g.principals)
                denied = _Audience(everyone, frozenset() if everyone else frozenset(users))
                who = audience.meet(denied)
                if who is None:
                    continue
                self.report(
                    self.where(m.source, "expression"),
                    "mask-reads-denied-column",
                    f"column mask '{m.id}' reads column {shared[0]} of {table}, which deny "
                    f"'{g.id}' hides from {who}; statements by that user reading the masked "
                    "column are refused",
                    "mask with a built-in mask or without the denied column, or exempt those "
                    "users from the mask (except:)",
                    "warning",
                )

    def check_tags_known(self) -> None:
        assigned = {tag for t in self.ps.tags for tag in t.tags}
        for m in self.ps.column_masks:
            for i, tag in enumerate(m.tags):
                if tag not in assigned:
                    self.report(
                        self.where(m.source, "tags", i),
                        "unknown-tag",
                        f"column mask '{m.id}' uses tag '{tag}', which no policy file assigns",
                        _tag_hint(tag, assigned),
                        "warning",
                    )


def _tag_hint(tag: str, assigned: set[str]) -> str:
    hint = did_you_mean(tag, sorted(assigned)) if assigned else ""
    base = "fine if the catalog assigns it; otherwise tag columns under tags:"
    return f"{hint} {base}" if hint.startswith("did you mean") else base
