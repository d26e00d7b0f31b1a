"""Errors name only what the user may see (issue 25, item 4).

bob may read `main.hr.staff` but not its `salary`. Time travel to a version before an
ADD COLUMNS reads a view built from that version's schema (for every user), and no
readable analysis error, of any allow-listed class, lists a column, table or value the
user may not see: a suggestion list is cut to visible names (or the error becomes its
WITHOUT_SUGGESTION form), and an error naming anything else is class + query id only.
"""

from __future__ import annotations

import re
import shutil

import pytest

from governance.errors import Refused
from governance.execute.run import (
    READABLE_ANALYSIS_ERRORS,
    StatementFailed,
    error_class,
    spark_error,
)
from governance.spark_line import LINE
from governance.verify.readable import readable_line, seen_by

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: staff-read, principals: [bob, alice], privileges: [select], on: main.hr.*}
  - id: bob-no-salary
    principals: [bob]
    effect: deny
    privileges: [select]
    on: main.hr.*
    columns: [salary]
row_filters:
  - {id: bob-not-ceo, on: main.hr.filtered, principals: [bob], where: "title <> 'ceo'"}
"""

STAFF = "(1, 'ann', 'a@x.de', 'ceo', 100.0), (2, 'ben', 'b@x.de', 'dev', 50.0)"


@pytest.fixture(scope="module")
def lg(make_lakegate):
    lg = make_lakegate(
        "suggest",
        POLICIES,
        [
            "CREATE CATALOG main",
            "CREATE SCHEMA main.hr",
            "CREATE TABLE main.hr.staff (emp_id INT, name STRING, email STRING, title STRING, "
            "salary DOUBLE)",
            f"INSERT INTO main.hr.staff VALUES {STAFF}",  # version 1
            "ALTER TABLE main.hr.staff ADD COLUMNS (bonus DOUBLE)",  # version 2
            "INSERT INTO main.hr.staff VALUES (3, 'cy', 'c@x.de', 'ops', 70.0, 5.0)",
            "CREATE TABLE main.hr.filtered (emp_id INT, name STRING)",
            "INSERT INTO main.hr.filtered VALUES (1, 'ann')",  # version 1
            "ALTER TABLE main.hr.filtered ADD COLUMNS (title STRING)",
        ],
    )
    return lg


def _rows(lg, user: str, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in lg.session(user).sql(sql).collect())


# ---- time travel reads the version's own schema ----------------------------------------


def test_time_travel_before_add_columns_reads_that_versions_columns(lg) -> None:
    sql = "SELECT * FROM main.hr.staff VERSION AS OF 1"
    assert _rows(lg, "bob", sql) == [(1, "ann", "a@x.de", "ceo"), (2, "ben", "b@x.de", "dev")]
    df = lg.session("bob").sql(sql)
    assert df.columns == ["emp_id", "name", "email", "title"]


def test_time_travel_before_add_columns_works_for_every_user_naming_old_columns(lg) -> None:
    sql = "SELECT name, salary FROM main.hr.staff VERSION AS OF 1"
    assert _rows(lg, "alice", sql) == [("ann", 100.0), ("ben", 50.0)]
    assert _rows(lg, "admin", "SELECT * FROM main.hr.staff VERSION AS OF 1")[0] == (
        1,
        "ann",
        "a@x.de",
        "ceo",
        100.0,
    )


def test_naming_a_column_the_version_lacks_names_only_visible_columns(lg) -> None:
    with pytest.raises(StatementFailed) as e:
        lg.session("bob").sql("SELECT bonus FROM main.hr.staff VERSION AS OF 1").collect()
    msg = str(e.value)
    assert msg.startswith("statement failed: [UNRESOLVED_COLUMN.WITH_SUGGESTION]")
    assert "salary" not in msg and "bonus" in msg
    assert set(re.findall(r"`(\w+)`", msg.split("Did you mean")[1])) <= {
        "staff",
        "emp_id",
        "name",
        "email",
        "title",
    }


def test_time_travel_to_a_version_lacking_a_row_filters_column_is_refused(lg) -> None:
    with pytest.raises(Refused) as e:
        lg.session("bob").sql("SELECT name FROM main.hr.filtered VERSION AS OF 1")
    assert str(e.value) == (
        "time travel refused: table main.hr.filtered at version 1 lacks a column its row "
        "filters or masks for user bob read"
    )


def test_a_view_body_error_after_a_column_vanished_behind_the_catalogs_back(lg, spark) -> None:
    """The pipeline rewrote the table without `title`: the view body fails inside Spark,
    whose suggestion list (the Delta table's columns) must not reach bob with `salary`."""
    admin = lg.session("admin")
    admin.sql("CREATE TABLE main.hr.vanish (emp_id INT, title STRING, salary DOUBLE)")
    loc = lg.catalog.table("main", "hr", "vanish").location
    shutil.rmtree(loc)
    spark.createDataFrame([(1, 9.0)], "emp_id INT, salary DOUBLE").write.format("delta").save(loc)
    with pytest.raises(StatementFailed) as e:
        lg.session("alice").sql("SELECT title FROM main.hr.vanish").collect()
    assert "salary" in str(e.value)  # alice may read salary: her suggestion list keeps it
    with pytest.raises(StatementFailed) as e:
        lg.session("bob").sql("SELECT * FROM main.hr.vanish").collect()
    assert "salary" not in str(e.value)


# ---- every readable class, from Spark's own errors --------------------------------------

BOB_STATEMENT = "SELECT emp_id, nme, title FROM main.hr.staff"


def _bob_planned(lg):
    """bob's plan of a statement over staff (the words and views his errors may name)."""
    from governance.planning.dispatch import Planner
    from governance.sql.resolve import Namespace

    return Planner(
        catalog=lg.catalog,
        enforcer=lg.enforcer,
        policy_sql=lg.policy_sql,
        user="bob",
        namespace=Namespace("main", "hr"),
    ).plan(BOB_STATEMENT)


# class -> (raw Spark SQL over the staff table `t` (a view body's view of it), whether bob
# may read Spark's line: only when it names nothing of the body he may not see)
CASES = {
    # (Spark suggests at most five names: a narrow relation makes salary one of them)
    "UNRESOLVED_COLUMN.WITH_SUGGESTION": ("SELECT nme FROM (SELECT name, salary FROM t)", True),
    "UNRESOLVED_COLUMN.WITHOUT_SUGGESTION": ("SELECT salary_2024", False),
    "UNRESOLVED_ROUTINE": ("SELECT payroll_secret(salary) FROM t", False),
    "TABLE_OR_VIEW_NOT_FOUND": ("SELECT * FROM hr_private.payroll", False),
    "AMBIGUOUS_REFERENCE": ("SELECT salary FROM t a JOIN t b ON a.emp_id = b.emp_id", False),
    "WRONG_NUM_ARGS.WITHOUT_SUGGESTION": ("SELECT substr(salary) FROM t", True),  # a built-in
    "MISSING_AGGREGATION": ("SELECT salary, count(*) FROM t GROUP BY name", False),
    "MISSING_GROUP_BY": ("SELECT salary, count(*) FROM t", True),
    "PARSE_SYNTAX_ERROR": ("SELECT name FROM t payroll secret_ceo", False),
    "PARSE_EMPTY_STATEMENT": ("", True),
}
# Spark raises UNRESOLVED_FIELD only for column paths of DDL (ALTER TABLE ... ALTER COLUMN
# s.x), never for a query; its parameters and line, as Spark's template renders them.
FIELD_CASES = {
    "UNRESOLVED_FIELD.WITH_SUGGESTION": (
        {"fieldName": "`nme`", "columnPath": "`s`", "proposal": "`s`.`name`, `s`.`salary`"},
        "[UNRESOLVED_FIELD.WITH_SUGGESTION] A field with name `nme` cannot be resolved with "
        "the struct-type column `s`. Did you mean one of the following? "
        "[`s`.`name`, `s`.`salary`].",
    ),
    "UNRESOLVED_FIELD.WITHOUT_SUGGESTION": (
        {"fieldName": "`salry`", "columnPath": "`s`"},
        "[UNRESOLVED_FIELD.WITHOUT_SUGGESTION] A field with name `salry` cannot be resolved "
        "with the struct-type column `s`.",
    ),
}


def test_every_readable_class_is_covered() -> None:
    assert set(CASES) | set(FIELD_CASES) == READABLE_ANALYSIS_ERRORS


@pytest.mark.parametrize("cls", sorted(CASES))
def test_readable_errors_name_nothing_hidden_from_the_user(lg, spark, cls: str) -> None:
    sql, readable = CASES[cls]
    loc = lg.catalog.table("main", "hr", "staff").location
    spark.read.format("delta").load(loc).createOrReplaceTempView("t")
    with pytest.raises(Exception) as raised:
        spark.sql(sql).collect()
    assert error_class(raised.value) == cls
    msg = spark_error(raised.value, _bob_planned(lg), "q1", "bob")
    assert isinstance(msg, str)
    for secret in ("salary", "payroll", "hr_private", "`t`"):
        assert secret not in msg
    if readable:
        assert msg.startswith("statement failed: [")
    else:
        assert msg == f"statement failed: [{cls}] (query q1)"


def test_a_suggestion_list_keeps_what_the_user_may_see(lg, spark) -> None:
    """bob's suggestions over the view he reads: visible columns stay, salary goes."""
    loc = lg.catalog.table("main", "hr", "staff").location
    spark.read.format("delta").load(loc).createOrReplaceTempView("staff")
    with pytest.raises(Exception) as raised:
        spark.sql("SELECT nme FROM (SELECT emp_id, name, salary FROM staff)").collect()
    msg = spark_error(raised.value, _bob_planned(lg), "q1", "bob")
    assert isinstance(msg, str) and "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in msg
    named = re.findall(r"`(\w+)`", msg.split("Did you mean")[1])
    assert "salary" not in named and "name" in named


def test_suggestions_all_hidden_become_without_suggestion(lg, spark) -> None:
    spark.createDataFrame([(1.0,)], "salary DOUBLE").createOrReplaceTempView("t")
    with pytest.raises(Exception) as raised:
        spark.sql("SELECT nme FROM t").collect()
    msg = spark_error(raised.value, _bob_planned(lg), "q1", "bob")
    # Spark's own message of the class, as each line words it (4 added session variables)
    subject = {
        "3.5": "A column or function parameter",
        "4": "A column, variable, or function parameter",
    }
    assert msg == (
        f"statement failed: [UNRESOLVED_COLUMN.WITHOUT_SUGGESTION] {subject[LINE.name]} "
        "with name `nme` cannot be resolved."
    )


@pytest.mark.parametrize("cls", sorted(FIELD_CASES))
def test_unresolved_field_errors_name_nothing_hidden_from_the_user(lg, cls: str) -> None:
    """`s` and `salry` are no words of bob's statement: neither line is his to read; a
    statement naming `s` keeps only the visible field suggestion."""
    params, line = FIELD_CASES[cls]
    bob = _bob_planned(lg).seen()
    assert readable_line(cls, line, params, bob) is None
    own = seen_by("SELECT s.nme, s.salry FROM x", [("x", ["s", "name"])], ["salary"])
    got = readable_line(cls, line, params, own)
    if cls.endswith(".WITH_SUGGESTION"):
        assert got == line.replace("`s`.`name`, `s`.`salary`", "`s`.`name`")
    else:
        assert got == line


def test_a_syntax_error_at_the_callers_own_token_stays_readable() -> None:
    line = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'nme': extra input 'nme'.(line 1, pos 7)"
    params = {"error": "'nme'", "hint": ": extra input 'nme'"}
    own = seen_by("SELECT name nme FROM t", [("t", ["name"])], ["salary"])
    assert readable_line("PARSE_SYNTAX_ERROR", line, params, own) == line
    other = seen_by("SELECT name FROM t", [("t", ["name"])], ["salary"])
    assert readable_line("PARSE_SYNTAX_ERROR", line, params, other) is None


def test_suggestions_qualified_by_an_internal_name_are_dropped() -> None:
    """A view body's own alias (`__lg_v`) or a placeholder is never a name to suggest."""
    line = (
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column or function parameter with name `nme` "
        "cannot be resolved. Did you mean one of the following? [`__lg_v`.`name`, `s`.`name`]."
    )
    params = {"objectName": "`nme`", "proposal": "`__lg_v`.`name`, `s`.`name`"}
    seen = seen_by("SELECT nme FROM main.hr.staff s", [("s", ["name"])], ["salary"])
    assert readable_line("UNRESOLVED_COLUMN.WITH_SUGGESTION", line, params, seen) == line.replace(
        "[`__lg_v`.`name`, `s`.`name`]", "[`s`.`name`]"
    )
