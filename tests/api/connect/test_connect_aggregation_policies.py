"""Aggregation policies through the Spark Connect gateway (issue 40): `agnes` reads
`main.sales.orders` only in aggregates over groups of 3+ rows. A `sql` relation is planned
by her governed session (guarded like any statement); `spark.table` is the governed
`SELECT *`, refused, and so is every DataFrame built on it."""

from __future__ import annotations

from collections import Counter

import pytest
from connect_testkit import audit_lines, rows

BY_REGION = "SELECT region, count(*) AS n FROM main.sales.orders GROUP BY region"


def _expected_counts(connect_lakegate) -> list[tuple]:
    """Hand-computed from the Delta table itself: per-region counts, groups of 3+ only."""
    orders = connect_lakegate.catalog.table("main", "sales", "orders")
    raw = connect_lakegate.spark.read.format("delta").load(orders.location).collect()
    counts = Counter(r["region"] for r in raw)
    return sorted(((k, n) for k, n in counts.items() if n >= 3), key=repr)


def test_sql_aggregation_through_the_gateway_returns_only_large_groups(
    remote, embedded, connect_lakegate
) -> None:
    expected = _expected_counts(connect_lakegate)
    assert rows(remote("agnes").sql(BY_REGION)) == expected
    assert embedded("agnes", BY_REGION) == expected


@pytest.mark.parametrize(
    "frame",
    [
        lambda s: s.table("main.sales.orders"),
        lambda s: s.table("main.sales.orders").groupBy("region").count(),
        lambda s: s.read.table("main.sales.orders").selectExpr("max(amount)"),
        lambda s: s.sql("SELECT * FROM main.sales.orders"),
        lambda s: s.sql("SELECT region, max(amount) FROM main.sales.orders GROUP BY region"),
    ],
)
def test_dataframe_reads_of_an_aggregate_only_table_are_refused(remote, frame) -> None:
    with pytest.raises(Exception, match="aggregation policy agnes-orders-k3"):
        frame(remote("agnes")).collect()


def test_dataframe_operations_on_a_guarded_sql_result_are_allowed(remote, connect_lakegate) -> None:
    expected = _expected_counts(connect_lakegate)
    df = remote("agnes").sql(BY_REGION).filter("n >= 3").select("region")
    assert rows(df) == sorted(((r,) for r, _ in expected), key=repr)


def test_on_small_group_refuse_is_a_refusal_on_record_with_its_reason(
    remote, audit_dir, connect_lakegate
) -> None:
    """`on_small_group: refuse` fails in Spark, while rows are made; the gateway answers it
    as a refusal (one line, no Spark text) and its call's audit line says why."""
    since = len(audit_lines(audit_dir))
    by_country = "SELECT country, count(*) AS n FROM main.sales.customers GROUP BY country"
    with pytest.raises(Exception, match=r"refused: a group of the result has fewer rows") as e:
        remote("agnes").sql(by_country).collect()
    assert "__lg_small_group_" not in str(e.value)  # the guard's marker never reaches a caller
    refusals = [
        ln
        for ln in audit_lines(audit_dir)[since:]
        if ln["ugi"].startswith("agnes ") and ln["allowed"] == "false"
    ]
    assert refusals
    assert all("fewer rows of an aggregate-only table" in ln["reason"] for ln in refusals)
    customers = connect_lakegate.catalog.table("main", "sales", "customers")
    total = connect_lakegate.spark.read.format("delta").load(customers.location).count()
    assert rows(remote("agnes").sql("SELECT count(*) FROM main.sales.customers")) == [(total,)]
