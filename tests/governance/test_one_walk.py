"""The planner's one walk over a statement (governance/sql/walk.py, issue 31), without Spark:
each step reads what its own walk would have found, and tables are resolved in the order
the earlier per-step walk visited them (CTE numbering, reads, the first refusal).
"""

from __future__ import annotations

import pytest
from sqlglot import exp

from benchmarks.tpcds import spark_queries
from catalog.catalog import Catalog
from governance import AccessDenied
from governance.sql import sqlgen
from governance.sql.parse import parse_statement, parse_walked
from governance.sql.resolve import Namespace, resolve_tables
from governance.sql.spark_dialect import SPARK
from governance.sql.sqlgen import spark_sql
from governance.sql.walk import LISTS, collect

STATEMENTS = [
    "SELECT * FROM orders o JOIN customers c ON o.customer_id = c.id WHERE o.amount > 1",
    "SELECT /*+ BROADCAST(c) */ count(*), o.* FROM orders o, customers c",
    "WITH a (x, y) AS (SELECT id, region FROM orders) SELECT x, current_user() FROM a",
    "SELECT s.id FROM (SELECT * FROM orders) s NATURAL JOIN customers t",
    "SELECT `weird name`.id FROM orders `weird name` LATERAL VIEW explode(array(1)) e AS v",
    "SELECT * FROM orders PIVOT (sum(amount) FOR region IN ('eu', 'us'))",
    "SELECT id FROM orders VERSION AS OF 3 UNION ALL SELECT id FROM orders TABLESAMPLE (5 ROWS)",
    "SELECT named_struct('a', 1).a, id FROM orders WHERE EXISTS (SELECT 1 FROM customers)",
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_each_list_of_the_one_walk_holds_what_its_steps_own_walk_finds(sql):
    stmt = parse_statement(sql)
    walked = collect(stmt)
    for name, kinds in LISTS:
        assert [id(n) for n in getattr(walked, name)] == [id(n) for n in stmt.find_all(*kinds)]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_the_parsed_statements_walk_is_of_the_tree_parse_statement_gives(sql):
    stmt, walked = parse_walked(sql)
    assert walked.root is stmt
    assert stmt.sql("spark") == parse_statement(sql).sql("spark")


@pytest.mark.parametrize(
    ("sql", "reads", "rewritten"),
    [
        (
            "SELECT * FROM orders o JOIN customers c ON o.customer_id = c.id",
            ["main.sales.customers", "main.sales.orders"],
            "SELECT * FROM orders AS o JOIN customers AS c ON o.customer_id = c.id",
        ),
        (
            "SELECT * FROM orders, customers, hr.employees",
            ["main.hr.employees", "main.sales.customers", "main.sales.orders"],
            "SELECT * FROM orders, customers, hr.employees",
        ),
        (
            "WITH a AS (SELECT * FROM orders), b AS (SELECT * FROM customers) SELECT * FROM a, b",
            ["main.sales.customers", "main.sales.orders"],
            "WITH __lg_cte_1 AS (SELECT * FROM orders), __lg_cte_2 AS (SELECT * FROM "
            "customers) SELECT * FROM __lg_cte_1 AS a, __lg_cte_2 AS b",
        ),
        (  # the outer WITH's CTEs first, then the subquery's, then the CTE body's own
            "WITH a AS (WITH x AS (SELECT * FROM orders) SELECT * FROM x) "
            "SELECT * FROM (WITH y AS (SELECT * FROM customers) SELECT * FROM y) t, a",
            ["main.sales.customers", "main.sales.orders"],
            "WITH __lg_cte_3 AS (SELECT * FROM orders), __lg_cte_1 AS (SELECT * FROM "
            "__lg_cte_3 AS x), __lg_cte_2 AS (SELECT * FROM customers) SELECT * FROM "
            "(SELECT * FROM __lg_cte_2 AS y) AS t, __lg_cte_1 AS a",
        ),
        (
            "SELECT * FROM orders WHERE id IN (SELECT customer_id FROM customers) "
            "AND EXISTS (SELECT 1 FROM hr.employees)",
            ["main.hr.employees", "main.sales.customers", "main.sales.orders"],
            "SELECT * FROM orders WHERE id IN (SELECT customer_id FROM customers) "
            "AND EXISTS(SELECT 1 FROM hr.employees)",
        ),
    ],
)
def test_tables_are_resolved_last_child_first_and_ctes_after_their_owners_body(
    offline_catalog: Catalog, sql, reads, rewritten
):
    stmt = parse_statement(sql)
    resolved = resolve_tables(stmt, offline_catalog, Namespace("main", "sales"), "alice")
    assert [r.info.full_name for r in resolved.reads] == reads
    assert stmt.sql("spark") == rewritten


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        ("SELECT * FROM nosuch1 JOIN nosuch2 ON TRUE", "main.sales.nosuch2"),
        ("WITH a AS (SELECT * FROM nosuch_a) SELECT * FROM nosuch_b, a", "main.sales.nosuch_b"),
    ],
)
def test_the_first_refusal_names_the_table_the_walk_meets_first(offline_catalog, sql, table):
    with pytest.raises(AccessDenied) as e:
        resolve_tables(parse_statement(sql), offline_catalog, Namespace("main", "sales"), "alice")
    assert str(e.value) == (
        f"access denied: user alice has no SELECT privilege on table {table} (or it does not exist)"
    )


RESHAPING = [
    "SELECT id FROM orders QUALIFY row_number() OVER (ORDER BY id) = 1",
    "SELECT id FROM orders WHERE id = ANY(array(1, 2))",
    "SELECT DISTINCT ON (region) region, id FROM orders",
    "SELECT * FROM orders, UNNEST(array(1, 2)) AS t(x)",
    "SELECT (SELECT max(x) FROM (SELECT id x FROM orders QUALIFY rank() OVER (ORDER BY id) = 1))",
]


@pytest.mark.parametrize("sql", STATEMENTS + RESHAPING + [q for _, q in spark_queries()])
def test_generation_from_the_one_walk_writes_what_sqlglots_spark_generator_writes(sql):
    """A tree its walk shows free of QUALIFY, DISTINCT ON, UNNEST and ANY skips the SELECT
    transforms (governance/sql/sqlgen.py); the text is the same either way."""
    expected = parse_statement(sql).sql("spark")
    stmt, walked = parse_walked(sql)
    assert spark_sql(stmt, walked) == expected


@pytest.mark.parametrize("sql", RESHAPING)
def test_a_tree_the_select_transforms_reshape_is_written_through_them(sql):
    walked = collect(parse_statement(sql))
    assert walked.reshaped_by_generation()


def test_the_pinned_sqlglot_keeps_the_generator_table_the_plain_path_replaces():
    """Without it every tree would take the transforms: correct, but the speed-up is gone."""
    assert sqlgen.PLAIN_DISPATCH is not None
    assert sqlgen.PLAIN_DISPATCH[exp.Select] is SPARK.generator_class.select_sql
