"""A governed statement answers what plain Spark answers over the persona's view (issue 38,
item 6): functions sqlglot reads as something else are kept as Spark reads them.

`to_char(x, fmt)` formats by fmt (sqlglot wrote `CAST(x AS STRING)`, losing the format);
`between(x, low, high)` is Spark 4's function (sqlglot could not parse it); `log10(x)` and
`log2(x)` stay themselves (sqlglot wrote `LOG(10, x)`, which Spark computes with another
rounding); `like(s, p) = false` keeps its grouping (sqlglot wrote `s LIKE p = FALSE`, which
Spark reads as `s LIKE (p = FALSE)`); a recursive CTE is refused with its reason. Each
answer is compared with plain Spark's over the hand-written reference view of
tests/security/oracle.py, built here as text (the oracle's own substitution regenerates SQL
through sqlglot, which is what is under test).
"""

from __future__ import annotations

from typing import Any

import pytest

from . import oracle
from .test_spark4_syntax import CAROL_ORDERS, SPARK4, governed, refused


def plain(lakehouse: Any, locations: dict[str, str], user: str, select: str) -> list[tuple]:
    """`select` (over `{orders}`) in plain Spark, the orders table being `user`'s view."""
    loc = locations["orders"].replace("`", "``")
    view = oracle.VIEWS[user][("sales", "orders")].format(t=f"delta.`{loc}`")
    return [tuple(r) for r in lakehouse.spark.sql(select.format(orders=f"({view}) o")).collect()]


NUMBER_FORMATS = ("999,999.99", "000D00", "$99.9", "S999.99", "9999.99MI")
DATE_FORMATS = ("yyyy-MM-dd", "dd/MM/yy EEE", "MMMM yyyy")


@pytest.mark.parametrize("fmt", NUMBER_FORMATS)
def test_to_char_formats_numbers_by_its_format(lakehouse, locations, fmt: str) -> None:
    select = f"SELECT id, to_char(amount, '{fmt}') FROM {{orders}} ORDER BY id"
    rows = governed(lakehouse, "carol", select.format(orders="main.sales.orders"))
    assert {r[0] for r in rows} == CAROL_ORDERS
    assert rows == plain(lakehouse, locations, "carol", select)


def test_to_char_keeps_the_format_not_a_cast(lakehouse) -> None:
    rows = governed(
        lakehouse,
        "carol",
        "SELECT to_char(amount, '000,000.000') FROM main.sales.orders WHERE id = 1",
    )
    assert rows == [("000,120.000",)]


@pytest.mark.parametrize("fmt", DATE_FORMATS)
def test_to_char_formats_dates_and_timestamps_by_its_format(lakehouse, locations, fmt: str) -> None:
    select = (
        f"SELECT id, to_char(order_date, '{fmt}'), "
        f"to_char(CAST(order_date AS TIMESTAMP) + INTERVAL 90 MINUTES, '{fmt} HH:mm') "
        "FROM {orders} ORDER BY id"
    )
    if not SPARK4:  # Spark 3.5's to_char formats numbers only: the same failure either way
        with pytest.raises(Exception):  # noqa: B017
            plain(lakehouse, locations, "carol", select)
        assert isinstance(
            oracle_free_run(lakehouse, select.format(orders="main.sales.orders")), Exception
        )
        return
    rows = governed(lakehouse, "carol", select.format(orders="main.sales.orders"))
    assert {r[0] for r in rows} == CAROL_ORDERS
    assert rows == plain(lakehouse, locations, "carol", select)
    assert all(":30" in r[2] for r in rows)


def oracle_free_run(lakehouse: Any, sql: str) -> Any:
    try:
        return lakehouse.session("carol").sql(sql).collect()
    except Exception as e:
        return e


def test_to_char_in_a_mask_or_filter_keeps_its_format(lakehouse, locations) -> None:
    select = "SELECT id FROM {orders} WHERE to_char(amount, '999.99') LIKE '%.10' ORDER BY id"
    rows = governed(lakehouse, "carol", select.format(orders="main.sales.orders"))
    assert rows == plain(lakehouse, locations, "carol", select) == [(8,)]


BETWEEN_SELECTS = (
    "SELECT id, between(amount, 50, 150) FROM {orders} ORDER BY id",
    "SELECT id FROM {orders} WHERE between(amount, 50, 150) ORDER BY id",
    "SELECT id FROM {orders} WHERE NOT between(amount, 50, 150) ORDER BY id",
    "SELECT id FROM {orders} WHERE id > 0 AND between(id, 2, 8) = true ORDER BY id",
    "SELECT id FROM {orders} WHERE amount BETWEEN (50) AND 150 ORDER BY id",
    "SELECT id FROM {orders} WHERE amount NOT BETWEEN (50) AND (150) ORDER BY id",
)


@pytest.mark.parametrize("select", BETWEEN_SELECTS)
def test_between_function_answers_as_spark_does(lakehouse, locations, select: str) -> None:
    sql = select.format(orders="main.sales.orders")
    if not SPARK4 and "between(" in select:
        assert refused(lakehouse, "carol", sql) == (
            "function between() needs Spark 4; this Lakegate runs on Spark 3.5"
        )
        return
    rows = governed(lakehouse, "carol", sql)
    assert rows == plain(lakehouse, locations, "carol", select)
    assert {r[0] for r in rows} <= CAROL_ORDERS


def test_between_function_in_pipe_syntax_answers_as_spark_does(lakehouse, locations) -> None:
    if not SPARK4:
        pytest.skip("pipe syntax is Spark 4's")
    rows = governed(
        lakehouse, "carol", "FROM main.sales.orders |> WHERE between(amount, 50, 150) |> SELECT id"
    )
    expected = plain(
        lakehouse, locations, "carol", "SELECT id FROM {orders} WHERE amount BETWEEN 50 AND 150"
    )
    assert sorted(rows) == sorted(expected)


LOG_SELECTS = (
    "SELECT id, log10(amount * 1000 / amount), log2(amount * 8 / amount) FROM {orders} ORDER BY id",
    "SELECT id, log10(amount), log(10, amount), log2(amount), log(2, amount) FROM {orders} "
    "ORDER BY id",
)


@pytest.mark.parametrize("select", LOG_SELECTS)
def test_log10_and_log2_answer_as_spark_does(lakehouse, locations, select: str) -> None:
    rows = governed(lakehouse, "carol", select.format(orders="main.sales.orders"))
    assert rows == plain(lakehouse, locations, "carol", select)
    if "1000" in select:
        assert {(r[1], r[2]) for r in rows} == {(3.0, 3.0)}  # not LOG(10, 1000) = 2.99...96


PATTERN_SELECTS = (
    "SELECT id, like(region, 'EM%') = false FROM {orders} ORDER BY id",
    "SELECT id, true = rlike(region, '^E') FROM {orders} ORDER BY id",
    "SELECT id, ilike(region, 'em%') IS NOT NULL FROM {orders} ORDER BY id",
    "SELECT id FROM {orders} WHERE NOT like(region, 'X%') AND region LIKE 'E%' ORDER BY id",
)


@pytest.mark.parametrize("select", PATTERN_SELECTS)
def test_pattern_match_functions_keep_their_grouping(lakehouse, locations, select: str) -> None:
    rows = governed(lakehouse, "carol", select.format(orders="main.sales.orders"))
    assert rows == plain(lakehouse, locations, "carol", select)
    assert {r[0] for r in rows} <= CAROL_ORDERS


RECURSIVE = (
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "WITH RECURSIVE r(id, amount) AS (SELECT id, amount FROM main.sales.orders WHERE id = 1 "
    "UNION ALL SELECT o.id, o.amount FROM main.sales.orders o JOIN r ON o.id = r.id + 1) "
    "SELECT * FROM r",
    "SELECT * FROM main.sales.orders WHERE id IN (WITH RECURSIVE r(n) AS (SELECT 1 "
    "UNION ALL SELECT n + 1 FROM r WHERE n < 9) SELECT n FROM r)",
    "INSERT INTO main.sales.orders WITH RECURSIVE r(n) AS (SELECT 100 UNION ALL "
    "SELECT n + 1 FROM r WHERE n < 101) SELECT n, 1, 'EMEA', 1.0, DATE'2024-01-01', false FROM r",
)


@pytest.mark.parametrize("sql", RECURSIVE)
def test_recursive_cte_is_refused_with_its_reason(lakehouse, sql: str) -> None:
    from governance.sql.resolve import RECURSIVE_CTE

    assert refused(lakehouse, "carol", sql) == RECURSIVE_CTE
