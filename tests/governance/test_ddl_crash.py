"""Crashes leave nothing a user cannot fix (issue 27): a CREATE TABLE killed after Delta's
first commit but before the catalog registration leaves a Delta table at the managed
location under a name the catalog does not know. The next CREATE TABLE of that name (with or
without IF NOT EXISTS) moves the leftover aside, after its intent is on record, and creates
the table; nothing is deleted.

The leftover is made exactly as the killed statement leaves it: the generated Delta CREATE
and INSERT at the managed location ran, the registration did not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from governance.session.governed import Lakegate
from governance.tools.demo import write_config


@pytest.fixture
def lg(spark, tmp_path: Path) -> Iterator[Lakegate]:
    lg = Lakegate.open(write_config(tmp_path), spark=spark)
    s = lg.session("root")
    s.sql("CREATE CATALOG IF NOT EXISTS main")
    s.sql("CREATE SCHEMA IF NOT EXISTS main.sales")
    yield lg
    lg.close()


def _crashed_create(lg: Lakegate, spark) -> Path:
    """What a kill between Delta's commit and the registration leaves."""
    location = Path(lg.catalog.managed_location("main", "sales", "orders"))
    spark.sql(f"CREATE TABLE delta.`{location}` (id INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{location}` VALUES (7)")
    assert lg.catalog.table("main", "sales", "orders") is None
    return location


@pytest.mark.parametrize("if_not_exists", ["", "IF NOT EXISTS "])
def test_create_table_after_a_crash_between_commit_and_registration_succeeds(
    lg: Lakegate, spark, if_not_exists: str
) -> None:
    location = _crashed_create(lg, spark)
    s = lg.session("root")
    s.sql(f"CREATE TABLE {if_not_exists}main.sales.orders (id INT, region STRING)")
    info = lg.catalog.table("main", "sales", "orders")
    assert info is not None and [c.name for c in info.columns] == ["id", "region"]
    assert s.sql("SELECT count(*) FROM main.sales.orders").collect()[0][0] == 0
    (aside,) = [p for p in location.parent.iterdir() if p.name.startswith("orders.orphan-")]
    kept = spark.read.format("delta").load(str(aside)).collect()
    assert [r.id for r in kept] == [7]  # the crashed statement's data is kept, not deleted
    lines = (lg.config.audit / "audit.log").read_text().splitlines()
    creates = [ln for ln in lines if "\tcmd=create\tsrc=main.sales.orders" in ln]
    assert ["phase=intent" in creates[0], "phase=outcome" in creates[-1]] == [True, True]


def test_a_registered_table_is_never_set_aside(lg: Lakegate, spark) -> None:
    s = lg.session("root")
    s.sql("CREATE TABLE main.sales.orders (id INT)")
    s.sql("INSERT INTO main.sales.orders VALUES (1)")
    s.sql("CREATE TABLE IF NOT EXISTS main.sales.orders (id INT)")
    location = Path(lg.catalog.managed_location("main", "sales", "orders"))
    assert [p.name for p in location.parent.iterdir()] == ["orders"]
    assert s.sql("SELECT count(*) FROM main.sales.orders").collect()[0][0] == 1
