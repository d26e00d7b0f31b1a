"""A governed session's `row_limit` (REST's result limit): at most that many rows from any
kind of statement, and for a query the limit is in the plan before its one optimization.
A `limit` on the frame afterwards would optimize the whole plan a second time (Delta's file
skipping with it): REST paid 60-70 ms per lookup and 200-330 ms per TPC-DS query for that
(benchmarks/REPORT.md, session 23)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize(
    ("statement", "limit", "rows"),
    [
        ("SELECT id FROM main.sales.orders ORDER BY id", 2, [(1,), (2,)]),
        ("SELECT id FROM main.sales.orders ORDER BY id LIMIT 1", 2, [(1,)]),
        ("SELECT count(*) FROM main.sales.orders", 2, [(8,)]),
        ("SELECT id FROM main.sales.orders ORDER BY id", None, [(i,) for i in range(1, 9)]),
    ],
)
def test_a_query_returns_at_most_the_session_row_limit(
    lakehouse: Any, statement: str, limit: int | None, rows: list[tuple]
) -> None:
    s = lakehouse.session("root")
    s.row_limit = limit
    assert [tuple(r) for r in s.sql(statement).collect()] == rows


def test_the_row_limit_is_in_the_query_plan_before_its_optimization(lakehouse: Any) -> None:
    s = lakehouse.session("root")
    s.row_limit = 3
    df = s.sql("SELECT id FROM main.sales.orders ORDER BY id")
    qe = df._jdf.queryExecution()
    assert qe.optimizedPlan().nodeName() == "GlobalLimit"  # already optimized, with it
    assert [r.id for r in df.collect()] == [1, 2, 3]


def test_a_command_result_is_limited_too(lakehouse: Any) -> None:
    s = lakehouse.session("root")
    s.row_limit = 1
    assert len(s.sql("SHOW TABLES IN main.sales").collect()) == 1
    s.row_limit = None
    assert len(s.sql("SHOW TABLES IN main.sales").collect()) > 1
