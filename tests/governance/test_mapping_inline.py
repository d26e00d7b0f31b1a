"""Mapping-table lookups answered at plan time and inlined as literals (issue 31, item 1).

Three Lakegates over the same Delta tables: `inline` (the default threshold), `subquery`
(`mapping_inline_max_keys: 0`, the form every mapping policy had before) and `small` (a
threshold of 3 keys). Every answer of `inline` must be the answer of `subquery`; the plan
shows which form ran (no raw mapping read left in an inlined view).
"""

from __future__ import annotations

import dataclasses
import random
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from governance.verify.plan import verify_plan

LOOKUP = "SELECT allowed_k FROM m.acl.keys WHERE user_name = current_user()"
USERS = [f"r{i}" for i in range(8)]
POLICIES = f"""
groups:
  admins: [admin]
  checkers: [nul]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: readers
    principals: [mover, hostile, num, nul, deny, ex, {", ".join(USERS)}]
    privileges: [select]
    on: m.s.*
row_filters:
  - id: by-key
    on: m.s.t
    principals: [mover, hostile, {", ".join(USERS)}]
    kind: restrictive
    where: "k IN ({LOOKUP})"
  - id: by-number
    on: m.s.t
    principals: [num]
    kind: restrictive
    where: "n IN (SELECT allowed_n FROM m.acl.nums WHERE user_name = current_user())"
  - id: by-key-exists
    on: m.s.t
    principals: [ex]
    kind: restrictive
    where: >-
      EXISTS (SELECT 1 FROM m.acl.keys AS u
              WHERE u.user_name = current_user() AND (u.allowed_k = k))
  - id: deny-listed
    on: m.s.t
    principals: [deny]
    kind: restrictive
    where: "NOT (k IN ({LOOKUP}))"
column_masks:
  - id: label-by-membership
    on: m.s.t
    columns: [label]
    mask: custom
    expression: >-
      CASE WHEN k IN ({LOOKUP}) THEN concat({{col}}, ':in')
      WHEN NOT (k IN ({LOOKUP})) THEN concat({{col}}, ':out') ELSE concat({{col}}, ':unknown') END
    principals: [nul, deny, {", ".join(USERS)}]
  - id: v-if-null-granted
    on: m.s.t
    columns: [v]
    mask: custom
    expression: >-
      CASE WHEN EXISTS (SELECT 1 FROM m.acl.keys
                        WHERE user_name = current_user() AND allowed_k IS NULL)
      THEN {{col}} END
    principals: [nul, {", ".join(USERS)}]
"""
# look-alikes of "alice": Cyrillic a, fullwidth, combining accent, trailing NBSP, RTL mark
HOSTILE = [
    "alice",
    "\u0430lice",
    "\uff41lice",
    "alice\u0301",
    "alice\u00a0",
    "\u202ealice",
    "o'brien",
    "it''s",
    "back\\slash",
    "\\'",
    "'; DROP TABLE m.s.t; --",
    "line\nbreak\ttab\r",
    "nul\x00byte",
    "${jndi:x}",
    "%s%n",
    "\U0001f600",
    "x" * 100_000,
]


@pytest.fixture(scope="module")
def open_lakegate(spark, tmp_path_factory) -> Iterator[Callable[..., Any]]:
    from governance.config import Config
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    opened: list[Any] = []

    def make(name: str, max_keys: int) -> Any:
        root = tmp_path_factory.mktemp(name)
        src = root / "policy-src"
        src.mkdir()
        (src / "policies.yaml").write_text(textwrap.dedent(POLICIES))
        cfg = Config.load(write_config(root / "lakehouse", policies=src))
        lg = Lakegate.open(dataclasses.replace(cfg, mapping_inline_max_keys=max_keys), spark=spark)
        opened.append(lg)
        return lg

    yield make
    for lg in opened:
        lg.close()


def _append(spark, location: str, rows: list[tuple], schema: str) -> None:
    """Setup data written straight to Delta (the values are hostile: no SQL text holds them)."""
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(location)


@pytest.fixture(scope="module")
def lakes(open_lakegate, spark) -> dict[str, Any]:
    inline = open_lakegate("inline", 10_000)
    admin = inline.session("admin")
    for stmt in (
        "CREATE CATALOG m",
        "CREATE SCHEMA m.s",
        "CREATE SCHEMA m.acl",
        "CREATE TABLE m.s.t (id INT, k STRING, n BIGINT, v INT, label STRING)",
        "CREATE TABLE m.acl.keys (user_name STRING, allowed_k STRING)",
        "CREATE TABLE m.acl.nums (user_name STRING, allowed_n INT)",
    ):
        admin.sql(stmt)
    loc = {n: inline.catalog.table("m", *n.split(".")).location for n in ("s.t", "acl.keys")}
    loc["acl.nums"] = inline.catalog.table("m", "acl", "nums").location
    rng = random.Random(31)
    pool = ["a", "b", "c", "d", "e", None, *HOSTILE]
    rows = [(i, rng.choice(pool), rng.choice([1, 2, 3, 2**40, None]), i, "L") for i in range(400)]
    rows += [(1000 + i, h, 1, 1000 + i, "L") for i, h in enumerate(HOSTILE)]
    _append(spark, loc["s.t"], rows, "id INT, k STRING, n BIGINT, v INT, label STRING")
    mapping = [("mover", "a"), ("hostile", "alice"), ("hostile", "o'brien"), ("nul", None)]
    mapping += [("hostile", h) for h in HOSTILE[6:]]
    for u in USERS:  # random entitlements: empty, with NULL keys, hostile keys
        mapping += [(u, rng.choice(pool)) for _ in range(rng.randrange(0, 6))]
    mapping += [("deny", "a"), ("deny", None), ("ex", "b"), ("ex", None), ("ex", "o'brien")]
    _append(spark, loc["acl.keys"], mapping, "user_name STRING, allowed_k STRING")
    _append(spark, loc["acl.nums"], [("num", 2), ("num", None)], "user_name STRING, allowed_n INT")
    out = {"inline": inline, "subquery": open_lakegate("subquery", 0)}
    out["small"] = open_lakegate("small", 3)
    for lg in (out["subquery"], out["small"]):
        for name, where in loc.items():
            lg.register_table(f"m.{name}", where)
    return out


SQL = "SELECT id, k, n, v, label FROM m.s.t"


def rows(lg, user: str, sql: str = SQL) -> list[tuple]:
    return sorted((tuple(r) for r in lg.session(user).sql(sql).collect()), key=repr)


def inlined(lg, user: str, sql: str = SQL) -> bool:
    """The statement's views read no mapping table raw (every lookup is a literal)."""
    session = lg.session(user)
    session.sql(sql).collect()
    planned = session.last_planned
    assert planned is not None and planned.sql is not None
    tables = [lg.catalog.table("m", "acl", t).location for t in ("keys", "nums")]
    return not planned.expected.mapping_locations and not any(t in planned.sql for t in tables)


def admin(lg, sql: str) -> None:
    lg.session("admin").sql(sql)


def test_a_lookup_within_the_threshold_is_inlined_and_answers_as_the_subquery(lakes) -> None:
    assert inlined(lakes["inline"], "mover")
    assert not inlined(lakes["subquery"], "mover")
    got = rows(lakes["inline"], "mover")
    assert got == rows(lakes["subquery"], "mover")
    assert got and {r[1] for r in got} == {"a"}


@pytest.mark.parametrize("user", [*USERS, "nul", "deny", "num", "ex"])
def test_inline_and_subquery_give_the_same_answers_on_random_entitlements(lakes, user) -> None:
    """Differential: random key sets (empty ones, NULL keys, hostile keys) over rows with
    NULL and hostile values; the label mask tells TRUE, FALSE and NULL of the IN apart."""
    assert inlined(lakes["inline"], user)
    assert rows(lakes["inline"], user) == rows(lakes["subquery"], user)


def test_null_keys_make_an_unmatched_row_unknown_not_false(lakes) -> None:
    """`nul` is mapped to a NULL key only: every k IN (NULL) is NULL -> 'L:unknown';
    the EXISTS over `allowed_k IS NULL` holds, so v shows."""
    got = rows(lakes["inline"], "nul")
    assert {r[4] for r in got} == {"L:unknown"}
    assert all(r[3] == r[0] for r in got)
    assert got == rows(lakes["subquery"], "nul")


def test_a_correlated_exists_is_inlined_and_never_null(lakes) -> None:
    """EXISTS (... AND u.allowed_k = k) over keys 'b', NULL, "o'brien": the rows with those
    two values, as `coalesce(k IN (...), FALSE)`: a NULL key matches nothing."""
    sql = "SELECT id, k FROM m.s.t"
    assert inlined(lakes["inline"], "ex", sql)
    got = rows(lakes["inline"], "ex", sql)
    assert got and {r[1] for r in got} == {"b", "o'brien"}
    assert got == rows(lakes["subquery"], "ex", sql)


def test_a_deny_list_with_a_null_key_lets_no_row_through(lakes) -> None:
    """NOT (k IN ('a', NULL)) is never TRUE: the subquery's semantics, kept inline."""
    assert rows(lakes["inline"], "deny") == rows(lakes["subquery"], "deny") == []


def test_integral_keys_of_another_width_compare_as_the_subquery(lakes) -> None:
    """BIGINT column, INT keys (2 and NULL): rows with n = 2 only, n = 2**40 never."""
    got = rows(lakes["inline"], "num", "SELECT id, n FROM m.s.t")
    assert got and {r[1] for r in got} == {2}
    assert inlined(lakes["inline"], "num", "SELECT id, n FROM m.s.t")
    assert got == rows(lakes["subquery"], "num", "SELECT id, n FROM m.s.t")


def test_hostile_key_values_match_exactly_themselves(lakes) -> None:
    """Quotes, backslashes, control characters, NUL, look-alikes and a 100,000-character key
    are literals of their own value: each matches its own row and nothing else."""
    assert inlined(lakes["inline"], "hostile")
    got = rows(lakes["inline"], "hostile", "SELECT id, k FROM m.s.t WHERE id >= 1000")
    assert [r[1] for r in sorted(got)] == ["alice", *HOSTILE[6:]]
    assert got == rows(lakes["subquery"], "hostile", "SELECT id, k FROM m.s.t WHERE id >= 1000")


def test_over_threshold_falls_back_to_the_subquery_with_identical_answers(lakes) -> None:
    """`hostile` has 12 keys and `mover` 1: with a threshold of 3 the first keeps the
    subquery (a raw read of the mapping table in its view), the second is inlined."""
    small = lakes["small"]
    assert not inlined(small, "hostile")
    assert inlined(small, "mover")
    for user in ("hostile", "mover"):
        assert rows(small, user) == rows(lakes["subquery"], user) == rows(lakes["inline"], user)


def test_a_mapping_row_inserted_is_seen_by_the_next_statement(lakes) -> None:
    lg = lakes["inline"]
    before = rows(lg, "mover")
    assert before and {r[1] for r in before} == {"a"}
    admin(lg, "INSERT INTO m.acl.keys VALUES ('mover', 'b')")
    try:
        after = rows(lg, "mover")  # the same text: the plan cache must not answer
        assert {r[1] for r in after} == {"a", "b"}
        assert inlined(lg, "mover")
        assert after == rows(lakes["subquery"], "mover")
    finally:
        admin(lg, "DELETE FROM m.acl.keys WHERE user_name = 'mover' AND allowed_k = 'b'")
    assert rows(lg, "mover") == before


def test_a_mapping_row_deleted_is_seen_by_the_next_statement(lakes) -> None:
    lg = lakes["inline"]
    admin(lg, "INSERT INTO m.acl.keys VALUES ('mover', 'c')")
    assert {r[1] for r in rows(lg, "mover")} == {"a", "c"}
    admin(lg, "DELETE FROM m.acl.keys WHERE user_name = 'mover' AND allowed_k = 'c'")
    got = rows(lg, "mover")
    assert {r[1] for r in got} == {"a"}
    assert got == rows(lakes["subquery"], "mover")


def test_an_entitlement_emptied_lets_no_row_through(lakes) -> None:
    lg = lakes["inline"]
    admin(lg, "DELETE FROM m.acl.keys WHERE user_name = 'mover'")
    try:
        assert rows(lg, "mover") == [] == rows(lakes["subquery"], "mover")
        assert inlined(lg, "mover")
    finally:
        admin(lg, "INSERT INTO m.acl.keys VALUES ('mover', 'a')")
    assert {r[1] for r in rows(lg, "mover")} == {"a"}


def test_verifier_accepts_an_inlined_view_and_refuses_a_raw_mapping_read(lakes) -> None:
    """The inlined filter is part of the view Spark's plan must match; with no lookup left,
    the mapping table's location may be read nowhere."""
    from governance import Refused

    lg = lakes["inline"]
    session = lg.session("mover")
    session.sql(SQL).collect()
    planned = session.last_planned
    assert planned is not None and planned.sql is not None
    bodies = [body for views in planned.expected.views.values() for body, _, _ in views]
    assert any("'a'" in body for body in bodies) and not planned.expected.mapping_locations

    def analyze(sql: str, fresh: bool) -> Any:
        return lg.spark.sql(sql)._jdf.queryExecution().analyzed()

    verify_plan(analyze(planned.sql, True), planned.expected, analyze)
    loc = f"delta.`{lg.catalog.table('m', 'acl', 'keys').location}`"
    smuggled = f"SELECT * FROM ({planned.sql}) AS q WHERE q.k IN (SELECT allowed_k FROM {loc})"
    with pytest.raises(Refused, match="read outside its governed view"):
        verify_plan(analyze(smuggled, True), planned.expected, analyze)


def test_audit_line_of_the_policy_read_names_the_version_read(lakes) -> None:
    """`cmd=policyRead` with `readVersion`: the mapping table's Delta version whose rows the
    inlined lookup holds; a new version is named by the next statement."""
    from catalog.identity import delta_identity

    lg = lakes["inline"]
    location = lg.catalog.table("m", "acl", "keys").location

    def policy_read() -> dict[str, str]:
        log = lg.config.audit / "audit.log"
        start = log.stat().st_size
        lg.session("mover").sql("SELECT id FROM m.s.t").collect()
        with open(log, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode("ascii")
        lines = [
            dict(p.split("=", 1) for p in ln.split(": ", 1)[1].split("\t"))
            for ln in text.splitlines()
        ]
        assert [ln["cmd"] for ln in lines] == ["select", "policyRead"]
        assert lines[1]["queryId"] == lines[0]["queryId"]
        return lines[1]

    read = policy_read()
    assert (read["src"], read["columns"], read["policies"], read["allowed"]) == (
        "m.acl.keys",
        "user_name,allowed_k",
        "by-key",
        "true",
    )
    assert read["readVersion"] == str(delta_identity(location).version)
    admin(lg, "INSERT INTO m.acl.keys VALUES ('someone', 'z')")
    assert policy_read()["readVersion"] == str(int(read["readVersion"]) + 1)


def test_a_subquery_lookup_names_no_read_version(lakes) -> None:
    """Spark picks the version a subquery reads when it runs: no readVersion is claimed."""
    lg = lakes["subquery"]
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size
    lg.session("mover").sql("SELECT id FROM m.s.t").collect()
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    reads = [ln for ln in text.splitlines() if "\tcmd=policyRead\t" in ln]
    assert len(reads) == 1 and "\treadVersion=" not in reads[0]
