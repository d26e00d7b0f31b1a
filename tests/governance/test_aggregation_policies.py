"""Aggregation policies (issue 40): aggregate-only tables, minimum group size, and the
adversarial suite — one test per trick, each a table of query -> refusal reason or the exact
rows, hand-computed from the data below.

`m.hr.pay` is aggregate-only (min_group_size 3, identifying columns id and name) for
group:analysts (ana: suppress) and for rex (refuse); admin reads it as is. Data:

    dept  salaries          cities
    eng   10 20 30 40 50    a a a b b
    ops   5 6 7             a b b
    ceo   1000              c
"""

from __future__ import annotations

import pytest

from cli import main
from governance import AccessDenied, Refused
from governance.policy.loader import PolicyError, load_policy_text

POLICIES = """
groups:
  admins: [admin]
  analysts: [ana, rex]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: analysts-read
    principals: [group:analysts]
    privileges: [select]
    on: m.hr.*
  - id: ana-writes
    principals: [ana]
    privileges: [create, modify]
    on: m.hr.*
aggregation_policies:
  - id: pay-k3
    on: m.hr.pay
    principals: [group:analysts]
    except: [rex]
    min_group_size: 3
    on_small_group: suppress
    identifying_columns: [id, name]
  - id: pay-k3-refuse
    on: m.hr.pay
    principals: [rex]
    min_group_size: 3
    on_small_group: refuse
    identifying_columns: [id, name]
"""
PAY = (
    "(1, 'p1', 'eng', 10, 'a'), (2, 'p2', 'eng', 20, 'a'), (3, 'p3', 'eng', 30, 'a'), "
    "(4, 'p4', 'eng', 40, 'b'), (5, 'p5', 'eng', 50, 'b'), "
    "(6, 'p6', 'ops', 5, 'a'), (7, 'p7', 'ops', 6, 'b'), (8, 'p8', 'ops', 7, 'b'), "
    "(9, 'p9', 'ceo', 1000, 'c')"
)


@pytest.fixture(scope="module")
def lg(make_lakegate):
    return make_lakegate(
        "aggpol",
        POLICIES,
        [
            "CREATE CATALOG m",
            "CREATE SCHEMA m.hr",
            "CREATE TABLE m.hr.pay (id INT, name STRING, dept STRING, salary INT, city STRING)",
            f"INSERT INTO m.hr.pay VALUES {PAY}",
            "CREATE TABLE m.hr.depts (dept STRING, floor INT)",
            "INSERT INTO m.hr.depts VALUES ('eng', 1), ('ops', 2), ('ceo', 3)",
            # five badges for the one ceo row: a join that multiplies it past 3
            "CREATE TABLE m.hr.badges (dept STRING, badge INT)",
            "INSERT INTO m.hr.badges VALUES ('ceo', 1), ('ceo', 2), ('ceo', 3), ('ceo', 4), "
            "('ceo', 5), ('eng', 1)",
        ],
    )


def rows(lg, sql: str, user: str = "ana") -> list[tuple]:
    return sorted((tuple(r) for r in lg.session(user).sql(sql).collect()), key=repr)


def refused(lg, sql: str, reason: str, user: str = "ana") -> None:
    with pytest.raises(Refused, match=reason):
        lg.session(user).sql(sql).collect()


# ---- answers: what an aggregate-only user gets, against hand-computed rows ----------

ANSWERS = [
    # the small ceo group (1 row) is suppressed, the others are exact
    (
        "SELECT dept, count(*), sum(salary) FROM m.hr.pay GROUP BY dept",
        [("eng", 5, 150), ("ops", 3, 18)],
    ),
    ("SELECT dept, avg(salary) AS a FROM m.hr.pay GROUP BY 1", [("eng", 30.0), ("ops", 6.0)]),
    ("SELECT count(*) FROM m.hr.pay", [(9,)]),
    (
        "SELECT upper(dept) AS d, count(DISTINCT city) FROM m.hr.pay GROUP BY d",
        [("ENG", 2), ("OPS", 2)],
    ),
    # groups of (dept, city): eng/a 3 rows survives; eng/b 2, ops/a 1, ops/b 2, ceo/c 1 do not
    ("SELECT dept, city, count(*) FROM m.hr.pay GROUP BY dept, city", [("eng", "a", 3)]),
    # a global aggregate over fewer than 3 rows is no row at all
    ("SELECT sum(salary) FROM m.hr.pay WHERE dept = 'ceo'", []),
    # count of an identifying column is allowed
    ("SELECT dept, count(DISTINCT id) FROM m.hr.pay GROUP BY dept", [("eng", 5), ("ops", 3)]),
    # re-aggregating safe groups is safe
    ("SELECT max(n) FROM (SELECT dept, count(*) AS n FROM m.hr.pay GROUP BY dept) t", [(5,)]),
    # HAVING and ORDER BY name outputs by alias
    (
        "SELECT dept, count(*) AS n FROM m.hr.pay GROUP BY dept HAVING n > 3 ORDER BY n DESC",
        [("eng", 5)],
    ),
    (
        "WITH g AS (SELECT dept, sum(salary) AS s FROM m.hr.pay GROUP BY dept) "
        "SELECT s FROM g ORDER BY s",
        [(18,), (150,)],
    ),
]


@pytest.mark.parametrize(("sql", "expected"), ANSWERS)
def test_aggregate_only_user_gets_groups_of_at_least_min_group_size(
    lg, sql: str, expected: list[tuple]
) -> None:
    assert rows(lg, sql) == sorted(expected, key=repr)


def test_user_outside_the_policy_reads_rows_as_usual(lg) -> None:
    assert len(rows(lg, "SELECT * FROM m.hr.pay", user="admin")) == 9


# ---- the adversarial suite: one trick per test ----------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM m.hr.pay",
        "SELECT salary FROM m.hr.pay",
        "SELECT DISTINCT dept FROM m.hr.pay",
        "SELECT dept FROM m.hr.pay ORDER BY dept LIMIT 1",
    ],
)
def test_rows_without_aggregation_are_refused(lg, sql: str) -> None:
    refused(lg, sql, "pay-k3: .* must aggregate it")


def test_group_by_a_unique_key_yields_only_suppressed_groups(lg) -> None:
    """Every group has one row: all are below 3, so nothing comes back."""
    assert rows(lg, "SELECT salary, count(*) FROM m.hr.pay GROUP BY salary") == []


def test_having_count_at_least_one_cannot_weaken_the_guard(lg) -> None:
    sql = "SELECT dept, sum(salary) FROM m.hr.pay GROUP BY dept HAVING count(*) >= 1"
    assert rows(lg, sql) == [("eng", 150), ("ops", 18)]
    sql = "SELECT dept, sum(salary) FROM m.hr.pay GROUP BY dept HAVING count(*) < 3"
    assert rows(lg, sql) == []


def test_non_aggregated_protected_column_is_refused(lg) -> None:
    refused(
        lg,
        "SELECT dept, city, count(*) FROM m.hr.pay GROUP BY dept",
        "column city is neither aggregated nor a GROUP BY key",
    )


@pytest.mark.parametrize(
    ("sql", "function"),
    [
        ("SELECT dept, max(salary) FROM m.hr.pay GROUP BY dept", "max"),
        ("SELECT dept, min(salary) FROM m.hr.pay GROUP BY dept", "min"),
        ("SELECT dept, first(city) FROM m.hr.pay GROUP BY dept", "first"),
        ("SELECT dept, last(city) FROM m.hr.pay GROUP BY dept", "last"),
        ("SELECT dept, any_value(city) FROM m.hr.pay GROUP BY dept", "any_value"),
        ("SELECT dept, collect_list(salary) FROM m.hr.pay GROUP BY dept", "array_agg"),
        ("SELECT dept, collect_set(city) FROM m.hr.pay GROUP BY dept", "array_unique_agg"),
        ("SELECT dept, percentile(salary, 0.5) FROM m.hr.pay GROUP BY dept", "quantile"),
        ("SELECT dept, max_by(city, salary) FROM m.hr.pay GROUP BY dept", "arg_max"),
        ("SELECT dept FROM m.hr.pay GROUP BY dept HAVING max(salary) > 900", "max"),
    ],
)
def test_aggregates_exposing_one_rows_value_are_refused(lg, sql: str, function: str) -> None:
    refused(lg, sql, f"aggregate {function} is not allowed on its columns")


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        # a conditional isolates one row inside a group of 3+
        (
            "SELECT dept, sum(CASE WHEN city = 'c' THEN salary END) FROM m.hr.pay GROUP BY dept",
            "case in the argument of sum",
        ),
        (
            "SELECT dept, sum(if(city = 'a', salary, 0)) FROM m.hr.pay GROUP BY dept",
            "in the argument of sum",
        ),
        (
            "SELECT dept, sum(salary) FILTER (WHERE city = 'b') FROM m.hr.pay GROUP BY dept",
            "FILTER clause is refused",
        ),
        # the known differencing shape: a filter on an identifying column
        ("SELECT sum(salary) FROM m.hr.pay WHERE id <> 9", "identifying column id"),
        ("SELECT sum(salary) FROM m.hr.pay WHERE name NOT IN ('p9')", "identifying column name"),
        ("SELECT dept, count(*) FROM m.hr.pay GROUP BY dept, id", "identifying column id"),
        # subtotals difference a suppressed group out of the large ones
        ("SELECT dept, sum(salary) FROM m.hr.pay GROUP BY ROLLUP(dept)", "ROLLUP"),
        ("SELECT dept, city, count(*) FROM m.hr.pay GROUP BY CUBE(dept, city)", "ROLLUP"),
        ("SELECT dept, count(*) FROM m.hr.pay GROUP BY GROUPING SETS ((dept), ())", "ROLLUP"),
    ],
)
def test_differencing_shapes_are_refused(lg, sql: str, reason: str) -> None:
    refused(lg, sql, reason)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT dept, salary, sum(salary) OVER (PARTITION BY dept) FROM m.hr.pay",
        "SELECT dept, count(*) OVER () FROM m.hr.pay",
        "SELECT dept, sum(count(*)) OVER () FROM m.hr.pay GROUP BY dept",
        "SELECT dept, row_number() OVER (ORDER BY dept) FROM m.hr.pay GROUP BY dept",
    ],
)
def test_window_functions_over_protected_rows_are_refused(lg, sql: str) -> None:
    refused(lg, sql, "window functions are refused|must aggregate it")


@pytest.mark.parametrize(
    "sql",
    [
        # a subquery that re-exposes rows, then aggregates outside
        "SELECT dept, count(*) FROM (SELECT * FROM m.hr.pay) t GROUP BY dept",
        "WITH r AS (SELECT dept, salary FROM m.hr.pay) SELECT dept, sum(salary) FROM r "
        "GROUP BY dept",
        # membership through a non-aggregating subquery
        "SELECT count(*) FROM m.hr.depts WHERE dept IN (SELECT dept FROM m.hr.pay "
        "WHERE salary > 900)",
        "SELECT floor FROM m.hr.depts d WHERE EXISTS (SELECT 1 FROM m.hr.pay p "
        "WHERE p.dept = d.dept)",
    ],
)
def test_subqueries_that_expose_rows_are_refused(lg, sql: str) -> None:
    refused(lg, sql, "must aggregate it")


def test_nested_aggregation_cannot_see_small_inner_groups(lg) -> None:
    """The inner groups are guarded: the 1-row ceo group never reaches the outer query."""
    sql = (
        "SELECT count(*), sum(s) FROM (SELECT dept, sum(salary) AS s FROM m.hr.pay GROUP BY dept) t"
    )
    assert rows(lg, sql) == [(2, 168)]


def test_join_counts_protected_rows_not_joined_rows(lg) -> None:
    """Five badges multiply the one ceo row to five joined rows: still one pay row."""
    sql = (
        "SELECT p.dept, count(*) FROM m.hr.pay p JOIN m.hr.badges b ON p.dept = b.dept "
        "GROUP BY p.dept"
    )
    assert rows(lg, sql) == [("eng", 5)]
    sql = (
        "SELECT d.floor, count(*), sum(p.salary) FROM m.hr.pay p JOIN m.hr.depts d "
        "ON p.dept = d.dept GROUP BY d.floor"
    )
    assert rows(lg, sql) == [(1, 5, 150), (2, 3, 18)]


def test_self_join_counts_each_protected_read(lg) -> None:
    """b is narrowed to the one ceo row: each group has 1 row of b, so all are suppressed."""
    sql = (
        "SELECT a.dept, count(*) FROM m.hr.pay a JOIN m.hr.pay b ON b.dept = 'ceo' GROUP BY a.dept"
    )
    assert rows(lg, sql) == []


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (
            "SELECT d.dept, count(*) FROM m.hr.depts d LEFT JOIN m.hr.pay p ON p.dept = d.dept "
            "GROUP BY d.dept",
            "LEFT JOIN with it on the nullable side",
        ),
        (
            "SELECT d.dept, count(*) FROM m.hr.pay p FULL JOIN m.hr.depts d ON p.dept = d.dept "
            "GROUP BY d.dept",
            "FULL JOIN is refused",
        ),
    ],
)
def test_outer_joins_that_null_extend_protected_rows_are_refused(lg, sql: str, reason: str) -> None:
    refused(lg, sql, reason)


def test_on_small_group_refuse_fails_the_statement_with_one_line(lg) -> None:
    sql = "SELECT dept, count(*) FROM m.hr.pay GROUP BY dept"
    with pytest.raises(AccessDenied, match=r"^refused: a group of the result has fewer rows"):
        lg.session("rex").sql(sql).collect()
    ok = "SELECT dept, count(*) FROM m.hr.pay WHERE dept <> 'ceo' GROUP BY dept"
    assert rows(lg, ok, user="rex") == [("eng", 5), ("ops", 3)]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE m.hr.copy AS SELECT dept, count(*) AS n FROM m.hr.pay GROUP BY dept",
        "INSERT INTO m.hr.depts SELECT dept, count(*) FROM m.hr.pay GROUP BY dept",
    ],
)
def test_writes_reading_an_aggregate_only_table_are_refused(lg, sql: str) -> None:
    refused(lg, sql, "only a query may read it")


def test_refusals_are_audited_with_the_reason(lg) -> None:
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size
    with pytest.raises(Refused):
        lg.session("ana").sql("SELECT salary FROM m.hr.pay").collect()
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("utf-8")
    assert "aggregation policy pay-k3" in text
    assert "must aggregate it" in text


# ---- the policy format ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("{id: a, on: m.hr.pay, min_group_size: 1}", "bad-min-group-size"),
        ("{id: a, on: m.hr.pay, min_group_size: many}", "wrong-type"),
        ("{id: a, on: m.hr.pay, min_group_size: 3, on_small_group: hide}", "unknown-action"),
        ("{id: a, on: m.hr.pay}", "missing"),
        ("{id: a, on: m.hr.pay, min_group_size: 3, size: 4}", "unknown-key"),
    ],
)
def test_malformed_aggregation_policies_are_reported(entry: str, problem: str) -> None:
    with pytest.raises(PolicyError) as exc:
        load_policy_text({"p.yaml": f"aggregation_policies:\n  - {entry}\n"})
    assert problem in str(exc.value)


def test_a_well_formed_aggregation_policy_loads() -> None:
    ps = load_policy_text(
        {
            "p.yaml": "aggregation_policies:\n"
            "  - {id: a, on: m.hr.pay, min_group_size: 4, on_small_group: refuse,"
            " identifying_columns: [ID]}\n"
        }
    )
    (policy,) = ps.aggregation_policies
    assert (policy.min_group_size, policy.on_small_group, policy.identifying_columns) == (
        4,
        "refuse",
        ("id",),
    )


@pytest.mark.parametrize(
    ("user", "line"),
    [
        (
            "ana",
            "  aggregate  : aggregate-only, groups of at least 3 rows, smaller groups: suppress "
            "(policy pay-k3); identifying columns id, name",
        ),
        (
            "rex",
            "  aggregate  : aggregate-only, groups of at least 3 rows, smaller groups: refuse "
            "(policy pay-k3-refuse); identifying columns id, name",
        ),
        ("admin", None),
    ],
)
def test_policy_explain_shows_who_is_aggregate_only(tmp_path, capsys, user, line) -> None:
    (tmp_path / "p.yaml").write_text(POLICIES)
    assert main(["policy", "explain", "-u", user, "--dir", str(tmp_path), "m.hr.pay"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "aggregate  :" in ln]
    assert lines == ([line] if line else [])


# `tags:` read the tags masks read: the policy files', the Delta table's and the governed
# state. Here the tag is on the Delta table only (a table property), none in the YAML.
CATALOG_TAGGED = """
groups:
  admins: [admin]
governed_tags:
  sensitive: {}
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: admin-tags, principals: [admin], privileges: [apply_tag], on: "*.*.*"}
  - {id: ana-reads, principals: [ana], privileges: [select], on: t.hr.*}
aggregation_policies:
  - id: sensitive-k3
    on: t.hr.*
    tags: [sensitive]
    principals: [ana]
    min_group_size: 3
"""


def test_tags_match_catalog_and_delta_column_tags(make_lakegate) -> None:
    lg = make_lakegate(
        "aggpol_tags",
        CATALOG_TAGGED,
        [
            "CREATE CATALOG t",
            "CREATE SCHEMA t.hr",
            "CREATE TABLE t.hr.pay (dept STRING, salary INT)",
            "INSERT INTO t.hr.pay VALUES ('eng', 1), ('eng', 2), ('eng', 3), ('ops', 4)",
            "ALTER TABLE t.hr.pay SET TBLPROPERTIES ('lakegate.tags.salary' = 'sensitive')",
            "CREATE TABLE t.hr.depts (dept STRING, floor INT)",
            "INSERT INTO t.hr.depts VALUES ('eng', 1)",
        ],
    )
    ana = lg.session("ana")
    with pytest.raises(AccessDenied, match="aggregation policy sensitive-k3"):
        ana.sql("SELECT * FROM t.hr.pay")
    by_dept = "SELECT dept, count(*) FROM t.hr.pay GROUP BY dept"
    assert sorted(tuple(r) for r in ana.sql(by_dept).collect()) == [("eng", 3)]  # ops: 1 row
    assert [tuple(r) for r in ana.sql("SELECT * FROM t.hr.depts").collect()] == [("eng", 1)]
    # tagging the other table (a new Delta version) makes it aggregate-only at once
    lg.session("admin").sql(
        "ALTER TABLE t.hr.depts SET TBLPROPERTIES ('lakegate.tags.floor' = 'sensitive')"
    )
    with pytest.raises(AccessDenied, match="aggregation policy sensitive-k3"):
        ana.sql("SELECT * FROM t.hr.depts")
