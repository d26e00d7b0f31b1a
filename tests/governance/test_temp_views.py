"""Session-scoped temporary views (issue #15): kept per GovernedSession, never in Spark, and
governed again at every use.

Reads run on the shared demo `lakehouse` (reference policies: carol is an EMEA analyst with
row filters and masks, bob may not read customers.phone); the policy-change test runs on a
private lakehouse.
"""

from __future__ import annotations

import pytest

from governance import AccessDenied, LakegateError
from governance.errors import Refused, SqlParseError
from governance.planning import views

ORDERS = "main.sales.orders"


def rows(session, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in session.sql(sql).collect())


def audit_lines(lg, action) -> list[dict[str, str]]:
    """The audit lines `action()` writes, as key -> value."""
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size if log.exists() else 0
    action()
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    out = []
    for line in text.splitlines():
        body = line.split("lakegate.audit: ", 1)[1]
        out.append(dict(part.partition("=")[::2] for part in body.split("\t")))
    return out


# use: the view reads what its creator may read, as the creator ---------------------------


def test_a_temp_view_keeps_its_creators_row_filters(lakehouse):
    carol = lakehouse.session("carol")
    carol.sql(f"CREATE TEMP VIEW mine AS SELECT id, region FROM {ORDERS}")
    assert rows(carol, "SELECT * FROM mine") == rows(carol, f"SELECT id, region FROM {ORDERS}")
    assert {r[1] for r in rows(carol, "SELECT * FROM mine")} == {"EMEA"}


def test_a_temp_view_never_shows_a_column_hidden_from_its_creator(lakehouse):
    bob = lakehouse.session("bob")
    bob.sql("CREATE TEMP VIEW c AS SELECT * FROM main.sales.customers")
    assert bob.sql("SELECT * FROM c").columns == ["id", "name", "email", "country"]
    with pytest.raises(LakegateError, match="phone"):
        bob.sql("SELECT phone FROM c").collect()


def test_a_temp_view_shows_masked_values_as_masked(lakehouse):
    carol = lakehouse.session("carol")
    carol.sql("CREATE TEMP VIEW c AS SELECT id, email FROM main.sales.customers")
    assert rows(carol, "SELECT * FROM c") == rows(
        carol, "SELECT id, email FROM main.sales.customers"
    )
    assert all("@" not in (r[1] or "") for r in rows(carol, "SELECT * FROM c"))


def test_a_temp_view_name_resolves_only_in_its_creators_session(lakehouse):
    alice = lakehouse.session("alice")
    alice.sql(f"CREATE TEMP VIEW only_alice AS SELECT id FROM {ORDERS}")
    assert rows(alice, "SELECT count(*) FROM only_alice")[0][0] > 0
    for other in (lakehouse.session("bob"), lakehouse.session("alice")):
        with pytest.raises(AccessDenied, match=r"main\.default\.only_alice"):
            other.sql("SELECT * FROM only_alice")


def test_no_spark_temp_view_is_registered(lakehouse):
    s = lakehouse.session("alice")
    s.sql(f"CREATE TEMP VIEW not_in_spark AS SELECT id FROM {ORDERS}")
    names = {t.name for t in lakehouse.spark.catalog.listTables()}
    assert "not_in_spark" not in names


def test_a_view_shadows_a_catalog_table_of_its_one_part_name(lakehouse):
    s = lakehouse.session("alice")
    s.sql("USE main.sales")
    s.sql("CREATE TEMP VIEW orders AS SELECT id FROM main.sales.customers")
    assert s.sql("SELECT * FROM orders").columns == ["id"]
    assert "region" in s.sql(f"SELECT * FROM {ORDERS}").columns  # qualified: the table
    assert s.sql("WITH orders AS (SELECT 1 AS x) SELECT * FROM orders").columns == ["x"]


def test_a_view_reads_the_tables_of_the_namespace_it_was_created_in(lakehouse):
    s = lakehouse.session("alice")
    s.sql("USE main.sales")
    s.sql("CREATE TEMP VIEW o AS SELECT id, region FROM orders")
    s.sql("USE main.hr")
    assert rows(s, "SELECT * FROM o") == rows(s, f"SELECT id, region FROM {ORDERS}")


def test_a_view_column_list_renames_its_columns(lakehouse):
    s = lakehouse.session("alice")
    s.sql(
        "CREATE TEMP VIEW r (order_id, where_from COMMENT 'region') AS "
        f"SELECT id, region FROM {ORDERS}"
    )
    assert s.sql("SELECT * FROM r").columns == ["order_id", "where_from"]
    assert s.table("r").columns == ["order_id", "where_from"]


def test_a_tightened_policy_applies_to_an_existing_view(make_lakegate):
    policies = """
    groups: {admins: [admin]}
    grants:
      - {id: all, principals: [admin, ann], privileges: [manage], on: "*.*.*"}
    """
    lg = make_lakegate(
        "temp-view-tighten",
        policies,
        [
            "CREATE CATALOG t",
            "CREATE SCHEMA t.s",
            "CREATE TABLE t.s.x (id INT, secret STRING)",
            "INSERT INTO t.s.x VALUES (1, 'a'), (2, 'b')",
        ],
    )
    ann = lg.session("ann")
    ann.sql("CREATE TEMP VIEW v AS SELECT id, secret FROM t.s.x")
    assert rows(ann, "SELECT * FROM v") == [(1, "a"), (2, "b")]
    (lg.config.policies / "tight.yaml").write_text(
        "row_filters:\n  - {id: one, on: t.s.x, principals: [ann], where: 'id = 1'}\n"
        "column_masks:\n  - {id: m, on: t.s.x, columns: [secret], mask: redact, "
        "principals: [ann]}\n"
    )
    assert lg.reload_policies()
    got = rows(ann, "SELECT * FROM v")
    assert [r[0] for r in got] == [1] and got[0][1] != "a"


# create, replace, drop ------------------------------------------------------------------


def test_or_replace_over_itself_expands_the_old_view_and_never_loops(lakehouse):
    s = lakehouse.session("carol")
    s.sql(f"CREATE TEMP VIEW v AS SELECT id, amount FROM {ORDERS}")
    before = rows(s, "SELECT * FROM v")
    s.sql("CREATE OR REPLACE TEMP VIEW v AS SELECT id FROM v WHERE amount > 0")
    assert rows(s, "SELECT * FROM v") == [(r[0],) for r in before if r[1] > 0]


def test_a_view_over_a_view_keeps_the_old_definition_when_that_one_is_replaced(lakehouse):
    s = lakehouse.session("alice")
    s.sql("CREATE TEMP VIEW base AS SELECT 1 AS n")
    s.sql("CREATE TEMP VIEW top AS SELECT n FROM base")
    s.sql("CREATE OR REPLACE TEMP VIEW base AS SELECT 2 AS n")
    assert rows(s, "SELECT * FROM top") == [(1,)]
    s.sql("DROP VIEW base")
    assert rows(s, "SELECT * FROM top") == [(1,)]


def test_create_without_or_replace_refuses_an_existing_name(lakehouse):
    s = lakehouse.session("alice")
    s.sql("CREATE TEMP VIEW dup AS SELECT 1 AS n")
    with pytest.raises(LakegateError, match=r"(?i)temporary view dup already exists"):
        s.sql("CREATE TEMPORARY VIEW DUP AS SELECT 2 AS n")
    assert rows(s, "SELECT * FROM dup") == [(1,)]


def test_drop_view_removes_a_temp_view_of_the_session(lakehouse):
    s = lakehouse.session("alice")
    s.sql("CREATE TEMP VIEW gone AS SELECT 1 AS n")
    s.sql("DROP VIEW gone")
    with pytest.raises(AccessDenied):
        s.sql("SELECT * FROM gone")
    s.sql("DROP VIEW IF EXISTS gone")
    with pytest.raises(LakegateError, match="temporary view gone does not exist"):
        s.sql("DROP VIEW gone")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE VIEW p AS SELECT 1", "permanent view"),
        ("CREATE GLOBAL TEMPORARY VIEW g AS SELECT 1", "global temporary views are refused"),
        ("CREATE TEMP VIEW global_temp.g AS SELECT 1", "is qualified"),
        ("CREATE TEMP VIEW f USING parquet OPTIONS (path '/tmp')", "reads files by path"),
        ("CREATE TEMP VIEW IF NOT EXISTS f AS SELECT 1", "IF NOT EXISTS"),
        ("CREATE TEMP VIEW `a/b` AS SELECT 1", "invalid name"),
        ("DROP VIEW global_temp.g", "is qualified"),
        ("DROP TABLE w", "w is a temporary view; drop it with DROP VIEW"),
        ("INSERT INTO w VALUES (1)", "temporary view w cannot be written to"),
        ("SELECT * FROM w VERSION AS OF 1", "on temporary view w is not governed"),
        ("DESCRIBE w", "DESCRIBE of a temporary view"),
    ],
)
def test_view_statements_outside_the_session_scope_are_refused(lakehouse, sql, message):
    s = lakehouse.session("alice")
    s.sql("CREATE TEMP VIEW w AS SELECT 1 AS n")
    with pytest.raises(LakegateError, match=message):
        s.sql(sql)


def test_a_view_over_a_table_its_creator_may_not_read_is_refused(lakehouse):
    mallory = lakehouse.session("mallory")
    with pytest.raises(AccessDenied, match=r"main\.sales\.orders"):
        mallory.sql(f"CREATE TEMP VIEW e AS SELECT * FROM {ORDERS}")
    assert len(mallory.temp_views) == 0


def test_rest_statements_have_no_session_to_keep_a_view(lakehouse):
    rest = lakehouse.session("alice", proto="rest")
    with pytest.raises(Refused, match="REST statements and one-off plans have none"):
        rest.sql("CREATE TEMP VIEW r AS SELECT 1 AS n")


# caps -------------------------------------------------------------------------------------


def test_a_session_holds_a_bounded_number_of_views(lakehouse, monkeypatch):
    monkeypatch.setattr(views, "MAX_TEMP_VIEWS", 3)
    s = lakehouse.session("alice")
    for i in range(3):
        s.sql(f"CREATE TEMP VIEW cap{i} AS SELECT {i} AS n")
    s.sql("CREATE OR REPLACE TEMP VIEW cap0 AS SELECT 9 AS n")  # a replacement is no new view
    with pytest.raises(Refused, match="at most 3 temporary views"):
        s.sql("CREATE TEMP VIEW cap3 AS SELECT 3 AS n")


def test_a_chain_of_views_cannot_outgrow_the_statement_size_limit(lakehouse, monkeypatch):
    monkeypatch.setattr(views, "MAX_STATEMENT_CHARS", 2_000)
    s = lakehouse.session("alice")
    s.sql("CREATE TEMP VIEW big0 AS SELECT '" + "x" * 300 + "' AS s")
    s.sql("CREATE TEMP VIEW big1 AS SELECT * FROM big0 UNION ALL SELECT * FROM big0")
    s.sql("CREATE TEMP VIEW big2 AS SELECT * FROM big1 UNION ALL SELECT * FROM big1")
    with pytest.raises(Refused, match="expand beyond 2000 characters"):
        s.sql("CREATE TEMP VIEW big3 AS SELECT * FROM big2 UNION ALL SELECT * FROM big2")
    with pytest.raises(Refused, match="expand beyond 2000 characters"):
        s.sql("SELECT * FROM big2 UNION ALL SELECT * FROM big2")


def test_a_chain_of_views_cannot_outgrow_the_nesting_limit(lakehouse, monkeypatch):
    from governance.sql import parse

    monkeypatch.setattr(parse, "MAX_NESTING", 6)
    s = lakehouse.session("alice")
    s.sql("CREATE TEMP VIEW d0 AS SELECT 1 AS n")
    with pytest.raises(SqlParseError, match="the limit is 6"):
        for i in range(1, 10):
            s.sql(f"CREATE TEMP VIEW d{i} AS SELECT n FROM d{i - 1}")
    assert 2 <= len(s.temp_views) < 10


# audit ------------------------------------------------------------------------------------


def test_creating_a_view_records_the_tables_it_reads_and_each_use_records_them_again(lakehouse):
    s = lakehouse.session("carol")
    created = audit_lines(
        lakehouse,
        lambda: s.sql(f"CREATE TEMP VIEW audited AS SELECT id, region FROM {ORDERS}"),
    )
    assert [(ln["cmd"], ln["src"], ln["phase"], ln["succeeded"]) for ln in created] == [
        ("create", ORDERS, "intent", "false"),
        ("create", ORDERS, "outcome", "true"),
    ]
    assert created[-1]["columns"] == "id,region"
    assert created[-1]["rowFilters"] == "emea-only,no-test-orders"
    used = audit_lines(lakehouse, lambda: s.sql("SELECT id FROM audited"))
    assert [(ln["cmd"], ln["src"], ln["rowFilters"]) for ln in used] == [
        ("select", ORDERS, "emea-only,no-test-orders")
    ]
    dropped = audit_lines(lakehouse, lambda: s.sql("DROP VIEW audited"))
    assert [(ln["cmd"], ln["src"], ln["succeeded"]) for ln in dropped] == [
        ("drop", "null", "false"),
        ("drop", "null", "true"),
    ]
