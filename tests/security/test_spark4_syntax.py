"""What Spark 4 added to the SQL language is governed or refused, never passed through
(issue 26, item 3; docs/spark4-syntax.md).

One test per construct, over the demo lakehouse, on both Spark lines: a governed construct
sees only the rows a persona's row filters let through, masked values, and never a hidden
column; a refused one fails with one line that names it. A construct Spark 3.5 lacks is
refused there with one line too (`needs Spark 4`), never handed to Spark to fail in.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import pytest

from governance import AccessDenied, LakegateError, Refused
from governance.spark_line import LINE

from . import oracle
from .helpers import assert_message_clean, assert_no_leak

SPARK4 = LINE.name == "4"
CAROL_ORDERS = {1, 4, 8}  # EMEA and not a test order
ALICE_ORDERS = {1, 2, 3, 4, 6, 7, 8}  # every order but the test order 5
CAROL_CUSTOMERS = {1, 4, 6}  # DE, FR, UK
EMAILS = {
    1: "anna@example.de",
    2: "ben@example.com",
    3: "chen@example.cn",
    4: "dom@example.fr",
    5: "eve@example.com",
    6: "farah@example.uk",
}


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def run(lakehouse: Any, user: str, sql: str) -> list[Any] | LakegateError:
    """The governed rows, or the LakegateError; each checked for the user's hidden values."""
    try:
        rows = lakehouse.session(user).sql(sql).collect()
    except LakegateError as e:
        assert_message_clean(user, str(e))
        assert "\n" not in str(e).strip(), f"error is not one line: {e!r}"
        return e
    assert_no_leak(user, rows)
    return rows


def refused(lakehouse: Any, user: str, sql: str) -> str:
    """The one-line refusal of `sql` (failing the test if it ran or failed otherwise)."""
    out = run(lakehouse, user, sql)
    assert isinstance(out, Refused), f"expected a refusal, got {out!r}"
    return str(out)


def governed(lakehouse: Any, user: str, sql: str) -> list[tuple]:
    out = run(lakehouse, user, sql)
    assert isinstance(out, list), f"expected a governed result, got {out!r}"
    return [tuple(r) for r in out]


NEEDS_VARIANT = "needs Spark 4 (the VARIANT type); this Lakegate runs on Spark 3.5"
NEEDS_COLLATION = "needs Spark 4 (collations); this Lakegate runs on Spark 3.5"


# pipe syntax --------------------------------------------------------------------------------


def test_pipe_syntax_over_a_governed_table_sees_only_filtered_rows(lakehouse) -> None:
    rows = governed(
        lakehouse, "carol", "FROM main.sales.orders |> WHERE amount > 0 |> SELECT id, region"
    )
    assert {r[0] for r in rows} == CAROL_ORDERS and {r[1] for r in rows} == {"EMEA"}
    counts = "FROM main.sales.orders |> AGGREGATE count(*) AS n"
    assert governed(lakehouse, "carol", counts) == [(len(CAROL_ORDERS),)]
    assert governed(lakehouse, "alice", counts) == [(len(ALICE_ORDERS),)]
    joined = governed(
        lakehouse,
        "carol",
        "FROM main.sales.orders o |> JOIN main.sales.customers c ON o.customer_id = c.id "
        "|> SELECT o.id, c.id AS cid",
    )
    assert {r[0] for r in joined} <= CAROL_ORDERS and {r[1] for r in joined} <= CAROL_CUSTOMERS


def test_pipe_syntax_sees_masked_values_and_never_hidden_columns(lakehouse) -> None:
    rows = governed(
        lakehouse, "alice", "FROM main.sales.customers |> SELECT id, email |> WHERE id < 3"
    )
    assert sorted(rows) == [(1, sha(EMAILS[1])), (2, sha(EMAILS[2]))]
    lengths = "FROM main.sales.customers |> EXTEND length(email) AS n |> SELECT DISTINCT n"
    assert governed(lakehouse, "alice", lengths) == [(64,)]  # the hash's, not the address's
    denied = run(lakehouse, "alice", "FROM main.sales.customers |> SELECT ssn")
    assert isinstance(denied, AccessDenied)
    assert str(denied) == (
        "access denied: user alice may not read column ssn of table main.sales.customers"
    )


# each operator applies to the result before it (sqlglot would fold them into one SELECT)
PIPE_ORDER = [
    ("FROM main.sales.orders |> ORDER BY id |> LIMIT 1 |> WHERE id > 1", []),
    ("FROM main.sales.orders |> SELECT DISTINCT region", [("EMEA",)]),
    ("FROM main.sales.orders |> SELECT id |> ORDER BY id DESC |> LIMIT 2", [(8,), (4,)]),
    (
        "FROM main.sales.orders |> AGGREGATE count(*) AS n GROUP BY region |> WHERE n > 2",
        [("EMEA", 3)],
    ),
    ("FROM main.sales.orders |> AS o |> SELECT o.id |> WHERE id < 4", [(1,)]),
    ("TABLE main.sales.orders |> WHERE id = 4 |> SELECT region", [("EMEA",)]),
]


@pytest.mark.parametrize(("sql", "expected"), PIPE_ORDER)
def test_pipe_syntax_applies_each_operator_to_the_previous_result(
    lakehouse, locations, sql: str, expected: list[tuple]
) -> None:
    rows = governed(lakehouse, "carol", sql)
    assert rows == expected
    if SPARK4:  # Spark's own pipe syntax over carol's reference view answers the same
        view = oracle.VIEWS["carol"][("sales", "orders")].format(t=f"delta.`{locations['orders']}`")
        native = sql.replace("TABLE main", "FROM main", 1)  # TABLE takes a name only
        native = native.replace("main.sales.orders", f"({view}) AS orders", 1)
        reference = [tuple(r) for r in lakehouse.spark.sql(native).collect()]
        assert Counter(rows) == Counter(reference)


PIPE_REFUSED = [
    ("FROM main.sales.orders |> DROP amount", "pipe operator |> DROP is not governed by Lakegate"),
    (
        "FROM main.sales.orders |> SET amount = 0",
        "pipe operator |> SET is not governed by Lakegate",
    ),
    (
        "FROM main.sales.orders |> RENAME id AS x",
        "pipe operator |> RENAME is not governed by Lakegate",
    ),
    (
        "FROM main.sales.orders |> TABLESAMPLE (50 PERCENT)",
        "pipe operator |> TABLESAMPLE is not governed by Lakegate",
    ),
    (
        "FROM main.sales.orders |> PIVOT (sum(amount) FOR region IN ('EMEA'))",
        "pipe operator |> PIVOT is not governed by Lakegate",
    ),
    (
        "FROM main.sales.orders |> SELECT id WHERE amount > 0",
        "pipe operator |> SELECT takes only its own clause here",
    ),
    (
        "SELECT * FROM main.sales.customers WHERE id IN (FROM main.sales.orders |> SELECT id)",
        "pipe syntax (|>) inside parentheses is not governed by Lakegate; use it at the top "
        "level of a query",
    ),
    (
        "INSERT INTO main.sales.orders FROM main.sales.orders |> WHERE id = 1",
        "pipe syntax (|>) is governed after a query only; not after INSERT",
    ),
]


@pytest.mark.parametrize(("sql", "line"), PIPE_REFUSED)
def test_pipe_operators_lakegate_cannot_keep_are_refused_naming_the_operator(
    lakehouse, sql: str, line: str
) -> None:
    assert refused(lakehouse, "erin", sql) == line


# VARIANT --------------------------------------------------------------------------------


def test_variant_functions_over_a_masked_column_see_only_the_masked_value(lakehouse) -> None:
    sql = (
        "SELECT id, variant_get(parse_json(to_json(named_struct('e', email))), '$.e', "
        "'string') AS e FROM main.sales.customers"
    )
    if not SPARK4:
        assert refused(lakehouse, "alice", sql) == f"variant_get() {NEEDS_VARIANT}"
        return
    rows = governed(lakehouse, "alice", sql)
    assert sorted(rows) == sorted((i, sha(e)) for i, e in EMAILS.items())
    # the masked value is no JSON: try_parse_json sees the hash, never the address
    tried = governed(lakehouse, "alice", "SELECT try_parse_json(email) FROM main.sales.customers")
    assert tried == [(None,)] * len(EMAILS)
    hidden = run(
        lakehouse,
        "alice",
        "SELECT variant_get(parse_json(to_json(named_struct('s', ssn))), '$.s', 'string') "
        "FROM main.sales.customers",
    )
    assert isinstance(hidden, AccessDenied)
    assert str(hidden) == (
        "access denied: user alice may not read column ssn of table main.sales.customers"
    )


def test_variant_functions_see_only_filtered_rows(lakehouse) -> None:
    sql = (
        "SELECT id FROM main.sales.customers WHERE "
        "variant_get(parse_json(to_json(named_struct('c', country))), '$.c', 'string') "
        "IS NOT NULL"
    )
    if not SPARK4:
        assert refused(lakehouse, "carol", sql) == f"variant_get() {NEEDS_VARIANT}"
        return
    assert {r[0] for r in governed(lakehouse, "carol", sql)} == CAROL_CUSTOMERS


def test_parse_json_runs_as_written_never_as_its_argument(lakehouse) -> None:
    """sqlglot writes parse_json(x) as x for Spark; Lakegate keeps the call (or refuses)."""
    sql = "SELECT schema_of_variant(parse_json('{\"a\": 1}')) AS s"
    if not SPARK4:
        assert refused(lakehouse, "alice", sql) == f"schema_of_variant() {NEEDS_VARIANT}"
        assert refused(lakehouse, "alice", "SELECT parse_json('1')") == (
            f"parse_json() {NEEDS_VARIANT}"
        )
        return
    assert governed(lakehouse, "alice", sql) == [("OBJECT<a: BIGINT>",)]
    assert governed(lakehouse, "alice", "SELECT to_json(parse_json('{\"a\":1}'))") == [('{"a":1}',)]


def test_variant_type_is_governed_on_spark_4_and_refused_on_spark_35(lakehouse) -> None:
    sql = "SELECT CAST(NULL AS VARIANT) AS v"
    if SPARK4:
        assert governed(lakehouse, "alice", sql) == [(None,)]
    else:
        assert refused(lakehouse, "alice", sql) == f"the VARIANT type {NEEDS_VARIANT}"


VARIANT_PATHS = [
    "SELECT email:a FROM main.sales.customers",
    "SELECT email:a.b FROM main.sales.customers",
    "SELECT email:['a'] FROM main.sales.customers",
    "SELECT email:a::string FROM main.sales.customers",
    "SELECT parse_json(to_json(named_struct('e', email))):e FROM main.sales.customers",
    "SELECT id FROM main.sales.customers WHERE email:a IS NULL",
]


@pytest.mark.parametrize("sql", VARIANT_PATHS)
def test_variant_path_extraction_is_refused_naming_the_construct(lakehouse, sql: str) -> None:
    """sqlglot reads `v:a` as `v AS :a` (a harmless-looking alias) or not at all."""
    assert refused(lakehouse, "alice", sql) == (
        "variant path extraction (`expr:path`) is not governed by Lakegate; "
        "write variant_get(expr, '$.path', 'type')"
    )


# SQL UDFs -------------------------------------------------------------------------------

SQL_UDFS = [
    "CREATE FUNCTION main.sales.lg_up(x STRING) RETURNS STRING RETURN upper(x)",
    "CREATE TEMPORARY FUNCTION lg_up(x STRING) RETURNS STRING RETURN upper(x)",
    "CREATE OR REPLACE TEMPORARY FUNCTION lg_up(x STRING) RETURN upper(x)",
    "CREATE TEMPORARY FUNCTION lg_t() RETURNS TABLE (email STRING) "
    "RETURN SELECT email FROM main.sales.customers",
]


@pytest.mark.parametrize("sql", SQL_UDFS)
def test_sql_udf_definitions_are_refused_naming_the_construct(lakehouse, sql: str) -> None:
    assert refused(lakehouse, "erin", sql) == (
        "CREATE FUNCTION is not governed by Lakegate (views, functions and temporary objects "
        "are shared across users)"
    )


def test_calling_a_sql_udf_is_refused_even_when_one_exists_in_the_spark_session(
    lakehouse,
) -> None:
    """A function defined in the shared Spark session outside Lakegate is not a built-in."""
    spark = lakehouse.spark
    if SPARK4:
        spark.sql("CREATE OR REPLACE TEMPORARY FUNCTION lg_outside(x STRING) RETURN x")
    try:
        assert refused(
            lakehouse, "alice", "SELECT lg_outside(email) FROM main.sales.customers"
        ) == ("function lg_outside() is not a Spark built-in; refused in a statement")
        assert refused(lakehouse, "alice", "SELECT * FROM lg_outside('x')") == (
            "table-valued function lg_outside(...) is not governed"
        )
    finally:
        if SPARK4:
            spark.sql("DROP TEMPORARY FUNCTION IF EXISTS lg_outside")


# session variables ----------------------------------------------------------------------

VARIABLE_STATEMENTS = [
    ("DECLARE VARIABLE lg_v INT DEFAULT 1", "DECLARE VARIABLE"),
    ("DECLARE OR REPLACE lg_v STRING", "DECLARE VARIABLE"),
    ("SET VAR lg_v = 2", "SET VAR"),
    ("SET VARIABLE lg_v = (SELECT max(email) FROM main.sales.customers)", "SET VARIABLE"),
    ("SET VAR (lg_a, lg_b) = (SELECT 1, 2)", "SET VAR"),
    ("DROP TEMPORARY VARIABLE lg_v", "DROP TEMPORARY VARIABLE"),
]


@pytest.mark.parametrize(("sql", "construct"), VARIABLE_STATEMENTS)
def test_session_variables_are_refused_naming_the_construct(
    lakehouse, sql: str, construct: str
) -> None:
    assert refused(lakehouse, "alice", sql) == (
        f"session variables ({construct}) are not governed by Lakegate: a variable lives in "
        "the shared Spark session; inline the value"
    )


def test_a_session_variable_declared_outside_lakegate_is_never_read(lakehouse) -> None:
    """Spark 4 resolves `session.v` (or a bare `v` no column matches) to a variable of the
    shared session; Lakegate drops any it finds and refuses the statement."""
    spark = lakehouse.spark
    if not SPARK4:  # Spark 3.5 has no session variables: nothing to read
        with pytest.raises(Exception, match="PARSE_SYNTAX_ERROR"):
            spark.sql("DECLARE VARIABLE lg_secret STRING DEFAULT 'anna@example.de'")
        return
    spark.sql("DECLARE OR REPLACE VARIABLE lg_secret STRING DEFAULT 'anna@example.de'")
    try:
        for sql in ("SELECT session.lg_secret", "SELECT lg_secret FROM main.sales.orders"):
            assert refused(lakehouse, "alice", sql) == (
                "session variables were declared in the Spark session outside Lakegate; "
                "Lakegate governs none (they are dropped); statement refused"
            )
            spark.sql("DECLARE OR REPLACE VARIABLE lg_secret STRING DEFAULT 'anna@example.de'")
    finally:
        spark.sql("DROP TEMPORARY VARIABLE IF EXISTS lg_secret")
    assert governed(lakehouse, "alice", "SELECT count(*) FROM main.sales.orders") == [
        (len(ALICE_ORDERS),)
    ]


# IDENTIFIER(), parameter markers, EXECUTE IMMEDIATE, CALL, scripting ------------------------

IDENTIFIER_CLAUSES = [
    "SELECT * FROM IDENTIFIER('main.sales.customers')",
    "SELECT IDENTIFIER('email') FROM main.sales.customers",
    "SELECT * FROM main.sales.customers WHERE IDENTIFIER('ssn') IS NOT NULL",
]


@pytest.mark.parametrize("sql", IDENTIFIER_CLAUSES)
def test_identifier_clause_is_refused_naming_the_construct(lakehouse, sql: str) -> None:
    assert refused(lakehouse, "alice", sql) == (
        "IDENTIFIER(...) is not governed by Lakegate: the name it makes is only known when "
        "the statement runs; write the name itself"
    )


MARKERS = [
    ("SELECT * FROM main.sales.orders WHERE id = :id", ":id"),
    ("SELECT * FROM main.sales.orders WHERE id = ?", "?"),
    ("SELECT * FROM main.sales.orders WHERE id = :`id`", ":id"),
    ("SELECT email FROM main.sales.customers LIMIT ?", "?"),
]


@pytest.mark.parametrize(("sql", "marker"), MARKERS)
def test_named_and_positional_parameter_markers_are_refused_naming_the_marker(
    lakehouse, sql: str, marker: str
) -> None:
    assert refused(lakehouse, "alice", sql) == (
        f"parameters and variables ({marker}) in a statement are not governed; inline the value"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "EXECUTE IMMEDIATE 'SELECT * FROM main.sales.customers'",
        "EXECUTE IMMEDIATE 'SELECT ssn FROM main.sales.customers WHERE id = ?' USING 1",
        "execute immediate 'SELECT 1' INTO lg_v",
    ],
)
def test_execute_immediate_is_refused_naming_the_construct(lakehouse, sql: str) -> None:
    assert refused(lakehouse, "alice", sql) == (
        "EXECUTE IMMEDIATE is not governed by Lakegate: the statement it runs is only known "
        "when it runs; send that statement itself"
    )


@pytest.mark.parametrize("sql", ["CALL main.system.rollback(1)", "call sys.lg_proc()"])
def test_call_is_refused_naming_the_construct(lakehouse, sql: str) -> None:
    assert refused(lakehouse, "erin", sql) == "CALL (stored procedures) is not governed by Lakegate"


@pytest.mark.parametrize(
    "sql",
    [
        "BEGIN SELECT * FROM main.sales.customers; END",
        "BEGIN DECLARE x INT DEFAULT 1; SELECT x; END",
        "lbl: BEGIN SELECT ssn FROM main.sales.customers; END lbl",
        "BEGIN IF 1 = 1 THEN SELECT 1; END IF; END",
    ],
)
def test_sql_scripting_is_refused_naming_the_construct(lakehouse, sql: str) -> None:
    assert refused(lakehouse, "alice", sql) == (
        "SQL scripting (BEGIN ... END compound statements) is not governed by Lakegate; "
        "send one statement at a time"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT WITH SCHEMA EVOLUTION INTO main.sales.orders SELECT * FROM main.sales.orders",
        "MERGE WITH SCHEMA EVOLUTION INTO main.sales.orders t USING main.sales.orders s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET *",
    ],
)
def test_with_schema_evolution_is_refused_naming_the_construct(lakehouse, sql: str) -> None:
    assert refused(lakehouse, "erin", sql) == (
        "WITH SCHEMA EVOLUTION is not governed by Lakegate: a write may not change a governed "
        "table's columns; ALTER TABLE first"
    )


# collations -----------------------------------------------------------------------------


def test_collations_in_expressions_apply_to_masked_values_and_filtered_rows(lakehouse) -> None:
    cases = {
        "SELECT DISTINCT length(email COLLATE UTF8_LCASE) FROM main.sales.customers": [(64,)],
        "SELECT DISTINCT length(collate(email, 'UTF8_LCASE')) FROM main.sales.customers": [(64,)],
        "SELECT count(*) FROM main.sales.orders WHERE region COLLATE UTF8_LCASE = 'emea'": [
            (len(CAROL_ORDERS),)
        ],
        "SELECT DISTINCT collation(region COLLATE UNICODE_CI) FROM main.sales.orders": [
            ("SYSTEM.BUILTIN.UNICODE_CI",)
        ],
    }
    for sql, expected in cases.items():
        if SPARK4:
            assert governed(lakehouse, "carol", sql) == expected, sql
        else:
            line = refused(lakehouse, "carol", sql)
            assert line in (f"COLLATE {NEEDS_COLLATION}", f"collation() {NEEDS_COLLATION}"), line


@pytest.mark.parametrize(
    ("sql", "line"),
    [
        (
            "CREATE TABLE main.sales.lg_coll (a STRING COLLATE UTF8_LCASE)",
            "column constraint 'COLLATE UTF8_LCASE' is not governed",
        ),
        (
            "CREATE TABLE main.sales.lg_coll (a STRING) DEFAULT COLLATION UTF8_LCASE",
            "default collations (DEFAULT COLLATION) are not governed by Lakegate",
        ),
    ],
)
def test_collations_in_table_definitions_are_refused_naming_the_construct(
    lakehouse, sql: str, line: str
) -> None:
    assert refused(lakehouse, "erin", sql) == line


# LATERAL and table-valued functions ---------------------------------------------------------


def test_lateral_subqueries_see_only_the_governed_view(lakehouse) -> None:
    rows = governed(
        lakehouse,
        "carol",
        "SELECT o.id, x.twice FROM main.sales.orders o, LATERAL (SELECT o.amount * 2 AS twice) x",
    )
    assert {r[0] for r in rows} == CAROL_ORDERS
    per_customer = governed(
        lakehouse,
        "carol",
        "SELECT c.id, x.n FROM main.sales.customers c JOIN LATERAL "
        "(SELECT count(*) AS n FROM main.sales.orders o WHERE o.customer_id = c.id) x",
    )
    assert {r[0] for r in per_customer} == CAROL_CUSTOMERS
    assert sum(r[1] for r in per_customer) <= len(CAROL_ORDERS)
    exploded = governed(
        lakehouse,
        "carol",
        "SELECT o.id, e.col FROM main.sales.orders o, LATERAL explode(array(o.id)) e",
    )
    assert sorted(exploded) == sorted((i, i) for i in CAROL_ORDERS)
    hidden = run(
        lakehouse, "alice", "SELECT x.s FROM main.sales.customers c, LATERAL (SELECT c.ssn AS s) x"
    )
    assert isinstance(hidden, AccessDenied)
    assert str(hidden) == (
        "access denied: user alice may not read column ssn of table main.sales.customers"
    )


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ("SELECT * FROM variant_explode(parse_json('[1, 2]'))", "variant_explode"),
        ("SELECT * FROM variant_explode_outer(parse_json('[1]'))", "variant_explode_outer"),
        (
            "SELECT c.id, v.* FROM main.sales.customers c, "
            "LATERAL variant_explode(parse_json(to_json(named_struct('e', c.email)))) v",
            "variant_explode",
        ),
        ("SELECT * FROM sql_keywords()", "sql_keywords"),
        ("SELECT * FROM collations()", "collations"),
        ("SELECT * FROM python_worker_logs()", "python_worker_logs"),
    ],
)
def test_table_valued_functions_spark_4_added_are_refused_naming_the_function(
    lakehouse, sql: str, name: str
) -> None:
    assert refused(lakehouse, "alice", sql) == f"table-valued function {name}(...) is not governed"
