"""Correctness oracle (issue 6): governed results equal hand-written dynamic views.

Hypothesis generates a policy set (nested groups, grants with wildcards and column denies,
permissive and restrictive row filters using `is_member` / `current_user`, masks with
priorities, tags and `except`) and a few (user, query) pairs over one small Delta table.
Each query runs twice:

- through the governed session (`lg.session(user).sql(q)`), and
- in plain Spark over the equivalent hand-written dynamic view, the `CASE WHEN
  is_member(...)` style view Databricks documents, written here from the policy contract
  (docs/spec/policy-format.md) and not from the product's code.

The row multisets must be equal. OSS Spark has no `is_member`, and the contract says
identity is decided by the layer, never by Spark: so the reference resolves `is_member('g')`
and `current_user()` to literals for the user (group nesting resolved here, in Python).
Mask CASEs are folded in Python once their conditions are constants, because Spark would
coerce all branches of one CASE to a common type (a hash mask would turn an INT column
into a STRING for everyone).

The table is created once per module; each example only rewrites the policy file and
reloads. `LAKEGATE_FUZZ_EXAMPLES` sets the number of examples (`make fuzz` runs many).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from governance import AccessDenied

# The normal suite replays the same examples every run (derandomized: a red CI run is
# reproducible and a green one is not luck); `make fuzz` sets the count and explores anew.
FUZZ = "LAKEGATE_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("LAKEGATE_FUZZ_EXAMPLES", "25"))
TABLE = "m.s.t"
COLUMNS: list[tuple[str, str]] = [
    ("id", "INT"),
    ("grp", "STRING"),
    ("owner", "STRING"),
    ("email", "STRING"),
    ("code", "STRING"),
    ("amount", "INT"),
    ("d", "DATE"),
    ("flag", "BOOLEAN"),
]
COLUMN_TYPE = dict(COLUMNS)
NAMES = [c for c, _ in COLUMNS]
USERS = ["u1", "u2", "u3", "u4", "u5"]
GROUPS = ["g1", "g2", "g3", "g4"]
TAG_COLUMNS = ["grp", "owner", "email", "code"]  # tags only on STRING columns


# the data: one table, generated once (deterministic, with NULLs and awkward strings) ----------


def _rows(n: int = 32) -> list[tuple]:
    rnd = random.Random(20261122)
    out = []
    for i in range(1, n + 1):
        out.append(
            (
                i,
                rnd.choice(["a", "b", "c", "A", "", None]),
                rnd.choice([*USERS, "U1", "admin", None]),
                rnd.choice(
                    [
                        "x@y.de",
                        "ann@ex.com",
                        "no-at",
                        "",
                        None,
                        "a@b@c.org",
                        "Zoë@ünï.de",
                        "@",
                        "bob@corp.de",
                    ]
                ),
                rnd.choice(["abcdefgh", "abc", "", None, "Grüße!", "abcd", "12345", "x'y"]),
                rnd.choice([None, rnd.randint(-50, 150)]),
                rnd.choice(
                    [
                        None,
                        dt.date(1999, 12, 31),
                        dt.date(2000, 2, 29),
                        dt.date(2015, 6, 1) + dt.timedelta(days=rnd.randint(0, 4000)),
                    ]
                ),
                rnd.choice([True, False, None]),
            )
        )
    return out


ROWS = _rows()


def _literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, dt.date):
        return f"DATE'{v:%Y-%m-%d}'"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(v)


SETUP_POLICY = """
groups:
  admins: [admin]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
"""


@pytest.fixture(scope="module")
def oracle_lakegate(spark, tmp_path_factory) -> Iterator[Any]:
    """A private Lakegate holding m.s.t; the examples only swap its policy file."""
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    root = tmp_path_factory.mktemp("oracle")
    src = root / "policy-src"
    src.mkdir()
    (src / "policies.yaml").write_text(SETUP_POLICY)
    lg = Lakegate.open(write_config(root / "lakehouse", policies=src), spark=spark)
    admin = lg.session("admin")
    cols = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    values = ", ".join("(" + ", ".join(_literal(v) for v in r) + ")" for r in ROWS)
    for stmt in (
        "CREATE CATALOG m",
        "CREATE SCHEMA m.s",
        f"CREATE TABLE {TABLE} ({cols})",
        f"INSERT INTO {TABLE} VALUES {values}",
    ):
        admin.sql(stmt)
    yield lg
    lg.close()


# the policy model (generated) ----------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    principals: tuple[str, ...]
    privileges: tuple[str, ...]
    on: str
    effect: str = "allow"
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Filter:
    id: str
    on: str
    principals: tuple[str, ...]
    where: str
    kind: str = "permissive"


@dataclass(frozen=True)
class Mask:
    id: str
    on: str
    mask: str
    columns: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    expression: str | None = None
    principals: tuple[str, ...] | None = None  # None: the key is left out ("*")
    except_: tuple[str, ...] = ()
    priority: int = 0


@dataclass(frozen=True)
class Query:
    sql: Callable[[Callable[[str], str]], str]  # source(alias) -> statement text
    named: frozenset[str]  # table columns the query names explicitly
    ordered_key: bool = False  # first output column is an ORDER BY key
    text: str = ""  # for reports

    def __repr__(self) -> str:
        return f"Query({self.text!r})"


@dataclass(frozen=True)
class Scenario:
    groups: dict[str, tuple[str, ...]]
    tags: dict[str, tuple[str, ...]]
    grants: tuple[Grant, ...]
    filters: tuple[Filter, ...]
    masks: tuple[Mask, ...]
    runs: tuple[tuple[str, Query], ...] = field(default=())

    def yaml(self) -> str:
        doc: dict[str, Any] = {"groups": {g: list(m) for g, m in self.groups.items()}}
        if self.tags:
            doc["tags"] = {f"{TABLE}.{c}": list(t) for c, t in self.tags.items()}
        doc["grants"] = [
            {
                "id": f"grant-{i}",
                "principals": list(g.principals),
                "privileges": list(g.privileges),
                "on": g.on,
                "effect": g.effect,
                **({"columns": list(g.columns)} if g.columns else {}),
            }
            for i, g in enumerate(self.grants)
        ]
        if self.filters:
            doc["row_filters"] = [
                {
                    "id": f.id,
                    "on": f.on,
                    "principals": list(f.principals),
                    "where": f.where,
                    "kind": f.kind,
                }
                for f in self.filters
            ]
        if self.masks:
            doc["column_masks"] = []
            for m in self.masks:
                d: dict[str, Any] = {"id": m.id, "on": m.on, "mask": m.mask, "priority": m.priority}
                if m.columns:
                    d["columns"] = list(m.columns)
                if m.tags:
                    d["tags"] = list(m.tags)
                if m.expression is not None:
                    d["expression"] = m.expression
                if m.principals is not None:
                    d["principals"] = list(m.principals)
                if m.except_:
                    d["except"] = list(m.except_)
                doc["column_masks"].append(d)
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# the reference semantics, from the policy contract ------------------------------------------


def memberships(groups: dict[str, tuple[str, ...]], user: str) -> set[str]:
    """Every group `user` is in, directly or through nested groups."""
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for g, members in groups.items():
            if g in out:
                continue
            for m in members:
                if m == user or m == f"user:{user}" or (m.startswith("group:") and m[6:] in out):
                    out.add(g)
                    changed = True
                    break
    return out


def principal_is(p: str, user: str, member_of: set[str]) -> bool:
    if p == "*":
        return True
    if p.startswith("group:"):
        return p[6:] in member_of
    return p.removeprefix("user:") == user


def covers(pattern: str, table: str = TABLE) -> bool:
    """Securable patterns match case-insensitively, `*` matching any part."""
    return all(
        a == "*" or a.lower() == b.lower()
        for a, b in zip(pattern.split("."), table.split("."), strict=True)
    )


def resolve_identity(sql: str, user: str, member_of: set[str]) -> str:
    """`current_user()` and `is_member('g')` as the layer decides them, as literals."""
    sql = re.sub(r"current_user\(\)", f"'{user}'", sql, flags=re.IGNORECASE)
    return re.sub(
        r"(?:is_member|is_account_group_member)\('([^']*)'\)",
        lambda m: "TRUE" if m.group(1) in member_of else "FALSE",
        sql,
        flags=re.IGNORECASE,
    )


def ref_mask_sql(m: Mask, col: str) -> str:
    """The built-in masks as the contract's table states them (written independently)."""
    typ = COLUMN_TYPE[col]
    s = f"CAST({col} AS STRING)"
    if m.mask == "redact":
        return "'REDACTED'" if typ == "STRING" else f"CAST(NULL AS {typ})"
    if m.mask == "null":
        return f"CAST(NULL AS {typ})"
    if m.mask == "hash":
        return f"sha2({s}, 256)"
    if m.mask == "last4":
        return (
            f"CASE WHEN {s} IS NULL THEN NULL WHEN char_length({s}) <= 4 THEN {s} "
            f"ELSE concat(repeat('*', char_length({s}) - 4), substr({s}, -4)) END"
        )
    if m.mask == "first4":
        return (
            f"CASE WHEN {s} IS NULL THEN NULL WHEN char_length({s}) <= 4 THEN {s} "
            f"ELSE concat(substr({s}, 1, 4), repeat('*', char_length({s}) - 4)) END"
        )
    if m.mask == "email_domain":
        return f"regexp_extract({s}, '^.*@(.*)$', 1)"
    if m.mask == "year":
        return f"make_date(year({col}), 1, 1)"
    if m.mask == "custom":
        assert m.expression is not None
        return m.expression.replace("{col}", col)
    raise AssertionError(m.mask)


@dataclass
class Reference:
    can_select: bool
    visible: list[str]
    hidden: list[str]
    view: str  # the dynamic view's text for this user ("" when no select)
    masks: dict[str, str] = field(default_factory=dict)  # column -> mask id, for reports


def reference(sc: Scenario, user: str, location: str) -> Reference:
    member_of = memberships(sc.groups, user)

    def applies(principals: tuple[str, ...] | None) -> bool:
        return any(principal_is(p, user, member_of) for p in (principals or ("*",)))

    # grants: deny beats allow; a column deny removes those columns; manage implies select
    allow_all = deny_all = False
    allow_cols: set[str] = set()
    deny_cols: set[str] = set()
    for g in sc.grants:
        if not covers(g.on) or not applies(g.principals):
            continue
        if "select" not in g.privileges and "manage" not in g.privileges:
            continue
        deny = g.effect == "deny"
        if g.columns:
            (deny_cols if deny else allow_cols).update(g.columns)
        elif deny:
            deny_all = True
        else:
            allow_all = True
    visible = [
        c for c in NAMES if not deny_all and (allow_all or c in allow_cols) and c not in deny_cols
    ]
    hidden = [c for c in NAMES if c not in visible]
    if not visible:
        return Reference(False, [], hidden, "")

    # masks: the dynamic view's CASE WHEN per column, highest priority first
    def mask_condition(m: Mask) -> bool:
        return applies(m.principals) and not any(
            principal_is(p, user, member_of) for p in m.except_
        )

    proj = []
    chosen_ids: dict[str, str] = {}
    for c in visible:
        hits = sorted(
            (
                m
                for m in sc.masks
                if covers(m.on)
                and (c in {x.lower() for x in m.columns} or set(sc.tags.get(c, ())) & set(m.tags))
            ),
            key=lambda m: -m.priority,
        )
        # CASE WHEN <cond m1> THEN <mask m1> WHEN <cond m2> THEN <mask m2> ELSE c END,
        # folded: the conditions are constants once identity is resolved
        chosen = next((m for m in hits if mask_condition(m)), None)
        if chosen is not None:
            chosen_ids[c] = chosen.id
        expr = c if chosen is None else resolve_identity(ref_mask_sql(chosen, c), user, member_of)
        proj.append(f"{expr} AS {c}")

    # row filters: any applicable permissive one AND every applicable restrictive one
    def filter_case(f: Filter, otherwise: str) -> str:
        cond = " OR ".join(
            "TRUE"
            if p == "*"
            else f"is_member('{p[6:]}')"
            if p.startswith("group:")
            else f"current_user() = '{p.removeprefix('user:')}'"
            for p in f.principals
        )
        return f"CASE WHEN {cond} THEN ({f.where}) ELSE {otherwise} END"

    applicable = [f for f in sc.filters if covers(f.on)]
    perm = [f for f in applicable if f.kind == "permissive"]
    restr = [f for f in applicable if f.kind == "restrictive"]
    any_perm = (
        " OR ".join(f"({' OR '.join(_principal_sql(p) for p in f.principals)})" for f in perm)
        or "FALSE"
    )
    clauses = [
        f"(CASE WHEN {any_perm} THEN ("
        + (" OR ".join(filter_case(f, "FALSE") for f in perm) or "TRUE")
        + ") ELSE TRUE END)"
    ]
    clauses += [f"({filter_case(f, 'TRUE')})" for f in restr]
    where = resolve_identity(" AND ".join(clauses), user, member_of)
    view = f"SELECT {', '.join(proj)} FROM delta.`{location}` WHERE {where}"
    return Reference(True, visible, hidden, view, chosen_ids)


def _principal_sql(p: str) -> str:
    if p == "*":
        return "TRUE"
    if p.startswith("group:"):
        return f"is_member('{p[6:]}')"
    return f"current_user() = '{p.removeprefix('user:')}'"


# strategies -----------------------------------------------------------------------------------

PRINCIPALS = [
    "u1",
    "user:u2",
    "u3",
    "user:u4",
    "u5",
    "nobody",
    "*",
    "group:g1",
    "group:g2",
    "group:g3",
    "group:g4",
]
PATTERNS = ["m.s.t", "m.s.*", "m.*.*", "*.*.*", "m.*.t", "m.s.other", "x.s.t", "M.S.T", "m.S.*"]
ROW_FILTERS = [
    "grp = 'a'",
    "grp IN ('a', 'b')",
    "amount > 20",
    "amount IS NULL OR amount < 60",
    "flag",
    "NOT flag",
    "owner = current_user()",
    "is_member('g1')",
    "is_member('g2') OR grp = 'c'",
    "email LIKE '%.de'",
    "id % 2 = 0",
    "is_account_group_member('g3') AND amount > 0",
    "d >= DATE'2020-01-01'",
    "coalesce(code, '') <> ''",
    "upper(owner) = upper(current_user())",
    "NOT is_member('g4')",
    "length(email) > 5 AND email LIKE '%@%'",
    "id > 100",
]
MASK_KINDS = {
    "STRING": ["redact", "null", "hash", "last4", "first4", "email_domain", "custom"],
    "INT": ["redact", "null", "hash", "custom"],
    "DATE": ["redact", "null", "hash", "year"],
    "BOOLEAN": ["redact", "null", "hash"],
}
CUSTOM = {
    "STRING": [
        "concat('<', upper({col}), '>')",
        "coalesce({col}, current_user())",
        "CASE WHEN is_member('g1') THEN {col} ELSE 'no' END",
    ],
    "INT": ["abs({col}) % 7", "{col} * 0 + 1"],
}
STRING_SAFE_MASKS = MASK_KINDS["STRING"]

principals_list_st = st.lists(st.sampled_from(PRINCIPALS), min_size=1, max_size=3, unique=True).map(
    tuple
)
# weighted towards rules that hit the users under test, so most examples compare data
principals_st = st.one_of(st.just(("*",)), principals_list_st, principals_list_st)


@st.composite
def groups_st(draw: Any) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for i, g in enumerate(GROUPS):
        users = draw(st.lists(st.sampled_from(USERS), max_size=3, unique=True))
        nested = (
            draw(st.lists(st.sampled_from(GROUPS[i + 1 :]), max_size=2, unique=True))
            if i + 1 < len(GROUPS)
            else []
        )
        # every group is defined (an undefined group is a validation error); `nobody` keeps
        # a group non-empty without adding a user under test
        out[g] = tuple([*users, *(f"group:{n}" for n in nested)] or ["nobody"])
    return out


@st.composite
def grant_st(draw: Any) -> Grant:
    effect = draw(st.sampled_from(["allow", "allow", "deny"]))
    if effect == "deny":
        privileges: tuple[str, ...] = ("select",)
        # mostly column denies: a table deny often leaves nothing to compare
        columns = draw(
            st.one_of(
                st.none(),
                *[st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True).map(tuple)]
                * 3,
            )
        )
    else:
        privileges = draw(
            st.sampled_from(
                [("select",), ("select",), ("manage",), ("modify",), ("select", "modify")]
            )
        )
        columns = draw(
            st.one_of(
                st.none(),
                st.none(),
                st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True).map(tuple),
            )
        )
    return Grant(draw(principals_st), privileges, draw(st.sampled_from(PATTERNS)), effect, columns)


@st.composite
def mask_st(draw: Any, i: int, priority: int, tags_used: bool) -> Mask:
    on = draw(st.sampled_from(["m.s.t", "m.s.t", "M.s.T", "m.*.*", "*.*.*", "m.s.other"]))
    by_tag = tags_used and draw(st.booleans())
    if by_tag:
        kind = draw(st.sampled_from(STRING_SAFE_MASKS))
        columns: tuple[str, ...] = ()
        typ = "STRING"
        tags: tuple[str, ...] = ("pii",)
    else:
        typ = draw(st.sampled_from(["STRING", "STRING", "STRING", "INT", "DATE", "BOOLEAN"]))
        kind = draw(st.sampled_from(MASK_KINDS[typ]))
        candidates = [c for c, t in COLUMNS if t == typ]
        columns = tuple(
            draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=2, unique=True))
        )
        if draw(st.integers(0, 4)) == 0:  # column names match case-insensitively too
            columns = tuple(c.upper() for c in columns)
        tags = ()
    expression = draw(st.sampled_from(CUSTOM[typ])) if kind == "custom" else None
    principals = draw(st.one_of(st.none(), st.none(), principals_st))
    except_ = draw(st.one_of(st.just(()), st.just(()), principals_list_st.map(lambda ps: ps[:2])))
    return Mask(f"mask-{i}", on, kind, columns, tags, expression, principals, except_, priority)


# user queries: `{p}` is the column qualifier ("" or "a.")
QUERY_PREDICATES = [
    "{p}grp = 'a'",
    "{p}amount > 10",
    "{p}email LIKE '%e%'",
    "{p}code IS NULL",
    "{p}d < DATE'2016-01-01'",
    "{p}flag",
    "length({p}code) > 3",
    "{p}owner = 'u1'",
    "{p}id <= 15",
    "{p}email = 'x@y.de'",
    "NOT {p}flag OR {p}amount IS NULL",
    "{p}owner = current_user()",
    "is_member('g1') OR {p}grp = 'b'",
    "{p}code LIKE 'abc%'",
    "{p}email = 'de'",
    "{p}d = DATE'2000-01-01'",
]


def _pred_columns(pred: str) -> set[str]:
    return {c for c in NAMES if re.search(r"\{p\}" + c + r"\b", pred)}


def _spell(draw: Any, c: str) -> str:
    """A column as a user may write it: Spark resolves names case-insensitively."""
    return draw(st.sampled_from([c, c, c.upper(), f"`{c.capitalize()}`"]))


@st.composite
def query_st(draw: Any) -> Query:
    kind = draw(
        st.sampled_from(
            [
                "project",
                "star",
                "group",
                "aggregate",
                "order",
                "window",
                "selfjoin",
                "insub",
                "distinct",
            ]
        )
    )
    pred = draw(st.one_of(st.none(), st.sampled_from(QUERY_PREDICATES)))
    where = (lambda p: f" WHERE {pred.format(p=p)}") if pred else (lambda p: "")
    named: set[str] = _pred_columns(pred) if pred else set()
    col = draw(st.sampled_from(NAMES))
    col2 = draw(st.sampled_from(NAMES))
    cols = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))

    if kind == "project":
        named |= set(cols)
        text = f"SELECT {', '.join(_spell(draw, c) for c in cols)} FROM {{src_t}}{where('')}"
        return _q(text, named)
    if kind == "star":
        qualified = draw(st.booleans())
        text = f"SELECT {'t.*' if qualified else '*'} FROM {{src_t}}{where('t.')}"
        return _q(text, named)
    if kind == "group":
        named |= {col, col2}
        text = (
            f"SELECT {col}, count(*) AS n, count({col2}) AS nc, min({col2}) AS mn, "
            f"max({_spell(draw, col2)}) AS mx FROM {{src_t}}{where('')} "
            f"GROUP BY {_spell(draw, col)}"
        )
        return _q(text, named)
    if kind == "aggregate":
        named |= {col, "amount"}
        text = (
            f"SELECT count(*) AS n, count(DISTINCT {col}) AS nd, min({col}) AS mn, "
            f"max({col}) AS mx, sum(CAST(amount AS BIGINT)) AS s FROM {{src_t}}"
            f"{where('')}"
        )
        return _q(text, named)
    if kind == "order":
        desc = draw(st.sampled_from(["ASC NULLS FIRST", "DESC NULLS LAST"]))
        named |= {col, *cols}
        text = f"SELECT {col} AS k, {', '.join(cols)} FROM {{src_t}}{where('')} ORDER BY k {desc}"
        return _q(text, named, ordered_key=True)
    if kind == "window":
        named |= {col, col2}
        text = (
            f"SELECT {col}, count(*) OVER (PARTITION BY {col2}) AS w, "
            f"rank() OVER (ORDER BY {col} NULLS FIRST) AS r, "
            f"max({col}) OVER (PARTITION BY {col2}) AS wm FROM {{src_t}}{where('')}"
        )
        return _q(text, named)
    if kind == "selfjoin":
        join = draw(st.sampled_from(["JOIN", "LEFT JOIN", "FULL OUTER JOIN"]))
        named |= {col, col2, cols[0]}
        text = (
            f"SELECT a.{col}, b.{col2} FROM {{src_a}} {join} {{src_b}} "
            f"ON a.{cols[0]} = b.{cols[0]}{where('a.')}"
        )
        return _q(text, named)
    if kind == "insub":
        named |= {col, col2}
        text = (
            f"SELECT {col} FROM {{src_t}} WHERE {col2} IN "
            f"(SELECT u.{col2} FROM {{src_u}}{where('u.')})"
        )
        return _q(text, named)
    named |= set(cols)
    text = f"SELECT DISTINCT {', '.join(cols)} FROM {{src_t}}{where('')}"
    return _q(text, named)


def _q(text: str, named: set[str], ordered_key: bool = False) -> Query:
    def render(src: Callable[[str], str]) -> str:
        return text.format(src_t=src("t"), src_a=src("a"), src_b=src("b"), src_u=src("u"))

    return Query(render, frozenset(named), ordered_key, text)


@st.composite
def scenario_st(draw: Any) -> Scenario:
    groups = draw(groups_st())
    tags = {
        c: ("pii",) for c in draw(st.lists(st.sampled_from(TAG_COLUMNS), max_size=3, unique=True))
    }
    grants = list(draw(st.lists(grant_st(), min_size=0, max_size=3)))
    if draw(st.integers(0, 9)) < 8 or not grants:  # most examples read something
        grants.insert(
            0, Grant(("*",), ("select",), draw(st.sampled_from(["m.s.t", "m.s.*", "*.*.*"])))
        )
    filters = [
        Filter(
            f"filter-{i}",
            draw(st.sampled_from(["m.s.t", "m.s.t", "m.*.*", "m.s.other"])),
            draw(principals_st),
            draw(st.sampled_from(ROW_FILTERS)),
            draw(st.sampled_from(["permissive", "permissive", "restrictive"])),
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    n_masks = draw(st.integers(0, 4))
    # non-negative: see test_negative_mask_priority (a product bug with mixed signs)
    priorities = draw(st.lists(st.integers(0, 20), min_size=n_masks, max_size=n_masks, unique=True))
    masks = [draw(mask_st(i, p, bool(tags))) for i, p in enumerate(priorities)]
    runs = draw(st.lists(st.tuples(st.sampled_from(USERS), query_st()), min_size=2, max_size=4))
    return Scenario(groups, tags, tuple(grants), tuple(filters), tuple(masks), tuple(runs))


# running and comparing --------------------------------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, Decimal):
        return v.normalize()
    if isinstance(v, list | tuple):
        return tuple(_norm(x) for x in v)
    return v


def _rows_of(df: Any) -> list[tuple]:
    return [tuple(_norm(v) for v in r) for r in df.collect()]


def check_scenario(lg: Any, sc: Scenario) -> None:
    policy_file = lg.config.policies / "policies.yaml"
    policy_file.write_text(sc.yaml())
    assert lg.reload_policies() is True, "generated policy set did not load:\n" + sc.yaml()
    location = lg.catalog.table("m", "s", "t").location
    for user, q in sc.runs:
        ref = reference(sc, user, location)
        governed_sql = q.sql(lambda alias: f"{TABLE} AS {alias}")
        context = (
            f"\nuser: {user}\nquery: {governed_sql}\npolicies:\n{textwrap.indent(sc.yaml(), '  ')}"
        )
        session = lg.session(user)
        if not ref.can_select or q.named & set(ref.hidden):
            with pytest.raises(AccessDenied):
                session.sql(governed_sql).collect()
            continue
        view = ref.view
        ref_sql = resolve_identity(
            q.sql(lambda alias, v=view: f"({v}) AS {alias}"), user, memberships(sc.groups, user)
        )
        got_error = want_error = None
        try:
            got = _rows_of(session.sql(governed_sql))
        except Exception as e:  # e.g. a type error in the query itself: Spark refuses both
            got_error, got = e, []
        try:
            want = _rows_of(lg.spark.sql(ref_sql))
        except Exception as e:
            want_error, want = e, []
        if got_error is not None or want_error is not None:
            assert got_error is not None and want_error is not None, (
                f"only one side failed\ngoverned: {got_error!r}\nreference: "
                f"{str(want_error)[:300]}\nreference view: {ref.view}{context}"
            )
            continue
        assert Counter(got) == Counter(want), (
            f"governed rows differ from the dynamic view\n"
            f"governed-only: {list((Counter(got) - Counter(want)).elements())[:8]}\n"
            f"reference-only: {list((Counter(want) - Counter(got)).elements())[:8]}\n"
            f"reference view: {ref.view}{context}"
        )
        if q.ordered_key:
            assert [r[0] for r in got] == [r[0] for r in want], f"ORDER BY differs{context}"


# a fixed example that exercises every rule kind at once (runs before the random ones)
_FIXED = Scenario(
    groups={"g1": ("u1", "group:g2"), "g2": ("u2", "group:g3"), "g3": ("u3",)},
    tags={"email": ("pii",), "code": ("pii",)},
    grants=(
        Grant(("*",), ("select",), "m.s.*"),
        Grant(("group:g2",), ("select",), "m.s.t", "deny", ("amount",)),
        Grant(("u4",), ("select",), "*.*.*", "deny"),
        Grant(("u5",), ("manage",), "m.*.*"),
    ),
    filters=(
        Filter("f-own", "m.s.t", ("group:g1",), "owner = current_user()"),
        Filter("f-a", "m.s.t", ("u2", "u3"), "grp = 'a'"),
        Filter("f-r", "m.s.t", ("*",), "NOT is_member('g3') OR flag", "restrictive"),
    ),
    masks=(
        Mask("m-hash", "m.*.*", "hash", tags=("pii",), priority=1),
        Mask(
            "m-last4",
            "m.s.t",
            "last4",
            columns=("email",),
            principals=("group:g2",),
            except_=("u3",),
            priority=5,
        ),
        Mask("m-year", "m.s.t", "year", columns=("d",), priority=0),
        Mask(
            "m-custom",
            "m.s.t",
            "custom",
            columns=("owner",),
            expression="coalesce({col}, current_user())",
            except_=("group:g3",),
            priority=2,
        ),
    ),
    runs=(
        ("u1", _q("SELECT * FROM {src_t}", set())),
        (
            "u2",
            _q(
                "SELECT email, count(*) AS n FROM {src_t} WHERE email LIKE '%de' GROUP BY email",
                {"email"},
            ),
        ),
        (
            "u3",
            _q(
                "SELECT a.id, b.owner FROM {src_a} JOIN {src_b} ON a.email = b.email",
                {"id", "owner", "email"},
            ),
        ),
        ("u2", _q("SELECT amount FROM {src_t}", {"amount"})),
        ("u4", _q("SELECT id FROM {src_t}", {"id"})),
        (
            "u5",
            _q(
                "SELECT d, rank() OVER (ORDER BY code NULLS FIRST) AS r FROM {src_t} "
                "WHERE d < DATE'2020-01-01'",
                {"d", "code"},
            ),
        ),
    ),
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not FUZZ,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@example(sc=_FIXED)
@given(sc=scenario_st())
def test_governed_results_equal_dynamic_views(oracle_lakegate, sc: Scenario) -> None:
    check_scenario(oracle_lakegate, sc)


def test_reference_semantics_sanity() -> None:
    """The oracle's own reading of the contract, on small hand-checked cases."""
    groups = {"g1": ("u1", "group:g2"), "g2": ("user:u2", "group:g3"), "g3": ("u3",)}
    assert memberships(groups, "u3") == {"g1", "g2", "g3"}
    assert memberships(groups, "u2") == {"g1", "g2"}
    assert memberships(groups, "u5") == set()
    sc = Scenario(
        groups,
        {},
        (
            Grant(("*",), ("select",), "m.s.t"),
            Grant(("u1",), ("select",), "m.s.t", "deny", ("email",)),
        ),
        (),
        (),
    )
    assert "email" in reference(sc, "u1", "/x").hidden
    assert reference(sc, "u2", "/x").visible == NAMES
    sc2 = Scenario(
        groups,
        {},
        (Grant(("*",), ("select",), "m.s.t"), Grant(("group:g2",), ("select",), "*.*.*", "deny")),
        (),
        (),
    )
    assert not reference(sc2, "u3", "/x").can_select
    assert reference(sc2, "u1", "/x").can_select
    assert (
        resolve_identity("is_member('g1') AND current_user() = x", "u3", memberships(groups, "u3"))
        == "TRUE AND 'u3' = x"
    )


NULL_FILTER_POLICY = """
groups:
  g1: [u1]
grants:
  - {id: all-read, principals: ["*"], privileges: [select], on: m.s.t}
row_filters:
  - {id: de-only, on: m.s.t, principals: [group:g1], where: "email LIKE '%.de'"}
  - {id: positive, on: m.s.t, principals: ["*"], where: "amount > 0", kind: restrictive}
"""
# fails (echoing `#<id>#`) on exactly the rows u1 must not see, NULL-filtered ones included
_ECHO = (
    "to_number(CASE WHEN NOT coalesce({p}email LIKE '%.de' AND {p}amount > 0, false) "
    "THEN concat('#', CAST({p}id AS STRING), '#') ELSE '1' END, '9') = 1"
)


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT id FROM m.s.t WHERE {_ECHO.format(p='')}",
        f"SELECT t.id FROM m.s.t t WHERE {_ECHO.format(p='t.')} AND t.id > 0",
        f"SELECT a.id FROM m.s.t a JOIN m.s.t b ON a.id = b.id AND {_ECHO.format(p='b.')}",
        f"SELECT id FROM m.s.t GROUP BY id, email, amount HAVING {_ECHO.format(p='')}",
        f"SELECT id FROM (SELECT * FROM m.s.t) x WHERE {_ECHO.format(p='x.')}",
        f"SELECT id FROM m.s.t WHERE id IN (SELECT id FROM m.s.t WHERE {_ECHO.format(p='')})",
    ],
    ids=["where", "where-aliased", "join-on", "having", "subquery", "in-subquery"],
)
def test_user_expressions_never_see_rows_hidden_by_null_filters(oracle_lakegate, sql) -> None:
    """A row whose filter is NULL (NULL email or amount here) is hidden; the user's own
    expressions must never be evaluated on it, or an error would echo its values."""
    (oracle_lakegate.config.policies / "policies.yaml").write_text(NULL_FILTER_POLICY)
    assert oracle_lakegate.reload_policies() is True
    visible = {
        r[0]
        for r in ROWS
        if r[3] is not None and r[3].endswith(".de") and r[5] is not None and r[5] > 0
    }
    hidden = {r[0] for r in ROWS} - visible
    assert visible and any(r[3] is None or r[5] is None for r in ROWS if r[0] in hidden)
    try:
        rows = oracle_lakegate.session("u1").sql(sql).collect()
    except Exception as e:
        echoed = sorted(i for i in hidden if f"#{i}#" in str(e))
        raise AssertionError(f"evaluated on hidden rows {echoed}: {str(e)[:300]}") from None
    assert {r[0] for r in rows} == visible


def test_negative_mask_priority(oracle_lakegate) -> None:
    """Priorities are integers; a negative one must simply rank below zero. (Kept last in
    the module: on failure the policy file stays broken until the next reload.)"""
    sc = Scenario(
        groups={},
        tags={},
        grants=(Grant(("*",), ("select",), "m.s.t"),),
        filters=(),
        masks=(
            Mask("m-low", "m.s.t", "hash", columns=("email",), priority=-1),
            Mask("m-high", "m.s.t", "redact", columns=("email", "code"), priority=0),
        ),
        runs=(("u1", _q("SELECT email, code FROM {src_t}", {"email", "code"})),),
    )
    try:
        check_scenario(oracle_lakegate, sc)
    finally:
        (oracle_lakegate.config.policies / "policies.yaml").write_text(SETUP_POLICY)
        oracle_lakegate.reload_policies()
