"""Pinned sources (governance/execute/sources.py): a query's views read their table through a
DataFrame loaded once, and are themselves global temp views made once per body, without
giving up fresh reads, time travel, fail-closed schema changes or the verifier's guarantee.
One test per rule, on a private lakehouse (and the shared demo lakehouse for the verifier's
hostile plans)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from catalog.identity import delta_identity
from governance import AccessDenied
from governance.errors import LakegateError, Refused
from governance.execute.run import StatementFailed, analyze_only
from governance.execute.sources import SCHEMA_CHANGED, PinnedSources, ensure_pins
from governance.planning.dispatch import Planner
from governance.planning.expected import Expected
from governance.planning.planned import Planned
from governance.session.governed import Lakegate
from governance.sql.resolve import Namespace
from governance.verify.plan import verify_plan

POLICIES = """
groups:
  admins: [admin]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: readers
    principals: [r]
    privileges: [select]
    on: p.s.*
row_filters:
  - {id: r-emea, on: p.s.t, principals: [r], kind: restrictive, where: "region = 'EMEA'"}
column_masks:
  - {id: r-note, on: p.s.t, columns: [note], principals: [r], mask: redact}
"""


@pytest.fixture(scope="module")
def lg(make_lakegate) -> Lakegate:
    return make_lakegate(
        "pins",
        POLICIES,
        [
            "CREATE CATALOG p",
            "CREATE SCHEMA p.s",
            "CREATE TABLE p.s.t (id INT, region STRING, note STRING)",
            "INSERT INTO p.s.t VALUES (1, 'EMEA', 'a'), (2, 'AMER', 'b'), (3, 'EMEA', 'c')",
            "CREATE TABLE p.s.w (id INT, region STRING, note STRING)",
        ],
    )


def rows(lg: Lakegate, user: str, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in lg.session(user).sql(sql).collect())


def planned_of(lg: Lakegate, user: str, sql: str) -> Planned:
    s = lg.session(user)
    s.sql(sql).collect()
    assert s.last_planned is not None
    return s.last_planned


def split_pins(planned: Planned) -> tuple[str, str]:
    """(the pin, the governed view over it) of a one-table query's plan."""
    (pin,) = [n for n in planned.pins if "__lg_src_" in n]
    (view,) = [n for n in planned.pins if "__lg_gv_" in n]
    return pin, view


def test_a_query_reads_its_governed_view_by_name_over_its_pin(lg) -> None:
    p = planned_of(lg, "r", "SELECT id, note FROM p.s.t")
    assert p.sql is not None and "delta.`" not in p.sql
    location = lg.catalog.table("p", "s", "t").location
    assert list(p.pins.values()) == [location, location]
    pin, view = split_pins(p)
    # the statement names the view; the body (pin, mask, filter) is in Spark, analysed once
    assert view in p.sql and pin not in p.sql and "REDACTED" not in p.sql
    assert rows(lg, "r", "SELECT id, note FROM p.s.t") == [(1, "REDACTED"), (3, "REDACTED")]


def test_statements_reading_the_same_columns_share_one_governed_view(lg) -> None:
    """Content-addressed: the same body (user, table, the columns a statement can name) is
    the same view, whichever statement asks; other columns, or another user's body (no
    mask, no filter), are another view over the same pin."""
    lg.plans.clear()
    a = split_pins(planned_of(lg, "r", "SELECT id FROM p.s.t"))
    b = split_pins(planned_of(lg, "r", "SELECT max(id) FROM p.s.t WHERE id > 1"))
    wider = split_pins(planned_of(lg, "r", "SELECT id, note FROM p.s.t"))
    admin = split_pins(planned_of(lg, "admin", "SELECT id FROM p.s.t"))
    assert a == b
    assert wider[0] == a[0] and wider[1] != a[1]
    assert admin[0] == a[0] and admin[1] != a[1]


def test_unpinning_a_table_makes_its_governed_views_again(lg, spark) -> None:
    """A governed view holds its pin's plan: forgetting the pin (a schema change) forgets
    the views over it, and the next statement makes both again."""
    statement = "SELECT id, note FROM p.s.t"
    pin, view = split_pins(planned_of(lg, "r", statement))
    for name in (pin, view):
        spark.catalog.dropGlobalTempView(name.split(".", 1)[1].strip("`"))
    lg.sources.forget({pin: lg.catalog.table("p", "s", "t").location})
    assert rows(lg, "r", statement) == [(1, "REDACTED"), (3, "REDACTED")]


def test_with_governed_views_off_a_query_carries_its_view_body(lg, spark) -> None:
    off = Lakegate(dataclasses.replace(lg.config, governed_views=False), spark)
    try:
        p = planned_of(off, "r", "SELECT id, note FROM p.s.t")
        (pin,) = p.pins
        assert p.sql is not None and pin in p.sql and "REDACTED" in p.sql
        assert rows(off, "r", "SELECT id, note FROM p.s.t") == [(1, "REDACTED"), (3, "REDACTED")]
    finally:
        off.close()


def test_a_pinned_table_is_read_at_its_newest_version(lg) -> None:
    statement = "SELECT id FROM p.s.w"
    assert rows(lg, "admin", statement) == []
    lg.session("admin").sql("INSERT INTO p.s.w VALUES (7, 'EMEA', 'x')")
    assert rows(lg, "admin", statement) == [(7,)]  # the same plan (cached), the newest data
    lg.session("admin").sql("DELETE FROM p.s.w WHERE id = 7")
    assert rows(lg, "admin", statement) == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM p.s.t VERSION AS OF 1",
        "SELECT id FROM p.s.t TABLESAMPLE (100 PERCENT)",
    ],
)
def test_time_travel_and_sampling_read_the_delta_path(lg, sql: str) -> None:
    p = planned_of(lg, "r", sql)
    assert p.pins == {}
    assert p.sql is not None and "delta.`" in p.sql


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO p.s.w SELECT id, region, 'n' FROM p.s.t WHERE id < 0",
        "CREATE TABLE p.s.ctas AS SELECT id FROM p.s.t",
    ],
)
def test_a_write_reads_the_delta_path(lg, sql: str) -> None:
    """A write (and a stored definition) never depends on a view of this process."""
    p = planned_of(lg, "admin", sql)
    assert p.pins == {}
    assert p.sql is not None and "__lg_src_" not in p.sql


def test_a_catalog_change_makes_a_new_pin(make_lakegate) -> None:
    lg = make_lakegate(
        "pins-alter",
        POLICIES,
        [
            "CREATE CATALOG p",
            "CREATE SCHEMA p.s",
            "CREATE TABLE p.s.t (id INT, region STRING, note STRING)",
            "INSERT INTO p.s.t VALUES (1, 'EMEA', 'a')",
        ],
    )
    before = planned_of(lg, "admin", "SELECT id FROM p.s.t").pins
    lg.session("admin").sql("ALTER TABLE p.s.t ADD COLUMNS (extra INT)")
    assert rows(lg, "admin", "SELECT id, extra FROM p.s.t") == [(1, None)]
    after = planned_of(lg, "admin", "SELECT id, extra FROM p.s.t").pins
    assert set(after) != set(before) and set(after.values()) == set(before.values())


def test_a_schema_change_out_of_band_fails_closed_and_the_next_statement_reloads(
    make_lakegate, spark
) -> None:
    lg = make_lakegate(
        "pins-drift",
        POLICIES,
        [
            "CREATE CATALOG p",
            "CREATE SCHEMA p.s",
            "CREATE TABLE p.s.t (id INT, region STRING, note STRING)",
            "INSERT INTO p.s.t VALUES (1, 'EMEA', 'a'), (2, 'AMER', 'b')",
        ],
    )
    statement = "SELECT id FROM p.s.t"
    assert rows(lg, "admin", statement) == [(1,), (2,)]
    location = lg.catalog.table("p", "s", "t").location
    # the trusted process changes the table behind the catalog's back
    spark.sql(
        f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.columnMapping.mode' = "
        "'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE delta.`{location}` DROP COLUMN note")  # the old pin's `note`
    spark.sql(f"ALTER TABLE delta.`{location}` ADD COLUMNS (note STRING)")  # is another
    with pytest.raises(StatementFailed) as failed:
        rows(lg, "admin", statement)
    assert str(failed.value).startswith(f"statement failed: [{SCHEMA_CHANGED}] (query ")
    assert rows(lg, "admin", statement) == [(1,), (2,)]


def test_analysts_cannot_name_a_pinned_source(lg) -> None:
    pin = next(iter(planned_of(lg, "r", "SELECT id FROM p.s.t").pins))
    with pytest.raises((AccessDenied, Refused, LakegateError)):
        lg.session("r").sql(f"SELECT * FROM {pin}").collect()
    with pytest.raises((AccessDenied, Refused, LakegateError)):
        lg.session("r").sql("SELECT * FROM global_temp.t").collect()


def test_with_pinned_sources_off_a_query_reads_the_delta_path(lg, spark) -> None:
    off = Lakegate(dataclasses.replace(lg.config, pinned_sources=False), spark)
    try:
        p = planned_of(off, "r", "SELECT id FROM p.s.t")
        assert p.pins == {} and p.sql is not None and "delta.`" in p.sql
        assert rows(off, "r", "SELECT id FROM p.s.t") == [(1,), (3,)]
    finally:
        off.close()


# the verifier keeps its guarantee over pinned sources (shared demo lakehouse) --------------


def pinned_plan(lakehouse: Any, user: str, sql: str, *, by_name: bool = False) -> Planned:
    """`sql` planned over pins; `by_name`: as the session plans a query, each governed
    view read by name (else its body is inlined)."""
    planned = Planner(
        catalog=lakehouse.catalog,
        enforcer=lakehouse.enforcer,
        policy_sql=lakehouse.policy_sql,
        user=user,
        namespace=Namespace("main", "default"),
        pin=lakehouse.sources.name,
        pin_view=lakehouse.sources.view if by_name else None,
    ).plan(sql)
    lakehouse.sources.ensure(lakehouse.spark, planned.pins)
    return planned


def verify(lakehouse: Any, sql: str, expected: Expected) -> None:
    spark = lakehouse.spark
    head = sql.lstrip().split(None, 1)[0].upper()
    plan = (
        analyze_only(spark, sql)
        if head == "INSERT"
        else spark.sql(sql)._jdf.queryExecution().analyzed()
    )
    verify_plan(plan, expected, lambda s, fresh: spark.sql(s)._jdf.queryExecution().analyzed())


def test_a_governed_view_read_by_name_passes_the_verifier(lakehouse) -> None:
    gov = pinned_plan(lakehouse, "alice", "SELECT * FROM main.sales.customers", by_name=True)
    assert gov.sql is not None and "__lg_gv_" in gov.sql
    verify(lakehouse, gov.sql, gov.expected)


def test_a_governed_view_replaced_behind_the_layer_is_refused(lakehouse, spark) -> None:
    """The name proves nothing: were the view redefined (only the trusted process could),
    the projection over the pin is no longer the governed one and the verifier refuses."""
    gov = pinned_plan(lakehouse, "alice", "SELECT * FROM main.sales.customers", by_name=True)
    assert gov.sql is not None
    pin, view = split_pins(gov)
    try:
        spark.sql(f"SELECT * FROM {pin}").createOrReplaceGlobalTempView(
            view.split(".", 1)[1].strip("`")
        )
        with pytest.raises(Refused):
            verify(lakehouse, gov.sql, gov.expected)
    finally:
        lakehouse.sources.forget(gov.pins)  # the next statement makes the real view again


def test_another_users_governed_view_is_refused(lakehouse) -> None:
    """A plan naming the governed view built for someone else (other masks, other filters)
    does not match the view the rewriter built for this user."""
    alice = pinned_plan(lakehouse, "alice", "SELECT * FROM main.sales.customers", by_name=True)
    root = pinned_plan(lakehouse, "root", "SELECT * FROM main.sales.customers", by_name=True)
    assert alice.sql is not None
    mine, theirs = split_pins(alice)[1], split_pins(root)[1]
    assert mine != theirs
    with pytest.raises(Refused):
        verify(lakehouse, alice.sql.replace(mine, theirs), alice.expected)


def test_a_governed_read_through_a_pin_passes_the_verifier(lakehouse) -> None:
    gov = pinned_plan(lakehouse, "alice", "SELECT * FROM main.sales.customers")
    assert gov.pins and gov.sql is not None
    verify(lakehouse, gov.sql, gov.expected)


HOSTILE_PINNED = {
    # the pin read raw where alice's governed (masked) view is expected
    "raw-pin": "SELECT * FROM {PIN}",
    "raw-pin-aliased-like-the-view": "SELECT * FROM (SELECT * FROM {PIN} AS __lg_v) AS customers",
    # the view's body over the pin with its masks dropped
    "pin-without-masks": "SELECT id, name, email, phone, country FROM {PIN} AS __lg_v",
    # the governed text twice, one view expected
    "pinned-view-twice": "SELECT * FROM ({GOV}) a UNION ALL SELECT * FROM ({GOV}) b",
    # a write whose source reads the pin raw
    "write-from-raw-pin": "INSERT INTO delta.`{STRAY}` SELECT id FROM {PIN}",
}


@pytest.mark.parametrize("name", list(HOSTILE_PINNED))
def test_a_read_of_a_pin_outside_its_governed_view_is_refused(
    lakehouse, tmp_path, spark, name: str
) -> None:
    gov = pinned_plan(lakehouse, "alice", "SELECT * FROM main.sales.customers")
    assert gov.sql is not None
    (pin,) = gov.pins
    stray = str(tmp_path / "stray")
    spark.range(1).selectExpr("CAST(id AS INT) AS id").write.format("delta").save(stray)
    sql = (
        HOSTILE_PINNED[name]
        .replace("{PIN}", pin)
        .replace("{GOV}", gov.sql)
        .replace("{STRAY}", stray)
    )
    with pytest.raises(Refused):
        verify(lakehouse, sql, gov.expected)


def test_a_plan_may_only_name_pins_this_process_made_for_their_table(lakehouse, spark) -> None:
    """The location loaded is the registry's, never the plan's word alone; and a plan with
    pins cannot run where pinning is off."""
    customers = lakehouse.catalog.table("main", "sales", "customers")
    orders = lakehouse.catalog.table("main", "sales", "orders").location
    sources = PinnedSources()
    pin = sources.name(customers, delta_identity(customers.location).table_id)
    for pins in ({pin: orders}, {"global_temp.__lg_src_forged_0": customers.location}):
        with pytest.raises(Refused, match="did not make"):
            sources.ensure(spark, pins)
    with pytest.raises(Refused, match="none are configured"):
        ensure_pins(None, spark, {pin: customers.location})
    sources.ensure(spark, {pin: customers.location})
    assert spark.sql(f"SELECT count(*) FROM {pin}").first()[0] > 0
    view = sources.view(pin, f"SELECT id FROM {pin} AS __lg_v")
    assert view is not None
    with pytest.raises(Refused, match="did not make"):
        sources.ensure(spark, {view: orders})
    with pytest.raises(Refused, match="did not name"):
        sources.view("global_temp.__lg_src_forged_0", "SELECT 1")
