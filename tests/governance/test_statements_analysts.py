"""The statements analysts write (issue 15, item 3), governed, one test per rule, on a private
lakehouse with real Delta tables.

`st.s.t` is read-only after setup. Users: `r` reads everything, `f` has a row filter
(EMEA rows only), `h` has the `secret` column hidden, `m` sees `email` hashed, `x` holds
nothing, `o` manages `st.s.alt` only, `w` may write `st.s.ins` (hidden `secret`, EMEA rows
only) and `v` may write it with `secret` hidden but no row filter.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import re
import time
from pathlib import Path

import pytest

from audit.query import query
from governance import AccessDenied
from governance.errors import LakegateError, Refused
from governance.execute.run import StatementFailed

POLICIES = """
groups:
  admins: [admin]
  readers: [r, f, h, m, o, w, v]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: readers-read, principals: [group:readers], privileges: [select], on: "st.s.*"}
  - {id: o-manage, principals: [o], privileges: [manage], on: st.s.alt}
  - {id: o-tags, principals: [o], privileges: [apply_tag], on: st.s.alt}
  - {id: w-modify, principals: [w, v], privileges: [modify], on: st.s.ins}
  - id: h-no-secret
    principals: [h, w, v]
    effect: deny
    privileges: [select]
    on: "st.s.*"
    columns: [secret]
row_filters:
  - {id: f-emea, on: "st.s.*", principals: [f, w], where: "region = 'EMEA'"}
column_masks:
  - {id: m-hash, on: "st.s.*", columns: [email], mask: hash, principals: [m]}
"""

ROWS = [
    (1, "EMEA", "a@x.de", "s1", ["red", "blue"]),
    (2, "AMER", "b@x.us", "s2", ["green"]),
    (3, "EMEA", "c@x.fr", "s3", []),
]


def _values(rows: list[tuple]) -> str:
    def lit(v: object) -> str:
        if isinstance(v, list):
            return "array(" + ", ".join(f"'{x}'" for x in v) + ")" if v else "array()"
        return f"'{v}'" if isinstance(v, str) else str(v)

    return ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in rows)


@pytest.fixture(scope="module")
def lg(make_lakegate):
    cols = "id INT, region STRING, email STRING, secret STRING, tags ARRAY<STRING>"
    return make_lakegate(
        "statements",
        POLICIES,
        [
            "CREATE CATALOG st",
            "CREATE SCHEMA st.s",
            f"CREATE TABLE st.s.t ({cols})",
            f"INSERT INTO st.s.t VALUES {_values(ROWS)}",
            "CREATE TABLE st.s.alt (id INT, region STRING)",
            "CREATE TABLE st.s.ins (id INT, region STRING, email STRING, secret STRING)",
            f"CREATE TABLE st.s.hist ({cols})",
            f"INSERT INTO st.s.hist VALUES {_values(ROWS)}",
            "DELETE FROM st.s.hist WHERE secret = 's2'",
        ],
    )


def rows(lg, user: str, sql: str) -> list[tuple]:
    return [tuple(r) for r in lg.session(user).sql(sql).collect()]


def records(lg, user: str, sql: str) -> list:
    """Run `sql` as `user`; the audit records of that statement."""
    s = lg.session(user)
    with contextlib.suppress(LakegateError):
        s.sql(sql)
    return [r for r in query(lg.config.audit).records if r.query_id == s.last_query_id]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# TABLE t ------------------------------------------------------------------------------------


def test_table_statement_reads_the_governed_view(lg):
    assert rows(lg, "h", "TABLE st.s.t") == rows(
        lg, "h", "SELECT id, region, email, tags FROM st.s.t"
    )
    assert lg.session("h").sql("TABLE st.s.t").columns == ["id", "region", "email", "tags"]
    assert sorted(r[0] for r in rows(lg, "f", "TABLE st.s.t;")) == [1, 3]


def test_table_statement_is_denied_without_select(lg):
    with pytest.raises(AccessDenied, match=r"no SELECT privilege on table st\.s\.t"):
        lg.session("x").sql("TABLE st.s.t")


@pytest.mark.parametrize("sql", ["TABLE", "TABLE st.s.t AS z", "TABLE delta.`/tmp/x`"])
def test_table_statement_takes_one_catalog_table_name(lg, sql):
    with pytest.raises(LakegateError):
        lg.session("r").sql(sql)


# explode / inline as FROM items --------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT * FROM explode(array(1, 2))", [(1,), (2,)]),
        ("SELECT * FROM explode_outer(array())", [(None,)]),
        ("SELECT * FROM posexplode(array('a'))", [(0, "a")]),
        ("SELECT * FROM inline(array(struct(1, 'a'), struct(2, 'b')))", [(1, "a"), (2, "b")]),
    ],
)
def test_generator_in_from_over_literals(lg, sql, expected):
    assert rows(lg, "x", sql) == expected


def test_generator_in_from_reads_lateral_columns_of_visible_rows_only(lg):
    sql = "SELECT t.id, x FROM st.s.t t, LATERAL explode(t.tags) AS e(x) ORDER BY t.id, x"
    assert rows(lg, "f", sql) == [(1, "blue"), (1, "red")]


def test_generator_argument_subquery_is_governed(lg):
    sql = "SELECT * FROM explode((SELECT collect_list(id) FROM st.s.t)) ORDER BY 1"
    assert rows(lg, "f", sql) == [(1,), (3,)]
    sql = "SELECT * FROM inline((SELECT collect_list(struct(id, email)) FROM st.s.t))"
    assert sorted(rows(lg, "m", sql)) == [(i, sha(e)) for i, _, e, _, _ in ROWS]


@pytest.mark.parametrize(
    "user, sql",
    [
        ("h", "SELECT * FROM explode((SELECT collect_list(secret) FROM st.s.t))"),
        ("x", "SELECT * FROM stack(1, (SELECT max(id) FROM st.s.t))"),
    ],
)
def test_generator_argument_subquery_is_denied_like_any_read(lg, user, sql):
    with pytest.raises(AccessDenied):
        lg.session(user).sql(sql)


# TIMESTAMP AS OF <expression> ------------------------------------------------------------


@pytest.fixture(scope="module")
def aged(lg):
    """`st.s.tt`: version 1 (ids 1, 2) committed two days ago, version 2 (id 3) now."""
    s = lg.session("admin")
    s.sql("CREATE TABLE st.s.tt (id INT, region STRING)")
    s.sql("INSERT INTO st.s.tt VALUES (1, 'EMEA'), (2, 'AMER')")
    log = Path(lg.catalog.table("st", "s", "tt").location) / "_delta_log"
    now = time.time()
    for version, days in ((0, 3), (1, 2)):
        t = now - days * 86400
        os.utime(log / f"{version:020d}.json", (t, t))
    s.sql("INSERT INTO st.s.tt VALUES (3, 'EMEA')")
    return "st.s.tt"


@pytest.mark.parametrize("user, expected", [("r", [(1,), (2,)]), ("f", [(1,)])])
def test_timestamp_as_of_a_constant_expression_is_governed(lg, aged, user, expected):
    sql = f"SELECT id FROM {aged} TIMESTAMP AS OF current_timestamp() - INTERVAL 1 DAY ORDER BY id"
    assert rows(lg, user, sql) == expected


def test_timestamp_as_of_folds_now_into_the_view_the_verifier_checks(lg, aged):
    s = lg.session("f")
    s.sql(f"SELECT id FROM {aged} TIMESTAMP AS OF now() - INTERVAL 1 DAY").collect()
    (body,) = [b for bodies in s.last_planned.expected.views.values() for b, _, _ in bodies]
    assert re.search(r"TIMESTAMP AS OF '\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}Z'", body)
    assert "region = 'EMEA'" in body


def test_timestamp_as_of_a_typed_literal(lg, aged):
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 86400))
    sql = f"SELECT id FROM {aged} TIMESTAMP AS OF TIMESTAMP '{stamp}+00:00' ORDER BY id"
    assert rows(lg, "r", sql) == [(1,), (2,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM st.s.t TIMESTAMP AS OF (SELECT max(id) FROM st.s.t)",
        "SELECT id FROM st.s.t TIMESTAMP AS OF CAST(id AS TIMESTAMP)",
        "SELECT id FROM st.s.t TIMESTAMP AS OF reflect('java.lang.Thread', 'x')",
        "SELECT id FROM st.s.t TIMESTAMP AS OF date_sub(current_date(), 1)",
        "SELECT id FROM st.s.t TIMESTAMP AS OF now() - INTERVAL 1 MONTH",
        "SELECT id FROM st.s.t TIMESTAMP AS OF now() - INTERVAL 999999999999 DAY",
        "SELECT id FROM st.s.t VERSION AS OF 1 + 1",
    ],
)
def test_time_travel_takes_only_constants_lakegate_can_fold(lg, sql):
    with pytest.raises(Refused, match="AS OF takes"):
        lg.session("r").sql(sql)


# SHOW COLUMNS --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "user, sql, expected",
    [
        ("r", "SHOW COLUMNS IN st.s.t", ["id", "region", "email", "secret", "tags"]),
        ("h", "SHOW COLUMNS FROM st.s.t", ["id", "region", "email", "tags"]),
        ("h", "show columns in t in st.s", ["id", "region", "email", "tags"]),
        ("m", "SHOW COLUMNS IN `t` FROM st.s;", ["id", "region", "email", "secret", "tags"]),
    ],
)
def test_show_columns_lists_only_visible_columns(lg, user, sql, expected):
    assert [r[0] for r in rows(lg, user, sql)] == expected


def test_show_columns_is_denied_without_select(lg):
    with pytest.raises(AccessDenied, match=r"no SELECT privilege on table st\.s\.t"):
        lg.session("x").sql("SHOW COLUMNS IN st.s.t")
    with pytest.raises(Refused, match="invalid name"):
        lg.session("r").sql("SHOW COLUMNS IN `../t` IN st.s")


def test_show_columns_is_audited(lg):
    (rec,) = records(lg, "h", "SHOW COLUMNS IN st.s.t")
    assert (rec.cmd, rec.src, rec.allowed, rec.succeeded) == ("show", "st.s.t", True, True)


# DESCRIBE HISTORY ----------------------------------------------------------------------------


def _history(lg, user: str) -> list[dict]:
    df = lg.session(user).sql("DESCRIBE HISTORY st.s.hist")
    return [r.asDict() for r in df.collect()]


def test_describe_history_shows_commits_to_a_reader_who_sees_everything(lg):
    hist = _history(lg, "r")
    assert [h["operation"] for h in hist][:2] == ["DELETE", "WRITE"]
    assert "s2" in str(hist[0]["operationParameters"])
    assert hist[0]["operationMetrics"]["numDeletedRows"] == "1"


def test_describe_history_leaves_out_metrics_under_a_row_filter(lg):
    hist = _history(lg, "f")
    assert [h["operation"] for h in hist][:2] == ["DELETE", "WRITE"]
    assert all(h["operationMetrics"] is None for h in hist)
    assert all(h["operationParameters"] is None and h["userMetadata"] is None for h in hist)


@pytest.mark.parametrize("user", ["h", "m"])
def test_describe_history_leaves_out_predicates_for_hidden_or_masked_columns(lg, user):
    hist = _history(lg, user)
    assert all(h["operationParameters"] is None for h in hist)
    assert "s2" not in str(hist)
    assert hist[0]["operationMetrics"]["numDeletedRows"] == "1"


def test_describe_history_is_denied_without_select_and_audited(lg):
    with pytest.raises(AccessDenied):
        lg.session("x").sql("DESCRIBE HISTORY st.s.hist")
    (rec,) = records(lg, "f", "DESCRIBE HISTORY st.s.hist")
    assert (rec.cmd, rec.src, rec.allowed, rec.succeeded) == ("describe", "st.s.hist", True, True)


# ALTER TABLE / COMMENT ON TABLE ----------------------------------------------------------------


def _properties(lg, table: str) -> dict[str, str]:
    loc = lg.catalog.table(*table.split(".")).location
    return {r[0]: r[1] for r in lg.spark.sql(f"SHOW TBLPROPERTIES delta.`{loc}`").collect()}


def test_alter_table_set_properties_needs_manage(lg):
    sql = "ALTER TABLE st.s.alt SET TBLPROPERTIES ('team' = 'sales', 'lakegate.tags.tier' = 1)"
    with pytest.raises(AccessDenied, match=r"no MANAGE privilege on table st\.s\.alt"):
        lg.session("r").sql(sql)
    assert "team" not in _properties(lg, "st.s.alt")
    lg.session("o").sql(sql)
    props = _properties(lg, "st.s.alt")
    assert (props["team"], props["lakegate.tags.tier"]) == ("sales", "1")


def test_alter_table_add_columns_is_visible_at_the_next_statement(lg):
    s = lg.session("o")
    s.sql("ALTER TABLE st.s.alt ADD COLUMNS (note STRING COMMENT 'free text')")
    assert [tuple(r) for r in s.sql("DESCRIBE st.s.alt").collect()][-1] == (
        "note",
        "string",
        "free text",
    )
    s.sql("INSERT INTO st.s.alt VALUES (1, 'EMEA', 'hello')")
    assert rows(lg, "r", "SELECT note FROM st.s.alt") == [("hello",)]


def test_alter_column_comment_and_comment_on_table(lg):
    s = lg.session("o")
    s.sql("ALTER TABLE st.s.alt ALTER COLUMN region COMMENT 'sales region'")
    s.sql("COMMENT ON TABLE st.s.alt IS 'altered by its manager'")
    described = {r[0]: r[2] for r in s.sql("DESCRIBE st.s.alt").collect()}
    assert described["region"] == "sales region"
    assert lg.catalog.table("st", "s", "alt").comment == "altered by its manager"


def test_alter_table_is_denied_to_readers_and_to_managers_of_other_tables(lg):
    for user, sql in [
        ("r", "COMMENT ON TABLE st.s.alt IS 'x'"),
        ("o", "ALTER TABLE st.s.t ADD COLUMNS (y INT)"),
        ("o", "ALTER TABLE st.s.nope SET TBLPROPERTIES ('a' = 'b')"),
    ]:
        with pytest.raises(AccessDenied, match="no MANAGE privilege"):
            lg.session(user).sql(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE st.s.alt SET TBLPROPERTIES ('delta.appendOnly' = 'true')",
        "ALTER TABLE st.s.alt SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
        "ALTER TABLE st.s.alt SET TBLPROPERTIES ('option.path' = '/tmp')",
        "ALTER TABLE st.s.alt SET TBLPROPERTIES ('location' = '/tmp')",
        "ALTER TABLE st.s.alt RENAME TO st.s.other",
        "ALTER TABLE st.s.alt DROP COLUMN region",
        "ALTER TABLE st.s.alt SET LOCATION '/tmp'",
        "ALTER TABLE st.s.alt CHANGE COLUMN region region INT",
        "ALTER TABLE st.s.alt ALTER COLUMN id TYPE BIGINT",
        "ALTER TABLE st.s.alt UNSET TBLPROPERTIES ('team')",
        "ALTER TABLE st.s.alt ADD COLUMNS (`a/b` INT)",
        "ALTER TABLE st.s.alt ADD COLUMNS (z INT NOT NULL)",
    ],
)
def test_other_alter_forms_are_refused(lg, sql):
    loc = Path(lg.catalog.table("st", "s", "alt").location) / "_delta_log"
    before = sorted(loc.glob("*.json"))
    with pytest.raises(Refused):
        lg.session("o").sql(sql)
    assert sorted(loc.glob("*.json")) == before


def test_alter_table_intent_is_on_record_before_it_runs(lg):
    recs = records(lg, "o", "ALTER TABLE st.s.alt SET TBLPROPERTIES ('audited' = 'yes')")
    assert [(r.phase, r.succeeded, r.cmd, r.src) for r in recs] == [
        ("intent", False, "alter", "st.s.alt"),
        ("outcome", True, "alter", "st.s.alt"),
    ]
    assert "o-manage" in recs[0].policies


# INSERT without a column list, columns hidden from the writer ----------------------------------


def _stored(lg, where: str) -> list[tuple]:
    return rows(lg, "admin", f"SELECT id, region, email, secret FROM st.s.ins WHERE {where}")


@pytest.mark.parametrize("user, base", [("w", 100), ("v", 200)])
def test_insert_without_column_list_fills_hidden_columns_with_null(lg, user, base):
    lg.session(user).sql(f"INSERT INTO st.s.ins VALUES ({base}, 'EMEA', 'e@x.de')")
    assert _stored(lg, f"id = {base}") == [(base, "EMEA", "e@x.de", None)]


@pytest.mark.parametrize("user, base", [("w", 110), ("v", 210)])
def test_insert_without_column_list_takes_the_visible_arity_only(lg, user, base):
    with pytest.raises(StatementFailed):
        lg.session(user).sql(f"INSERT INTO st.s.ins VALUES ({base}, 'EMEA', 'e@x.de', 'forged')")
    assert _stored(lg, f"id = {base}") == []


def test_insert_without_column_list_still_checks_the_row_filter(lg):
    with pytest.raises(AccessDenied, match="outside their row filter"):
        lg.session("w").sql("INSERT INTO st.s.ins VALUES (120, 'AMER', 'e@x.us')")
    assert _stored(lg, "id = 120") == []


# INSERT sources that spell Lakegate's own aliases ---------------------------------------------


@pytest.mark.parametrize(
    "user, base, source, expected",
    [
        ("w", 300, "SELECT {id}, 'EMEA', 'x AS __lg_src y'", "x AS __lg_src y"),
        ("v", 310, "SELECT {id}, 'AMER', ') AS __lg_src(id) --'", ") AS __lg_src(id) --"),
        ("w", 320, "SELECT * FROM (SELECT {id}, 'EMEA', 'z') AS __lg_src", "z"),
        ("v", 330, "SELECT __lg_src.* FROM (SELECT {id}, 'AMER', 'q') AS __lg_src", "q"),
        (
            "w",
            340,
            "SELECT * FROM (SELECT {id} AS a, 'EMEA' AS b, 'c' AS c) AS __lg_chk",
            "c",
        ),
    ],
)
def test_insert_source_naming_internal_aliases_keeps_its_meaning(lg, user, base, source, expected):
    region = "EMEA" if user == "w" else "AMER"
    lg.session(user).sql("INSERT INTO st.s.ins (id, region, email) " + source.format(id=base))
    assert _stored(lg, f"id = {base}") == [(base, region, expected, None)]


# Planned without Spark: what the new statements generate ---------------------------------------


def test_alter_table_runs_on_the_delta_location_and_quotes_values_from_the_tree(planner):
    planned = planner("root").plan(
        "ALTER TABLE main.sales.orders SET TBLPROPERTIES ('note' = 'it\\'s`; DROP TABLE x')"
    )
    (action,) = planned.before
    assert action.statement == (
        "ALTER TABLE delta.`/wh/main/sales/orders` SET TBLPROPERTIES "
        "('note'='it\\'s`; DROP TABLE x')"
    )
    assert planned.sql is None


def test_timestamp_as_of_now_is_folded_to_one_utc_literal(planner):
    before = dt.datetime.now(dt.UTC) - dt.timedelta(hours=36)
    sql = (
        planner("erin")
        .plan("SELECT id FROM main.sales.orders TIMESTAMP AS OF now() - INTERVAL 1 DAY 12 HOURS")
        .sql
    )
    after = dt.datetime.now(dt.UTC) - dt.timedelta(hours=36)
    (stamp,) = re.findall(r"TIMESTAMP AS OF '([^']+)Z' AS __lg_v", sql)
    folded = dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC)
    assert before <= folded <= after
