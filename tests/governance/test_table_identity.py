"""Caches keyed by identity, not by place (issue 25, item 3): a table dropped and created
again at the same managed location (versions restarting at 0), or deleted and written anew
with Spark directly behind the catalog's back, is another Delta table (`metaData.id`), and
no cache (tags, pins, plans, the verifier's view analyses, discovery's Delta log answers)
serves what it held for the table that was there before."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from api.delta_log import read_log
from catalog.identity import delta_identity
from governance.policy.tags import delta_tags
from governance.verify.plan import analysis_key

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: readers, principals: [mia], privileges: [select], on: g.s.*}
column_masks:
  - id: pii-by-tag
    on: g.*.*
    match_columns: {tag: pii}
    mask: redact
    principals: [mia]
"""


@pytest.fixture(scope="module")
def lg(make_lakegate):
    return make_lakegate("identity", POLICIES, ["CREATE CATALOG g", "CREATE SCHEMA g.s"])


def _rows(lg, user: str, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in lg.session(user).sql(sql).collect())


def _old_table_read_untagged(lg, name: str) -> str:
    """`g.s.<name>` at version 1 with an untagged email, read by mia (its tags cached)."""
    admin = lg.session("admin")
    admin.sql(f"CREATE TABLE g.s.{name} (id INT, email STRING)")
    admin.sql(f"INSERT INTO g.s.{name} VALUES (1, 'a@x.de')")
    assert _rows(lg, "mia", f"SELECT id, email FROM g.s.{name}") == [(1, "a@x.de")]
    return lg.catalog.table("g", "s", name).location


def _tag_email(spark, location: str) -> None:
    """The pipeline tags the new table's email, outside Lakegate (its version 1)."""
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('lakegate.tags.email' = 'pii')")


def test_tags_of_a_dropped_and_recreated_table_are_its_own(lg, spark) -> None:
    loc = _old_table_read_untagged(lg, "dropped")
    old = delta_identity(loc)
    admin = lg.session("admin")
    admin.sql("DROP TABLE g.s.dropped")
    admin.sql("CREATE TABLE g.s.dropped (id INT, email STRING)")
    assert lg.catalog.table("g", "s", "dropped").location == loc  # the same place
    _tag_email(spark, loc)  # version 1 again, as the old table's cached tags were
    new = delta_identity(loc)
    assert new.version == old.version == 1 and new.table_id != old.table_id
    admin.sql("INSERT INTO g.s.dropped VALUES (2, 'b@y.com')")  # and through later appends
    sql = "SELECT id, email FROM g.s.dropped"
    assert _rows(lg, "mia", sql) == [(2, "REDACTED")]
    admin.sql("INSERT INTO g.s.dropped VALUES (3, 'c@z.org')")
    assert _rows(lg, "mia", sql) == [(2, "REDACTED"), (3, "REDACTED")]


def test_tags_of_a_table_replaced_behind_the_catalogs_back_are_its_own(lg, spark) -> None:
    loc = _old_table_read_untagged(lg, "replaced")
    table = lg.catalog.table("g", "s", "replaced")
    old_key = delta_tags(table)[0]
    shutil.rmtree(loc)
    spark.createDataFrame([(7, "q@r.de")], "id INT, email STRING").write.format("delta").save(loc)
    _tag_email(spark, loc)
    new_key, tags = delta_tags(table)
    assert new_key != old_key and new_key[2] == old_key[2] == 1  # same version, other table
    assert tags == {"email": frozenset({"pii"})}
    assert _rows(lg, "mia", "SELECT id, email FROM g.s.replaced") == [(7, "REDACTED")]


def test_a_replaced_table_is_read_through_a_new_pin_and_a_new_plan(lg, spark) -> None:
    """The same statement after the table was replaced behind the catalog's back is planned
    again (the plan cache misses on the new identity) over a pin made for the new table."""
    admin = lg.session("admin")
    admin.sql("CREATE TABLE g.s.pinned (id INT, email STRING)")
    admin.sql("INSERT INTO g.s.pinned VALUES (1, 'a@x.de')")
    loc = lg.catalog.table("g", "s", "pinned").location
    sql = "SELECT id FROM g.s.pinned"
    mia = lg.session("mia")
    assert [tuple(r) for r in mia.sql(sql).collect()] == [(1,)]
    assert [tuple(r) for r in mia.sql(sql).collect()] == [(1,)]  # a cache hit
    before = mia.last_planned
    assert before is not None and len(before.pins) == 2  # the pin and the view over it
    misses = lg.plans.misses
    shutil.rmtree(loc)
    spark.createDataFrame([(5, "n@m.de"), (6, "o@p.de")], "id INT, email STRING").write.format(
        "delta"
    ).save(loc)
    assert sorted(tuple(r) for r in mia.sql(sql).collect()) == [(5,), (6,)]
    after = mia.last_planned
    assert after is not None and lg.plans.misses == misses + 1
    assert set(after.pins).isdisjoint(before.pins)
    assert after.identities[loc] == delta_identity(loc) != before.identities[loc]


def test_a_plan_is_planned_again_after_a_commit(lg) -> None:
    """A cached plan holds while its tables are the same Delta tables at the same versions."""
    admin = lg.session("admin")
    admin.sql("CREATE TABLE g.s.grows (id INT)")
    mia = lg.session("mia")
    sql = "SELECT count(*) FROM g.s.grows"
    assert mia.sql(sql).collect()[0][0] == 0
    hits = lg.plans.hits
    assert mia.sql(sql).collect()[0][0] == 0
    assert lg.plans.hits == hits + 1
    admin.sql("INSERT INTO g.s.grows VALUES (1)")
    misses = lg.plans.misses
    assert mia.sql(sql).collect()[0][0] == 1
    assert lg.plans.misses == misses + 1


def test_view_analyses_are_keyed_by_the_table_read(lg, spark) -> None:
    """A time-travel view reads `delta.`<location>`` (no pin): its cached analysis is the
    table's at that place now, not the one there before."""
    admin = lg.session("admin")
    admin.sql("CREATE TABLE g.s.travel (id INT)")
    admin.sql("INSERT INTO g.s.travel VALUES (1)")
    loc = lg.catalog.table("g", "s", "travel").location
    sql = "SELECT id FROM g.s.travel VERSION AS OF 1"
    assert _rows(lg, "mia", sql) == [(1,)]
    keys = {k for k in lg._view_plans if loc in k[0]}
    shutil.rmtree(loc)
    spark.createDataFrame([(9,)], "id INT").write.format("delta").save(loc)
    spark.createDataFrame([(10,)], "id INT").write.format("delta").mode("append").save(loc)
    assert _rows(lg, "mia", sql) == [(9,), (10,)]
    new = {k for k in lg._view_plans if loc in k[0]} - keys
    assert [k[1] for k in new] == [(delta_identity(loc),)]
    assert analysis_key(next(iter(new))[0]) in lg._view_plans


def test_discovery_delta_log_answers_are_the_tables_own(spark, tmp_path: Path) -> None:
    """History and row count (REST discovery) of a table dropped and written again with as
    many commits are the new table's."""
    loc = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(loc)
    spark.range(2).write.format("delta").mode("append").save(loc)
    assert read_log(loc).row_count == 5
    shutil.rmtree(loc)
    spark.range(1).write.format("delta").save(loc)
    spark.range(1).write.format("delta").mode("append").save(loc)
    log = read_log(loc)
    assert (log.version, log.row_count) == (1, 2)


def test_reading_the_identity_costs_no_spark_job(spark, tmp_path: Path) -> None:
    """The id comes from the log's JSON (or delta-rs), never from a Spark job."""
    loc = str(tmp_path / "t")
    spark.range(1).write.format("delta").save(loc)
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup(None))
    ident = delta_identity(loc)
    assert ident.version == 0 and ident.table_id
    assert set(tracker.getJobIdsForGroup(None)) == jobs
