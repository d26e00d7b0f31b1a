"""The index answers exactly what casbin's own enforce() answers, on generated policy sets:
table privileges, visible columns, row filters and masks (below table level, by casbin's
enforce over the very lines compile.py emits, fields read by the names compile.py gives)."""

from __future__ import annotations

import random

import casbin
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.model import ColumnInfo, TableInfo
from governance.policy.compile import LINE_TYPES, name_match, policy_lines
from governance.policy.enforcer import AmbiguousMask, PolicyEnforcer
from governance.policy.model import (
    ColumnMask,
    Grant,
    NamePattern,
    PolicySet,
    Principal,
    RowFilter,
    group_users,
)

NAMES = ["a", "b", "c"]


def _pattern(rnd: random.Random) -> NamePattern:
    return NamePattern(*(rnd.choice([*NAMES, "*"]) for _ in range(3)))


def _policy_set(seed: int) -> PolicySet:
    rnd = random.Random(seed)
    users = [f"u{i}" for i in range(6)]
    groups = {
        f"g{i}": tuple(
            [Principal("user", rnd.choice(users)) for _ in range(2)]
            + ([Principal("group", f"g{i - 1}")] if i and rnd.random() < 0.5 else [])
        )
        for i in range(5)
    }
    grants = []
    for i in range(25):
        who = rnd.choice(
            [
                Principal("user", rnd.choice(users)),
                Principal("group", f"g{rnd.randrange(5)}"),
                Principal("any", "*"),
            ]
        )
        grants.append(
            Grant(
                f"r{i}",
                (who,),
                (rnd.choice(["select", "modify", "manage"]),),
                _pattern(rnd),
                rnd.choice(["allow", "allow", "deny"]),
            )
        )
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
    ps = PolicySet(
        groups={
            "outer": (Principal("group", "inner"),),
            "inner": (Principal("user", "x"),),
            "everyone": (Principal("any", "*"),),
        }
    )
    e = PolicyEnforcer(ps)
    assert e.identity("X").groups == frozenset({"outer", "inner", "everyone"})
    assert e.identity("y").groups == frozenset({"everyone"})


def test_column_level_allow_without_table_allow_shows_only_those_columns() -> None:
    table = TableInfo("a", "b", "c", "/x", tuple(ColumnInfo(n, "string") for n in "pqr"))
    ps = PolicySet(
        grants=(
            Grant(
                "g",
                (Principal("user", "u"),),
                ("select",),
                NamePattern("a", "b", "c"),
                "allow",
                ("q",),
            ),
        )
    )
    access = PolicyEnforcer(ps).table_access(PolicyEnforcer(ps).identity("u"), table)
    assert access.visible_columns == ("q",)
    assert access.hidden_columns == ("p", "r")
    assert access.can_select


# Below table level: columns, row filters and masks -------------------------------------------

USERS = [f"u{i}" for i in range(4)]
GROUPS = [f"g{i}" for i in range(3)]
COLUMNS = ("p", "q", "r")
TABLES = [
    TableInfo(c, s, t, f"/{c}/{s}/{t}", tuple(ColumnInfo(n, "string") for n in COLUMNS))
    for c in NAMES[:2]
    for s in NAMES[:2]
    for t in NAMES[:2]
]


def _by_id_model(line: type) -> str:
    """A casbin model whose `p` lines are compile.py's `line` type (fields named there) and
    whose matcher asks: does rule `r.id` apply to `r.sub` on `r.obj`?"""
    return f"""
[request_definition]
r = sub, obj, id
[policy_definition]
p = {", ".join(line._fields)}
[role_definition]
g = _, _
[policy_effect]
e = some(where (p.eft == allow))
[matchers]
m = (g(r.sub, p.sub) || r.sub == p.sub || p.sub == "*") && nameMatch(r.obj, p.obj) \
&& r.id == p.id
"""


def _casbin_by_id(ps: PolicySet, ptype: str) -> casbin.Enforcer:
    """casbin's own enforce() over the `ptype` lines compile.py emits for `ps`."""
    e = casbin.Enforcer(casbin.Enforcer.new_model(text=_by_id_model(LINE_TYPES[ptype])))
    e.add_function("nameMatch", name_match)
    for kind, fields in policy_lines(ps):
        if kind == "g":
            e.add_grouping_policy(*fields)
        elif kind == ptype:
            e.add_named_policy("p", list(fields))
    return e


principals = st.one_of(
    st.sampled_from(USERS).map(lambda u: Principal("user", u)),
    st.sampled_from(GROUPS).map(lambda g: Principal("group", g)),
    st.just(Principal("any", "*")),
)
patterns = st.tuples(*[st.sampled_from([*NAMES[:2], "*"])] * 3).map(lambda p: NamePattern(*p))
some_principals = st.lists(principals, min_size=1, max_size=2, unique=True).map(tuple)


@st.composite
def policy_sets(draw: st.DrawFn) -> PolicySet:
    groups = {
        g: tuple(
            draw(st.lists(principals.filter(lambda p: p.kind != "any"), max_size=3, unique=True))
        )
        for g in GROUPS
    }
    grants = tuple(
        Grant(
            f"r{i}",
            draw(some_principals),
            (draw(st.sampled_from(["select", "manage"])),),
            draw(patterns),
            draw(st.sampled_from(["allow", "allow", "deny"])),
            draw(
                st.none()
                | st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=2, unique=True).map(tuple)
            ),
        )
        for i in range(draw(st.integers(1, 8)))
    )
    filters = tuple(
        RowFilter(
            f"f{i}",
            draw(patterns),
            draw(some_principals),
            f"{COLUMNS[i % 3]} = 'x'",
            draw(st.sampled_from(["permissive", "restrictive"])),
        )
        for i in range(draw(st.integers(0, 4)))
    )
    masks = tuple(
        ColumnMask(
            f"m{i}",
            draw(patterns),
            "hash",
            columns=tuple(
                draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=2, unique=True))
            ),
            principals=draw(some_principals),
            except_=tuple(draw(st.lists(principals, max_size=1))),
            priority=draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(0, 4)))
    )
    return PolicySet(groups=groups, grants=grants, row_filters=filters, column_masks=masks)


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(policy_sets())
def test_columns_filters_and_masks_match_casbin_enforce(ps: PolicySet) -> None:
    enforcer = PolicyEnforcer(ps)
    filters_casbin = _casbin_by_id(ps, "p2")
    masks_casbin = _casbin_by_id(ps, "p3")
    for user in USERS:
        sub = f"user:{user}"
        ident = enforcer.identity(user)
        mine = {sub, "*", *masks_casbin.get_implicit_roles_for_user(sub)}  # exempt if listed
        for table in TABLES:
            name = table.full_name
            visible = [c for c in COLUMNS if enforcer.casbin.enforce(sub, f"{name}.{c}", "select")]
            filters = [f.id for f in ps.row_filters if filters_casbin.enforce(sub, name, f.id)]
            masks = [
                m
                for m in ps.column_masks
                if masks_casbin.enforce(sub, name, m.id)
                and not mine.intersection(p.key for p in m.except_)
            ]
            expected: dict[str, str] = {}
            ambiguous = False
            for c in visible:
                hits = [m for m in masks if c in m.columns]
                top = [m for m in hits if m.priority == max((h.priority for h in hits), default=0)]
                ambiguous |= len(top) > 1
                if len(top) == 1:
                    expected[c] = top[0].id
            if ambiguous:
                with pytest.raises(AmbiguousMask):
                    enforcer.table_access(ident, table)
                continue
            access = enforcer.table_access(ident, table)
            assert list(access.visible_columns) == visible, (user, name)
            assert [f.id for f in access.row_filters] == filters, (user, name)
            assert {c: a.mask.id for c, a in access.masks.items()} == expected, (user, name)


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(policy_sets())
def test_group_members_match_casbin_roles(ps: PolicySet) -> None:
    """The one group expansion (model.group_users) agrees with casbin's role manager."""
    enforcer = PolicyEnforcer(ps)
    for g in GROUPS:
        by_roles = {u for u in USERS if g in enforcer.identity(u).groups}
        assert group_users(ps.groups, g) == by_roles
        assert enforcer.members_of(Principal("group", g)) == by_roles
