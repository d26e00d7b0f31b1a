"""Functions are Spark built-ins of the running line, each reviewed before it is allowed
(docs/spark4-syntax.md, "Functions Spark 4 added").

The built-in list is generated from Spark's FunctionRegistry per line and checked here
against the running Spark. A function Spark 4 added runs over the governed view on Spark 4
(row filters and masks apply), is refused by name on Spark 3.5 before Spark sees it, and a
new function that would fail with a row's value in its message, read a file or expose the
session is refused on both lines with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from governance.spark_line import LINE
from governance.sql import constructs
from governance.sql.constructs import DENIED_FUNCTIONS, builtin_names

from .test_spark4_syntax import CAROL_ORDERS, EMAILS, SPARK4, governed, refused, sha

CAROL_AMOUNTS = (120.00, 42.00, 64.10)  # orders 1, 4 and 8


def needs_spark_4(name: str) -> str:
    return f"function {name}() needs Spark 4; this Lakegate runs on Spark 3.5"


def registry_names(spark: Any) -> set[str]:
    """The running Spark's FunctionRegistry.builtin, as the lists were generated."""
    registry = spark._jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry
    listed = registry.builtin().listFunction()
    return {listed.apply(i).funcName().lower() for i in range(listed.size())}


def test_builtin_function_list_is_the_running_sparks_function_registry(spark) -> None:
    listing = Path(constructs.__file__).parent / LINE.builtin_functions
    assert listing.read_text().splitlines()[0] == (
        f"# Spark {spark.version} built-in function names (FunctionRegistry.builtin); "
        "regenerate on upgrade"
    )
    assert registry_names(spark) == builtin_names(LINE.builtin_functions)
    assert registry_names(spark) == constructs.SPARK_BUILTINS


def test_spark_4_only_functions_are_those_this_line_lacks(spark) -> None:
    here = registry_names(spark)
    if SPARK4:
        assert not constructs.NEEDS_SPARK_4
        return
    assert not constructs.NEEDS_SPARK_4 & here
    assert {"dayname", "try_to_time", "group_concat", "zeroifnull"} <= constructs.NEEDS_SPARK_4


def test_spark_4_function_sees_only_filtered_rows(lakehouse) -> None:
    sql = (
        "SELECT id, dayname(order_date) FROM main.sales.orders "
        "WHERE zeroifnull(amount) > 0 ORDER BY id"
    )
    if not SPARK4:
        assert refused(lakehouse, "carol", sql) == needs_spark_4("dayname")
        return
    assert governed(lakehouse, "carol", sql) == [(1, "Mon"), (4, "Sat"), (8, "Thu")]
    assert {r[0] for r in governed(lakehouse, "carol", sql)} == CAROL_ORDERS


def test_spark_4_aggregate_concatenates_only_masked_values_of_filtered_rows(lakehouse) -> None:
    sql = (
        "SELECT string_agg(email, '|') WITHIN GROUP (ORDER BY id) FROM main.sales.customers "
        "WHERE id < 5"
    )
    if not SPARK4:
        assert refused(lakehouse, "carol", sql) == needs_spark_4("listagg")
        return
    assert governed(lakehouse, "carol", sql) == [(f"{sha(EMAILS[1])}|{sha(EMAILS[4])}",)]


def test_listagg_without_a_delimiter_concatenates_without_one(lakehouse) -> None:
    """sqlglot writes listagg(x) as LISTAGG(x, ','); Spark's default delimiter is NULL."""
    sql = "SELECT listagg(region) FROM main.sales.orders"
    if not SPARK4:
        assert refused(lakehouse, "carol", sql) == needs_spark_4("listagg")
        return
    assert governed(lakehouse, "carol", sql) == [("EMEA" * len(CAROL_ORDERS),)]


def test_percentile_cont_within_group_is_exact_never_approximated(lakehouse) -> None:
    """sqlglot writes percentile_cont/_disc(p) WITHIN GROUP as PERCENTILE_APPROX(x, p);
    the call runs as written on both lines (3.5 has it as grammar)."""
    sql = (
        "SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY amount), "
        "percentile_disc(0.25) WITHIN GROUP (ORDER BY amount DESC) FROM main.sales.orders"
    )
    low, middle, high = sorted(CAROL_AMOUNTS)
    ((cont, disc),) = governed(lakehouse, "carol", sql)
    assert float(cont) == low + (middle - low) / 2
    assert float(disc) == high


def test_session_user_is_the_governed_user_on_both_lines(lakehouse) -> None:
    assert governed(lakehouse, "carol", "SELECT session_user(), session_user") == [
        ("carol", "carol")
    ]


# each refused Spark 4 function, called over a governed column: (statement, name, reason)
REFUSED_SPARK_4 = [
    ("SELECT validate_utf8(name) FROM main.sales.customers", "validate_utf8", "error"),
    ("SELECT to_time(name, 'HH:mm') FROM main.sales.customers", "to_time", "error"),
    ("SELECT make_time(id, 0, 0) FROM main.sales.orders", "make_time", "error"),
    ("SELECT time_from_seconds(amount) FROM main.sales.orders", "time_from_seconds", "error"),
    ("SELECT time_from_millis(id) FROM main.sales.orders", "time_from_millis", "error"),
    ("SELECT time_from_micros(id) FROM main.sales.orders", "time_from_micros", "error"),
    ("SELECT time_trunc(region, current_time()) FROM main.sales.orders", "time_trunc", "error"),
    (
        "SELECT time_diff(region, current_time(), current_time()) FROM main.sales.orders",
        "time_diff",
        "error",
    ),
    ("SELECT st_geomfromwkb(unhex(name)) FROM main.sales.customers", "st_geomfromwkb", "error"),
    ("SELECT st_geogfromwkb(unhex(name)) FROM main.sales.customers", "st_geogfromwkb", "error"),
    ("SELECT st_setsrid(NULL, id) IS NULL FROM main.sales.orders", "st_setsrid", "error"),
    (
        "SELECT vector_cosine_similarity(array(1.0F), array(CAST(amount AS FLOAT))) "
        "FROM main.sales.orders",
        "vector_cosine_similarity",
        "error",
    ),
    (
        "SELECT vector_inner_product(array(1.0F), array(1.0F, 2.0F)) FROM main.sales.orders",
        "vector_inner_product",
        "error",
    ),
    (
        "SELECT vector_l2_distance(array(1.0F), array(1.0F)) FROM main.sales.orders",
        "vector_l2_distance",
        "error",
    ),
    (
        "SELECT vector_norm(array(1.0F), CAST(amount AS FLOAT)) FROM main.sales.orders",
        "vector_norm",
        "error",
    ),
    (
        "SELECT vector_normalize(array(1.0F), 2.0F) FROM main.sales.orders",
        "vector_normalize",
        "error",
    ),
    ("SELECT vector_avg(array(CAST(id AS FLOAT))) FROM main.sales.orders", "vector_avg", "error"),
    ("SELECT vector_sum(array(CAST(id AS FLOAT))) FROM main.sales.orders", "vector_sum", "error"),
    (
        "SELECT from_protobuf(unhex(name), 'M', '/etc/descriptor.desc') FROM main.sales.customers",
        "from_protobuf",
        "files",
    ),
    (
        "SELECT to_protobuf(named_struct('n', name), 'M', '/etc/descriptor.desc') "
        "FROM main.sales.customers",
        "to_protobuf",
        "files",
    ),
    ("SELECT current_path() FROM main.sales.orders", "current_path", "session"),
]
REASONS = {
    "error": "can fail with a value in its error message, a channel for hidden values",
    "files": "reads files or file metadata instead of governed values",
    "session": "depends on the Spark session's namespace, which the layer does not govern",
}


@pytest.mark.parametrize(("sql", "name", "reason"), REFUSED_SPARK_4, ids=lambda v: str(v)[:40])
def test_spark_4_functions_failing_with_values_reading_files_or_the_session_are_refused(
    lakehouse, sql: str, name: str, reason: str
) -> None:
    assert DENIED_FUNCTIONS[name] == REASONS[reason]
    assert refused(lakehouse, "carol", sql) == f"function {name}() is refused in a statement"


# the forms that answer NULL instead of failing: governed on Spark 4 (statement, answer)
TRY_FORMS = [
    ("SELECT try_validate_utf8(CAST(X'C328' AS STRING))", "try_validate_utf8", None),
    ("SELECT try_url_decode('%zz')", "try_url_decode", None),
    ("SELECT try_to_date(region, 'yyyy') FROM main.sales.orders LIMIT 1", "try_to_date", None),
    ("SELECT try_mod(amount, 0) FROM main.sales.orders LIMIT 1", "try_mod", None),
]


@pytest.mark.parametrize(("sql", "name", "answer"), TRY_FORMS, ids=lambda v: str(v)[:40])
def test_try_forms_of_spark_4_functions_answer_null_instead_of_failing(
    lakehouse, sql: str, name: str, answer: None
) -> None:
    if not SPARK4 and name in constructs.NEEDS_SPARK_4:
        assert refused(lakehouse, "carol", sql) == needs_spark_4(name)
        return
    assert governed(lakehouse, "carol", sql) == [(answer,)]


# harmless functions Spark 4 added: (statement, name, carol's answer on Spark 4)
SPARK_4_ONLY = [
    (
        "SELECT dayname(order_date) FROM main.sales.orders ORDER BY id",
        "dayname",
        [("Mon",), ("Sat",), ("Thu",)],
    ),
    (
        "SELECT nullifzero(id - 1) FROM main.sales.orders ORDER BY id",
        "nullifzero",
        [(None,), (3,), (7,)],
    ),
    ("SELECT randstr(5, 0), uniform(1, 10, 0)", "randstr", [("ceV0P", 7)]),
    (
        "SELECT kll_sketch_get_n_bigint(kll_sketch_agg_bigint(id)) FROM main.sales.orders",
        "kll_sketch_get_n_bigint",
        [(len(CAROL_ORDERS),)],
    ),
]


@pytest.mark.parametrize(("sql", "name", "answer"), SPARK_4_ONLY, ids=lambda v: str(v)[:40])
def test_spark_4_only_functions_run_on_spark_4_and_are_refused_by_name_on_spark_35(
    lakehouse, sql: str, name: str, answer: list[tuple]
) -> None:
    if SPARK4:
        assert governed(lakehouse, "carol", sql) == answer
        return
    assert refused(lakehouse, "carol", sql) == needs_spark_4(name)
