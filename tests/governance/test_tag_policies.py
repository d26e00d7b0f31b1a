"""Tag-driven policies (ABAC, `match_columns`) on real Delta tables, one test per rule.

Tables in `g.s` (see `lg`): `orders.region` is tagged `region` in the YAML, `customers.home`
by a Delta table property a trusted pipeline sets on the raw Spark session, `two` has two
region-tagged columns, `products` none. carol is in emea-analysts (the tag-driven filter),
mia gets the tag-driven masks, admin sees everything.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from governance.errors import AccessDenied

POLICIES = """
groups:
  admins: [admin]
  emea-analysts: [carol]
tags:
  g.s.orders.region: [region]
  g.s.orders.email: [pii]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: readers, principals: [carol, mia, dave], privileges: [select, modify], on: g.s.*}
row_filters:
  - id: region-by-tag
    on: g.*.*
    match_columns: {tag: region, as: r}
    principals: [group:emea-analysts]
    where: "r = 'EMEA'"
column_masks:
  - id: pii-by-tag
    on: g.*.*
    match_columns: {tag: pii}
    mask: redact
    principals: [mia]
  - id: region-initial
    on: g.*.*
    match_columns: {tag: region, as: reg}
    mask: custom
    expression: "concat(substr(reg, 1, 1), '*')"
    principals: [dave]
"""

ROWS = "(1, 'EMEA', 'a@x.de'), (2, 'AMER', 'b@x.com'), (3, 'EMEA', 'c@x.de'), (4, 'APAC', 'd@x.jp')"


def raw_location(lg, table: str) -> str:
    return lg.catalog.table("g", "s", table).location


@pytest.fixture(scope="module")
def lg(make_lakegate, spark):
    lg = make_lakegate(
        "tags",
        POLICIES,
        [
            "CREATE CATALOG g",
            "CREATE SCHEMA g.s",
            "CREATE TABLE g.s.orders (id INT, region STRING, email STRING)",
            f"INSERT INTO g.s.orders VALUES {ROWS}",
            "CREATE TABLE g.s.customers (id INT, home STRING, email STRING)",
            f"INSERT INTO g.s.customers VALUES {ROWS}",
            "CREATE TABLE g.s.two (id INT, ship STRING, bill STRING)",
            "INSERT INTO g.s.two VALUES (1, 'EMEA', 'EMEA'), (2, 'EMEA', 'AMER'), "
            "(3, 'AMER', 'EMEA')",
            "CREATE TABLE g.s.products (id INT, region STRING)",
            "INSERT INTO g.s.products VALUES (1, 'EMEA'), (2, 'AMER')",
        ],
    )
    # the trusted pipeline tags what it writes, outside Lakegate
    spark.sql(
        f"ALTER TABLE delta.`{raw_location(lg, 'customers')}` SET TBLPROPERTIES "
        "('lakegate.tags.home' = 'region', 'lakegate.tags.email' = 'PII')"
    )
    spark.sql(
        f"ALTER TABLE delta.`{raw_location(lg, 'two')}` SET TBLPROPERTIES "
        "('lakegate.tags.ship' = 'region,logistics', 'lakegate.tags.bill' = 'region')"
    )
    return lg


def ids(lg, user: str, sql: str) -> list:
    return [tuple(r) for r in lg.session(user).sql(sql).collect()]


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("orders", [(1,), (3,)]),  # tag from the YAML
        ("customers", [(1,), (3,)]),  # tag from a Delta table property
        ("two", [(1,)]),  # two tagged columns: each must pass (ANDed)
        ("products", [(1,), (2,)]),  # no tagged column: unaffected
    ],
)
def test_tag_filter_applies_to_every_table_with_a_tagged_column(lg, table, expected) -> None:
    assert ids(lg, "carol", f"SELECT id FROM g.s.{table} ORDER BY id") == expected


def test_tag_filter_does_not_apply_to_other_principals(lg) -> None:
    assert ids(lg, "mia", "SELECT id FROM g.s.orders ORDER BY id") == [(1,), (2,), (3,), (4,)]


def test_tag_filter_binds_the_real_quoted_column_on_the_tree(lg) -> None:
    access = lg.enforcer.table_access(
        lg.enforcer.identity("carol"), lg.catalog.table("g", "s", "two")
    )
    assert [(f.id, f.where) for f in access.row_filters] == [
        ("region-by-tag", "(`ship` = 'EMEA') AND (`bill` = 'EMEA')")
    ]


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("orders", [(1, "REDACTED"), (2, "REDACTED")]),  # YAML tag pii
        ("customers", [(1, "REDACTED"), (2, "REDACTED")]),  # Delta tag 'PII' (lower-cased)
    ],
)
def test_tag_mask_applies_to_every_tagged_column(lg, table, expected) -> None:
    assert ids(lg, "mia", f"SELECT id, email FROM g.s.{table} WHERE id < 3 ORDER BY id") == expected


def test_tag_mask_as_names_the_column_in_a_custom_expression(lg) -> None:
    got = ids(lg, "dave", "SELECT id, ship, bill FROM g.s.two ORDER BY id")
    assert got == [(1, "E*", "E*"), (2, "E*", "A*"), (3, "A*", "E*")]


def test_delta_tag_set_by_a_pipeline_applies_at_the_next_statement(lg, spark) -> None:
    session = lg.session("admin")
    session.sql("CREATE TABLE g.s.late (id INT, zone STRING)")
    session.sql("INSERT INTO g.s.late VALUES (1, 'EMEA'), (2, 'AMER')")
    assert ids(lg, "carol", "SELECT id FROM g.s.late ORDER BY id") == [(1,), (2,)]
    spark.sql(
        f"ALTER TABLE delta.`{raw_location(lg, 'late')}` SET TBLPROPERTIES "
        "('lakegate.tags.zone' = 'region')"
    )
    assert ids(lg, "carol", "SELECT id FROM g.s.late ORDER BY id") == [(1,)]
    spark.sql(
        f"ALTER TABLE delta.`{raw_location(lg, 'late')}` UNSET TBLPROPERTIES ('lakegate.tags.zone')"
    )
    assert ids(lg, "carol", "SELECT id FROM g.s.late ORDER BY id") == [(1,), (2,)]


def test_tag_from_delta_column_metadata_applies(lg, spark, tmp_path: Path) -> None:
    """A pipeline may tag a column in its Delta schema (StructField metadata) instead."""
    path = str(tmp_path / "meta")
    df = spark.createDataFrame([(1, "EMEA"), (2, "AMER")], "id INT, zone STRING")
    df.withMetadata("zone", {"lakegate.tags": "region"}).write.format("delta").save(path)
    lg.register_table("g.s.meta", path)
    assert ids(lg, "carol", "SELECT id FROM g.s.meta ORDER BY id") == [(1,)]


def test_explain_names_the_delta_tagged_column(lg) -> None:
    from governance.policy.analysis import effective_access

    acc = effective_access(lg.enforcer, "carol", lg.catalog.table("g", "s", "customers"))
    assert acc.tag_matches == (("region-by-tag", "home", "region"),)
    assert acc.row_filters == (("region-by-tag", "permissive", "`home` = 'EMEA'"),)


def test_diff_with_a_catalog_lists_every_table_a_tag_filter_reaches(lg) -> None:
    from governance.policy.analysis import diff_policies
    from governance.policy.loader import load_policy_text

    start = POLICIES.index("row_filters:")
    without = POLICIES[:start] + POLICIES[POLICIES.index("column_masks:") :]
    tables = [
        t for t in lg.catalog.tables() if t.name in ("orders", "customers", "two", "products")
    ]
    d = diff_policies(
        load_policy_text({"p.yaml": without}), load_policy_text({"p.yaml": POLICIES}), tables
    )
    assert {(c.user, c.table) for c in d.changes} == {
        ("carol", "g.s.orders"),
        ("carol", "g.s.customers"),
        ("carol", "g.s.two"),
    }
    assert "Tables affected: g.s.customers, g.s.orders, g.s.two" in d.to_markdown()


def test_time_travel_reads_use_todays_tags(lg, spark) -> None:
    """Version 1 of `customers` predates the pipeline's tag; the read is still filtered."""
    got = ids(lg, "carol", "SELECT id FROM g.s.customers VERSION AS OF 1 ORDER BY id")
    assert got == [(1,), (3,)]


def test_unreadable_tags_refuse_the_statement(lg, tmp_path: Path) -> None:
    session = lg.session("admin")
    session.sql("CREATE TABLE g.s.broken (id INT, region STRING)")
    session.sql("INSERT INTO g.s.broken VALUES (1, 'EMEA'), (2, 'AMER')")
    log = Path(raw_location(lg, "broken")) / "_delta_log"
    backup = tmp_path / "log"
    shutil.copytree(log, backup)
    try:
        for f in log.glob("*.json"):
            f.write_text("{not json")
        with pytest.raises(AccessDenied) as exc:
            lg.session("carol").sql("SELECT id FROM g.s.broken")
        message = str(exc.value)
        assert "\n" not in message
        assert "tags of table g.s.broken cannot be read" in message
    finally:
        shutil.rmtree(log)
        shutil.copytree(backup, log)


# writes under a tag-driven filter ---------------------------------------------------------


def test_tag_filter_refuses_an_insert_outside_it(lg) -> None:
    with pytest.raises(AccessDenied, match="outside their row filter"):
        lg.session("carol").sql("INSERT INTO g.s.orders VALUES (9, 'AMER', 'z@x.com')")
    assert ids(lg, "admin", "SELECT count(*) FROM g.s.orders WHERE id = 9") == [(0,)]


def test_tag_filter_limits_update_and_delete_to_visible_rows(lg) -> None:
    session = lg.session("admin")
    session.sql("CREATE TABLE g.s.w (id INT, region STRING, note STRING)")
    session.sql("INSERT INTO g.s.w VALUES (1, 'EMEA', 'a'), (2, 'AMER', 'b'), (3, 'EMEA', 'c')")
    spark_props = f"ALTER TABLE delta.`{raw_location(lg, 'w')}` SET TBLPROPERTIES "
    lg.spark.sql(spark_props + "('lakegate.tags.region' = 'region')")
    carol = lg.session("carol")
    carol.sql("UPDATE g.s.w SET note = 'x'")
    carol.sql("DELETE FROM g.s.w WHERE id = 2 OR id = 3")
    carol.sql("INSERT INTO g.s.w VALUES (4, 'EMEA', 'd')")
    got = ids(lg, "admin", "SELECT id, region, note FROM g.s.w ORDER BY id")
    assert got == [(1, "EMEA", "x"), (2, "AMER", "b"), (4, "EMEA", "d")]


def test_tag_reading_costs_no_spark_job_and_little_time(lg) -> None:
    """The per-statement cost of finding a table's Delta tags: one `_delta_log` listing."""
    ident = lg.enforcer.identity("carol")
    info = lg.catalog.table("g", "s", "customers")
    lg.enforcer.table_access(ident, info)  # warm: the version's tags are read once
    start = time.perf_counter()
    for _ in range(200):
        lg.enforcer.table_access(ident, info)
    per_call_ms = (time.perf_counter() - start) * 1000 / 200
    assert per_call_ms < 5, per_call_ms
