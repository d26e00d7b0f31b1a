"""The plan cache (issue 14 item 4), one test per rule: a repeated query skips parse, decide
and rewrite, and every part of what a plan depends on is in its key.

Tables (see `lg`): `p.s.t` and `q.s.t` hold different rows, so a namespace picks one;
`p.s.moved` is re-registered at a copy of `p.s.other`; `p.acl.map` is a mapping table
(mia's row filter reads it). ann has a row filter, bob a mask; eve has no grant at all.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governance import AccessDenied
from governance.execute.run import StatementFailed
from governance.planning import dispatch
from governance.planning.cache import MAX_CACHED_CHARS, PlanCache, PlanKey, plan_key
from governance.planning.dispatch import Planner

POLICIES = """
groups:
  admins: [admin]
  analysts: [ann, bob, mia]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: p-reads, principals: [group:analysts], privileges: [select], on: "p.s.*"}
  - {id: q-reads, principals: [group:analysts], privileges: [select], on: "q.s.*"}
row_filters:
  - {id: ann-small, on: p.s.t, principals: [ann], where: "id < 3"}
  - id: mia-mapped
    on: p.s.t
    principals: [mia]
    where: "id IN (SELECT allowed FROM p.acl.map WHERE user_name = current_user())"
column_masks:
  - {id: bob-hash, on: p.s.t, columns: [name], mask: redact, principals: [bob]}
"""
SETUP = [
    "CREATE CATALOG p",
    "CREATE SCHEMA p.s",
    "CREATE SCHEMA p.acl",
    "CREATE TABLE p.s.t (id INT, name STRING)",
    "INSERT INTO p.s.t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
    "CREATE TABLE p.s.moved (id INT)",
    "INSERT INTO p.s.moved VALUES (1)",
    "CREATE TABLE p.s.other (id INT)",
    "INSERT INTO p.s.other VALUES (7), (8)",
    "CREATE TABLE p.acl.map (user_name STRING, allowed INT)",
    "INSERT INTO p.acl.map VALUES ('mia', 1)",
    "CREATE CATALOG q",
    "CREATE SCHEMA q.s",
    "CREATE TABLE q.s.t (id INT, name STRING)",
    "INSERT INTO q.s.t VALUES (9, 'z')",
    "CREATE TABLE p.s.w (id INT)",
]
Q = "SELECT id, name FROM p.s.t ORDER BY id"


@pytest.fixture(scope="module")
def lg(make_lakegate: Any) -> Any:
    return make_lakegate("plancache", POLICIES, SETUP)


@pytest.fixture
def fresh(make_lakegate: Any) -> Any:
    """A lakehouse of its own, for tests that change its policies."""
    return make_lakegate("plancache_reload", POLICIES, SETUP[:5])


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str | bytes]]:
    """Every statement the planner really plans (a hit plans nothing)."""
    seen: list[str | bytes] = []
    real = Planner.plan

    def counting(self: Planner, statement: str | bytes) -> Any:
        seen.append(statement)
        return real(self, statement)

    monkeypatch.setattr(dispatch.Planner, "plan", counting)
    yield seen


def rows(lg: Any, user: str, sql: str, session: Any = None) -> list[tuple]:
    return [tuple(r) for r in (session or lg.session(user)).sql(sql).collect()]


def test_a_repeated_query_is_planned_once(lg, plans) -> None:
    hits = lg.plans.hits
    first = rows(lg, "ann", Q)
    second = rows(lg, "ann", Q)  # a new session, as REST makes per statement
    assert first == second == [(1, "a"), (2, "b")]
    assert plans == [Q]
    assert lg.plans.hits == hits + 1


def test_str_and_bytes_of_one_text_are_planned_apart(lg, plans) -> None:
    text = "SELECT id FROM p.s.t WHERE id = 2"
    assert rows(lg, "ann", text) == rows(lg, "ann", text.encode()) == [(2,)]
    assert plans == [text, text.encode()]


def test_another_user_never_gets_a_plan_made_for_someone_else(lg) -> None:
    assert rows(lg, "ann", Q) == [(1, "a"), (2, "b")]
    assert rows(lg, "bob", Q) == [(i, "REDACTED") for i in (1, 2, 3, 4)]
    assert rows(lg, "ann", Q) == [(1, "a"), (2, "b")]
    with pytest.raises(AccessDenied):
        lg.session("eve").sql(Q)


def test_two_users_in_threads_each_get_their_own_plan(lg) -> None:
    expected = {"ann": [(1, "a"), (2, "b")], "bob": [(i, "REDACTED") for i in (1, 2, 3, 4)]}
    got: dict[str, list[list[tuple]]] = {"ann": [], "bob": []}

    def work(user: str) -> None:
        for _ in range(5):
            got[user].append(rows(lg, user, Q))

    threads = [threading.Thread(target=work, args=(u,)) for u in ("ann", "bob", "ann", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got["ann"] == [expected["ann"]] * 10
    assert got["bob"] == [expected["bob"]] * 10


def test_use_changes_the_plan(lg) -> None:
    s = lg.session("ann")
    s.sql("USE p.s")
    assert rows(lg, "ann", "SELECT id FROM t ORDER BY id", s) == [(1,), (2,)]
    s.sql("USE q.s")
    assert rows(lg, "ann", "SELECT id FROM t ORDER BY id", s) == [(9,)]


def test_a_policy_reload_changes_the_plan_and_the_results(fresh) -> None:
    sql = "SELECT id FROM p.s.t ORDER BY id"
    assert rows(fresh, "ann", sql) == [(1,), (2,)]
    policy = fresh.config.policies / "policies.yaml"
    policy.write_text(policy.read_text().replace('where: "id < 3"', 'where: "id > 3"'))
    assert fresh.reload_policies()
    assert rows(fresh, "ann", sql) == [(4,)]


def test_re_registering_a_table_at_another_location_changes_the_plan(lg) -> None:
    sql = "SELECT id FROM p.s.moved ORDER BY id"
    assert rows(lg, "admin", sql) == [(1,)]
    other = Path(lg.catalog.table("p", "s", "other").location)
    copy = other.parent.parent / "elsewhere" / "other_copy"  # one location, one table
    shutil.copytree(other, copy)
    lg.register_table("p.s.moved", str(copy), replace=True)
    assert rows(lg, "admin", sql) == [(7,), (8,)]


def test_replacing_a_temp_view_of_the_same_name_changes_the_plan(lg) -> None:
    s = lg.session("ann")
    s.sql("CREATE TEMP VIEW v AS SELECT id FROM p.s.t WHERE id = 1")
    assert rows(lg, "ann", "SELECT id FROM v", s) == [(1,)]
    s.sql("CREATE OR REPLACE TEMP VIEW v AS SELECT id FROM p.s.t WHERE id = 2")
    assert rows(lg, "ann", "SELECT id FROM v", s) == [(2,)]
    other = lg.session("ann")  # same user, another session: its own (no) views
    other.sql("CREATE TEMP VIEW v AS SELECT name AS id FROM p.s.t WHERE id = 1")
    assert rows(lg, "ann", "SELECT id FROM v", other) == [("a",)]
    assert rows(lg, "ann", "SELECT id FROM v", s) == [(2,)]


def test_a_mapping_table_change_shows_on_a_cached_plan(lg) -> None:
    sql = "SELECT id FROM p.s.t ORDER BY id"
    assert rows(lg, "mia", sql) == [(1,)]
    hits = lg.plans.hits
    lg.session("admin").sql("INSERT INTO p.acl.map VALUES ('mia', 3)")
    assert rows(lg, "mia", sql) == [(1,), (3,)]
    # the lookup is inlined (issue 31): the plan held the old version's keys, so the
    # mapping table's new version is a miss, planned again with the new keys
    assert lg.plans.hits == hits


def test_a_plan_that_read_the_clock_is_never_cached(lg, plans) -> None:
    sql = "SELECT id FROM p.s.t TIMESTAMP AS OF now() - INTERVAL 1 SECOND"
    size = len(lg.plans)
    for _ in range(2):
        with contextlib.suppress(StatementFailed):  # Delta may find no version then
            lg.session("admin").sql(sql)
    assert plans == [sql, sql]
    assert len(lg.plans) == size


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO p.s.w VALUES (5)",  # a write
        "SHOW TABLES IN p.s",  # metadata
        "DESCRIBE TABLE p.s.t",
        "USE p.s",
        "CREATE TEMP VIEW w AS SELECT id FROM p.s.t",  # a temp-view statement (a query plan)
        "SELECT * FROM p.s.t UNION ALL SELECT * FROM p.s.t" + " " * MAX_CACHED_CHARS,
    ],
)
def test_only_query_plans_are_cached(lg, plans, sql) -> None:
    size = len(lg.plans)
    user = "ann" if sql.startswith("SELECT") else "admin"
    with contextlib.suppress(AccessDenied):
        lg.session(user).sql(sql)
    assert len(lg.plans) == size
    assert plans == [sql]


def test_a_denied_statement_is_not_cached_and_is_decided_again(lg, plans) -> None:
    sql = "SELECT * FROM p.s.t"
    size = len(lg.plans)
    for _ in range(2):
        with pytest.raises(AccessDenied):
            lg.session("eve").sql(sql)
    assert plans == [sql, sql]
    assert len(lg.plans) == size


def _lines(lg: Any, user: str, sql: str) -> list[dict[str, str]]:
    """The audit lines of one statement, without its ids, times and hash chain."""
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size
    lg.session(user).sql(sql)
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    varying = {"eventId", "ts", "queryId", "durationMs", "seq", "prevHash", "hash"}
    out = []
    for line in text.splitlines():
        fields = dict(part.partition("=")[::2] for part in line.split("\t")[1:])
        out.append({k: v for k, v in fields.items() if k not in varying})
    return out


def test_audit_lines_of_a_hit_equal_those_of_a_miss(lg) -> None:
    sql = "SELECT t.id, t.name FROM p.s.t AS t JOIN p.s.t AS u ON t.id = u.id"
    lg.plans.clear()
    misses, hits = lg.plans.misses, lg.plans.hits
    for user, key, value in (("mia", "rowFilters", "mia-mapped"), ("bob", "masked", "name")):
        miss = _lines(lg, user, sql)
        hit = _lines(lg, user, sql)
        assert hit == miss
        assert value in miss[0][key]
    assert [ln["cmd"] for ln in miss] == ["select"]
    assert (lg.plans.misses - misses, lg.plans.hits - hits) == (2, 2)


def test_audit_lines_of_a_hit_keep_the_mapping_table_reads(lg) -> None:
    sql = "SELECT count(*) FROM p.s.t"
    miss = _lines(lg, "mia", sql)
    assert _lines(lg, "mia", sql) == miss
    assert [(ln["cmd"], ln["src"]) for ln in miss] == [
        ("select", "p.s.t"),
        ("policyRead", "p.acl.map"),
    ]


def test_a_hit_shares_no_mutable_state_with_the_cached_plan(lg) -> None:
    s = lg.session("ann")
    s.sql(Q)
    first = s.last_planned
    assert first is not None
    first.views.clear()
    first.columns.clear()
    first.expected.views.clear()
    assert rows(lg, "ann", Q, s) == [(1, "a"), (2, "b")]
    assert s.last_planned is not None and s.last_planned.views


def test_a_cached_plan_keeps_no_part_of_the_statements_tree(lg) -> None:
    """A node's parent links reach the whole parsed statement, which a full cache would keep
    alive by the million for every full garbage collection to walk: each view the cached
    plan keeps has a table node of its own, whose every descendant leads back to it alone
    (the rewrite reuses a table's identifiers as the alias of its placeholder)."""
    small = PlanCache()
    s = lg.session("ann")
    sql = "SELECT t.id, m.id FROM p.s.t AS t JOIN p.s.moved m ON t.id = m.id WHERE t.id > 0"
    small.plan(s._planner(), sql, _key(s, sql))
    (entry,) = small._entries.values()
    nodes = [v.ref.node for v in entry.planned.views]
    assert sorted(n.name for n in nodes) == ["moved", "t"]
    for node in nodes:
        assert node.parent is None
        for below in node.walk():
            top = below
            while top.parent is not None:
                top = top.parent
            assert top is node
    hit = small.plan(s._planner(), sql, _key(s, sql))
    assert small.hits == 1 and hit.sql == entry.planned.sql


def test_the_cache_is_bounded_least_recently_used_first(lg) -> None:
    small = PlanCache(size=2)

    def plan(n: int) -> None:
        s = lg.session("ann")
        small.plan(s._planner(), f"SELECT {n}", _key(s, f"SELECT {n}"))

    for n in (1, 2, 1, 3):
        plan(n)
    assert len(small) == 2
    hits = small.hits
    plan(1)  # kept: used after SELECT 2
    assert small.hits == hits + 1
    plan(2)  # dropped first
    assert small.hits == hits + 1


def _key(s: Any, sql: str) -> PlanKey | None:
    return plan_key(
        sql,
        user=s.user,
        namespace=s.namespace,
        policy=s.lg.enforcer,
        policy_version=s.lg.policy_version,
        generation=s.lg.catalog.store.generation(),
        temp_views=s.temp_views,
        derived={},
    )


TAG_POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: carol-reads, principals: [carol], privileges: [select], on: g.s.*}
row_filters:
  - id: region-by-tag
    on: g.*.*
    match_columns: {tag: region, as: r}
    principals: [carol]
    where: "r = 'EMEA'"
"""


def test_a_tag_change_on_the_delta_table_changes_the_plan(make_lakegate, spark) -> None:
    tg = make_lakegate(
        "plancache_tags",
        TAG_POLICIES,
        [
            "CREATE CATALOG g",
            "CREATE SCHEMA g.s",
            "CREATE TABLE g.s.t (id INT, home STRING)",
            "INSERT INTO g.s.t VALUES (1, 'EMEA'), (2, 'AMER')",
        ],
    )
    sql = "SELECT id FROM g.s.t ORDER BY id"
    assert rows(tg, "carol", sql) == [(1,), (2,)]
    assert rows(tg, "carol", sql) == [(1,), (2,)]  # a hit while the tags hold
    location = tg.catalog.table("g", "s", "t").location
    # a trusted pipeline tags the column on the Delta table, outside Lakegate
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('lakegate.tags.home' = 'region')")
    assert rows(tg, "carol", sql) == [(1,)]
