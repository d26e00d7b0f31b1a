"""Row filters on the write path (issue 10, items 1, 2, 3, 9), on a private lakehouse.

User `w` may modify `g.s.t` under the filter `region = 'EMEA' AND amount >= 0 AND (d IS NULL
OR d > DATE'2024-06-01')`. Rows 1-4 (EMEA, AMER, EMEA, APAC) are never changed: the guard
tests write nothing. Each mutating test owns its own ids. The f_* users have one-word,
boolean-column, NULL and comment-bearing filters on `g.s.f`.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from governance import AccessDenied

POLICIES = """
groups:
  admins: [admin]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: writers
    principals: [w, f_true, f_false, f_null, f_flag, f_line, f_block, f_perm]
    privileges: [select, modify]
    on: g.s.*
row_filters:
  - id: w-emea
    on: g.s.t
    principals: [w]
    kind: restrictive
    where: "region = 'EMEA' AND amount >= 0 AND (d IS NULL OR d > DATE'2024-06-01')"
  - {id: f-true, on: g.s.f, principals: [f_true], kind: restrictive, where: "true"}
  - {id: f-false, on: g.s.f, principals: [f_false], kind: restrictive, where: "false"}
  - {id: f-null, on: g.s.f, principals: [f_null], kind: restrictive, where: "NULL"}
  - {id: f-flag, on: g.s.f, principals: [f_flag], kind: restrictive, where: "flag"}
  - id: f-line
    on: g.s.f
    principals: [f_line]
    kind: restrictive
    where: "flag -- x"
  - {id: f-block, on: g.s.f, principals: [f_block], kind: restrictive, where: "/* c */ flag"}
  - {id: f-perm, on: g.s.f, principals: [f_perm], where: "flag"}
"""

VISIBLE = (1, 3)  # the rows of 1-4 that w sees


@pytest.fixture(scope="module")
def lg(make_lakegate):
    return make_lakegate(
        "guards",
        POLICIES,
        [
            "CREATE CATALOG g",
            "CREATE SCHEMA g.s",
            "CREATE TABLE g.s.t (id INT, region STRING, amount INT, d DATE, note STRING)",
            "INSERT INTO g.s.t VALUES (1, 'EMEA', 10, NULL, 'a'), (2, 'AMER', 20, NULL, 'b'), "
            "(3, 'EMEA', 30, NULL, 'c'), (4, 'APAC', 40, NULL, 'd'), "
            "(10, 'EMEA', 10, NULL, 'x'), (11, 'EMEA', 11, NULL, 'x'), "
            "(20, 'EMEA', 20, NULL, 'x'), (21, 'AMER', 21, NULL, 'x'), (22, 'EMEA', 22, NULL, 'x')",
            "CREATE TABLE g.s.f (id INT, flag BOOLEAN, n INT)",
            "INSERT INTO g.s.f VALUES (1, true, 0), (2, false, 0), (3, NULL, 0)",
        ],
    )


def rows(lg, table: str = "t", where: str = "true") -> list[tuple]:
    return [
        tuple(r)
        for r in lg.session("admin")
        .sql(f"SELECT * FROM g.s.{table} WHERE {where} ORDER BY id")
        .collect()
    ]


def commits(lg, table: str = "t") -> int:
    location = Path(lg.catalog.table("g", "s", table).location)
    return len(list((location / "_delta_log").glob("*.json")))


def denied(lg, sql: str) -> str:
    before, state = commits(lg), rows(lg)
    with pytest.raises(AccessDenied) as exc:
        lg.session("w").sql(sql)
    assert commits(lg) == before and rows(lg) == state, "a denied write changed the table"
    return str(exc.value)


OUTSIDE = (
    "access denied: a row written by user w is outside their row filter on g.s.t; "
    "nothing was written"
)

# Each raises (ANSI off, Spark 3.5) on the hidden rows 2 and 4 (region AMER/APAC) and not on
# the visible EMEA rows: `{bad}` is true exactly on the hidden rows (by id, so that Spark
# cannot fold it away by propagating the filter's `region = 'EMEA'`). url_decode also raises,
# but Lakegate refuses it in any statement, so it cannot be used against a filter.
RAISING = {
    "to_number": "to_number(CASE WHEN {bad} THEN concat_ws('|', {t}id, {t}region) ELSE '1' "
    "END, '9') = 5",
    "from_json_failfast": "from_json(CASE WHEN {bad} THEN {t}region ELSE '{{}}' END, 'a INT', "
    "map('mode', 'FAILFAST')).a = 5",
    "regexp_group_index": "regexp_extract(CASE WHEN {bad} THEN 'ab' ELSE 'x' END, '(a)', 2) = 'z'",
    "sequence_size": "size(sequence(1, CASE WHEN {bad} THEN 2000000000 ELSE 1 END)) = 0",
    "aes_decrypt": "aes_decrypt(CASE WHEN {bad} THEN unhex('00') ELSE NULL END, "
    "'0000111122223333') IS NOT NULL",
    "element_at_zero": "element_at(array(1), CASE WHEN {bad} THEN 0 ELSE 1 END) = 5",
}


def raising(family: str, t: str = "") -> str:
    """The family's condition over the target's columns, qualified by `t` if given."""
    return RAISING[family].format(bad=f"{t}id IN (2, 4)", t=t)


@pytest.mark.parametrize("family", list(RAISING))
def test_delete_condition_never_runs_on_hidden_rows(lg, family):
    before = rows(lg)
    lg.session("w").sql(f"DELETE FROM g.s.t WHERE {raising(family)}")
    assert rows(lg) == before


@pytest.mark.parametrize("family", list(RAISING))
def test_update_condition_never_runs_on_hidden_rows(lg, family):
    before = rows(lg)
    lg.session("w").sql(f"UPDATE g.s.t SET note = 'changed' WHERE {raising(family)}")
    assert rows(lg) == before


# Delta's MERGE runs the ON condition on every target row of the candidate files (its join),
# hidden ones included: before the fence, sequence_size exhausted the driver's heap there.
# Fenced, the user's expressions read a hidden row's columns as NULL wherever they run.
@pytest.mark.parametrize("family", list(RAISING))
def test_merge_on_condition_never_runs_on_hidden_rows(lg, family):
    before = rows(lg)
    cond = raising(family, "t.")
    lg.session("w").sql(
        f"MERGE INTO g.s.t AS t USING (SELECT explode(sequence(1, 4)) AS id) AS s "
        f"ON t.id = s.id AND {cond} WHEN MATCHED THEN UPDATE SET note = 'changed'"
    )
    assert rows(lg) == before


@pytest.mark.parametrize("family", list(RAISING))
def test_merge_on_condition_with_unqualified_columns_never_runs_on_hidden_rows(lg, family):
    before = rows(lg)
    lg.session("w").sql(
        f"MERGE INTO g.s.t AS t USING (SELECT explode(sequence(1, 4)) AS sid) AS s "
        f"ON id = sid AND {raising(family)} WHEN MATCHED THEN UPDATE SET note = 'changed'"
    )
    assert rows(lg) == before


@pytest.mark.parametrize("family", list(RAISING))
def test_merge_clause_conditions_never_run_on_hidden_rows(lg, family):
    """WHEN MATCHED AND <cond> and WHEN NOT MATCHED BY SOURCE AND <cond> see hidden rows'
    columns as NULL only."""
    before = rows(lg)
    cond = raising(family, "t.")
    lg.session("w").sql(
        f"MERGE INTO g.s.t AS t USING (SELECT explode(sequence(1, 4)) AS id) AS s "
        f"ON t.id = s.id WHEN MATCHED AND {cond} THEN UPDATE SET note = 'changed' "
        f"WHEN NOT MATCHED BY SOURCE AND t.id < 5 AND {cond} THEN DELETE"
    )
    assert rows(lg) == before


def test_merge_set_value_never_runs_on_hidden_rows(lg):
    lg.session("w").sql(
        "MERGE INTO g.s.t AS t USING (SELECT explode(array(11, 21)) AS id) AS s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = t.amount + to_number(CASE WHEN "
        "t.region <> 'EMEA' THEN t.region ELSE '0' END, '9')"
    )
    assert rows(lg, where="id IN (11, 21)") == [
        (11, "EMEA", 11, None, "x"),
        (21, "AMER", 21, None, "x"),
    ]


def _unfenced_user_columns(sql: str) -> list[str]:
    """Target columns in the generated statement that neither belong to the filter check
    (`COALESCE(<filter>, FALSE)`) nor sit in the THEN branch of a CASE guarded by it."""

    def is_check(node: exp.Expression) -> bool:
        return isinstance(node, exp.Coalesce) and "region = 'EMEA'" in node.sql("spark")

    tree = sqlglot.parse_one(sql, read="spark")
    bad = []
    for col in tree.find_all(exp.Column):
        if col.name.lower() not in {"id", "region", "amount", "d", "note"}:
            continue
        if (
            col.arg_key == "this"
            and isinstance(col.parent, exp.EQ)
            and col.parent.arg_key == "expressions"
            and isinstance(col.parent.parent, exp.Update)
        ):
            continue  # an assigned column: SET <col> = ...
        node, safe = col, False
        while node.parent is not None:
            if is_check(node):
                safe = True
                break
            parent = node.parent
            if (
                isinstance(parent, exp.If)
                and node.arg_key == "true"
                and is_check(parent.this)
                and isinstance(parent.parent, exp.Case)
            ):
                safe = True
                break
            node = parent
        if not safe:
            bad.append(col.sql("spark"))
    return bad


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM g.s.t WHERE note = 'z' AND length(region) > id",
        "UPDATE g.s.t SET note = upper(note) WHERE id = 1 OR amount > 5",
        "UPDATE g.s.t AS u SET note = upper(u.note), amount = u.amount + 1 WHERE u.id = 1",
        "MERGE INTO g.s.t AS t USING (SELECT 1 AS sid) AS s ON t.id = s.sid AND note <> 'q' "
        "WHEN MATCHED AND t.amount > 1 THEN UPDATE SET note = concat(t.note, t.region) "
        "WHEN NOT MATCHED BY SOURCE AND t.amount < 0 THEN DELETE",
    ],
)
def test_write_expressions_read_target_columns_only_through_the_fence(lg, sql):
    """No Spark needed: every target column a user's expression reads is behind the filter."""
    text = lg.session("w").explain(sql)
    assert _unfenced_user_columns(text) == []


def test_update_set_value_never_runs_on_hidden_rows(lg):
    """A SET right-hand side (also inside the WITH CHECK) only runs on visible rows."""
    lg.session("w").sql(
        "UPDATE g.s.t SET amount = amount + to_number(CASE WHEN "
        "region <> 'EMEA' THEN region ELSE '0' END, '9') WHERE id IN (10, 21)"
    )
    assert rows(lg, where="id IN (10, 21)") == [
        (10, "EMEA", 10, None, "x"),
        (21, "AMER", 21, None, "x"),
    ]


def test_merge_not_matched_by_source_never_touches_hidden_rows(lg):
    lg.session("w").sql(
        "MERGE INTO g.s.t AS t USING (SELECT 0 AS id) AS s ON t.id = s.id "
        "WHEN NOT MATCHED BY SOURCE AND t.id BETWEEN 20 AND 29 THEN DELETE"
    )
    assert [r[0] for r in rows(lg, where="id BETWEEN 20 AND 29")] == [21]


# WITH CHECK: the new version of an updated or merged row must pass the filter --------------


def test_update_may_change_filter_column_when_new_row_passes(lg):
    lg.session("w").sql("UPDATE g.s.t SET amount = amount - 5 WHERE id = 11")
    assert rows(lg, where="id = 11") == [(11, "EMEA", 6, None, "x")]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE g.s.t SET amount = -1 WHERE id = 1",
        "UPDATE g.s.t SET region = 'US'",
        "UPDATE g.s.t SET region = NULL WHERE id = 3",  # NULL fails the filter
        "UPDATE g.s.t SET d = TIMESTAMP'2024-06-01 12:00:00'",  # stored as 2024-06-01
    ],
)
def test_update_moving_row_out_of_filter_is_denied_and_writes_nothing(lg, sql):
    assert denied(lg, sql) == OUTSIDE


def test_merge_update_moving_row_out_of_filter_is_denied(lg):
    assert (
        denied(
            lg,
            "MERGE INTO g.s.t AS t USING (SELECT 3 AS id) AS s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET region = 'US'",
        )
        == OUTSIDE
    )


@pytest.mark.parametrize(
    "values",
    [
        "(s.id, 'AMER', 1)",
        "(s.id, 'EMEA', -1)",
        "(s.id, NULL, 1)",
    ],
)
def test_merge_insert_outside_filter_denied(lg, values):
    assert (
        denied(
            lg,
            "MERGE INTO g.s.t AS t USING (SELECT 50 AS id) AS s ON t.id = s.id "
            f"WHEN NOT MATCHED THEN INSERT (id, region, amount) VALUES {values}",
        )
        == OUTSIDE
    )


def test_merge_insert_inside_filter_allowed_and_stores_cast_values(lg):
    lg.session("w").sql(
        "MERGE INTO g.s.t AS t USING (SELECT 60 AS id) AS s ON t.id = s.id "
        "WHEN NOT MATCHED THEN INSERT (id, region, amount) "
        "VALUES (s.id, 'EMEA', 4.5)"
    )
    assert rows(lg, where="id = 60") == [(60, "EMEA", 4, None, None)]


# INSERT checks what is stored -----------------------------------------------------------


def test_insert_checks_the_stored_value_not_the_sent_one(lg):
    """TIMESTAMP'2024-06-01 12:00:00' passes `d > DATE'2024-06-01'`; the DATE stored not."""
    assert (
        denied(
            lg,
            "INSERT INTO g.s.t (id, region, amount, d) "
            "VALUES (70, 'EMEA', 1, TIMESTAMP'2024-06-01 12:00:00')",
        )
        == OUTSIDE
    )


def test_insert_stores_the_checked_cast_values(lg):
    lg.session("w").sql(
        "INSERT INTO g.s.t (id, region, amount, d) "
        "VALUES (71, 'EMEA', 4.5, TIMESTAMP'2024-06-02 12:00:00')"
    )
    assert rows(lg, where="id = 71")[0][:4] == (71, "EMEA", 4, datetime.date(2024, 6, 2))


def test_insert_source_text_cannot_change_the_wrapper(lg):
    lg.session("w").sql(
        "INSERT INTO g.s.t (id, region, amount, note) SELECT 72, 'EMEA', 1, 'a AS __lg_src b'"
    )
    assert rows(lg, where="id = 72") == [(72, "EMEA", 1, None, "a AS __lg_src b")]


# Generated SQL means what the tree means, with and without the plan verifier ---------------

FILTERED = {
    "f_true": [1, 2, 3],
    "f_false": [],
    "f_null": [],
    "f_flag": [1],
    "f_line": [1],
    "f_block": [1],
    "f_perm": [1],
}


@pytest.fixture(params=[True, False], ids=["verify", "no-verify"])
def verified(request, lg, monkeypatch):
    monkeypatch.setattr(lg, "config", dataclasses.replace(lg.config, verify_plans=request.param))
    return lg


@pytest.mark.parametrize("user", list(FILTERED))
def test_one_word_and_commented_filters_keep_their_meaning_in_reads(verified, user):
    got = verified.session(user).sql("SELECT id FROM g.s.f ORDER BY id").collect()
    assert [r.id for r in got] == FILTERED[user]


@pytest.mark.parametrize("user", list(FILTERED))
def test_one_word_and_commented_filters_guard_every_write(verified, user):
    """UPDATE and DELETE guards, MERGE guard and WITH CHECK, INSERT check: all one filter."""
    s = verified.session(user)
    visible = FILTERED[user]
    before = {r[0]: r[2] for r in rows(verified, "f")}
    s.sql("UPDATE g.s.f SET n = n + 1")
    s.sql(
        "MERGE INTO g.s.f AS t USING (SELECT explode(sequence(1, 3)) AS id) AS s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET n = n + 1"
    )
    s.sql("DELETE FROM g.s.f WHERE n < 0")
    after = {r[0]: r[2] for r in rows(verified, "f")}
    assert after == {i: n + (2 if i in visible else 0) for i, n in before.items()}
    if visible:
        s.sql("INSERT INTO g.s.f (id, flag, n) VALUES (9, true, 0)")
        s.sql("DELETE FROM g.s.f WHERE id = 9")
    else:
        with pytest.raises(AccessDenied):
            s.sql("INSERT INTO g.s.f (id, flag, n) VALUES (9, true, 0)")
