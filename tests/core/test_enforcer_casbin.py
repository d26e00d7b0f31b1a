"""The index answers exactly what casbin's own enforce() answers, on generated policy sets."""

from __future__ import annotations

import random

import pytest

from catalog.model import ColumnInfo, TableInfo
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.model import Grant, NamePattern, PolicySet, Principal

NAMES = ["a", "b", "c"]


def _pattern(rnd: random.Random) -> NamePattern:
    return NamePattern(*(rnd.choice([*NAMES, "*"]) for _ in range(3)))


def _policy_set(seed: int) -> PolicySet:
    rnd = random.Random(seed)
    users = [f"u{i}" for i in range(6)]
    groups = {f"g{i}": tuple(
        [Principal("user", rnd.choice(users)) for _ in range(2)]
        + ([Principal("group", f"g{i - 1}")] if i and rnd.random() < 0.5 else [])
    ) for i in range(5)}
    grants = []
    for i in range(25):
        who = rnd.choice([Principal("user", rnd.choice(users)),
                          Principal("group", f"g{rnd.randrange(5)}"), Principal("any", "*")])
        grants.append(Grant(f"r{i}", (who,), (rnd.choice(["select", "modify", "manage"]),),
                            _pattern(rnd), rnd.choice(["allow", "allow", "deny"])))
    return PolicySet(groups=groups, grants=tuple(grants))


@pytest.mark.parametrize("seed", range(20))
def test_table_level_decisions_match_casbin_enforce(seed: int) -> None:
    enforcer = PolicyEnforcer(_policy_set(seed))
    for u in range(6):
        ident = enforcer.identity(f"u{u}")
        for c in NAMES:
            for s in NAMES:
                for t in NAMES:
                    for priv in ("select", "modify"):
                        expected = enforcer.casbin.enforce(f"user:u{u}", f"{c}.{s}.{t}", priv)
                        got, _ = enforcer.has_privilege(ident, priv, c, s, t)
                        assert got == expected, (seed, u, c, s, t, priv)


def test_groups_resolve_through_nesting_and_star_members() -> None:
    ps = PolicySet(groups={
        "outer": (Principal("group", "inner"),),
        "inner": (Principal("user", "x"),),
        "everyone": (Principal("any", "*"),),
    })
    e = PolicyEnforcer(ps)
    assert e.identity("X").groups == frozenset({"outer", "inner", "everyone"})
    assert e.identity("y").groups == frozenset({"everyone"})


def test_column_level_allow_without_table_allow_shows_only_those_columns() -> None:
    table = TableInfo("a", "b", "c", "/x", tuple(ColumnInfo(n, "string") for n in "pqr"))
    ps = PolicySet(grants=(Grant("g", (Principal("user", "u"),), ("select",),
                                 NamePattern("a", "b", "c"), "allow", ("q",)),))
    access = PolicyEnforcer(ps).table_access(PolicyEnforcer(ps).identity("u"), table)
    assert access.visible_columns == ("q",)
    assert access.hidden_columns == ("p", "r")
    assert access.can_select
