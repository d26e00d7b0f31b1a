"""Temporary views through the gateway (issue #12): kept per (verified user, session id) in
the user's governed session, never in the backend, and governed again at every read."""

from __future__ import annotations

import uuid

import pytest
from connect_testkit import audit_lines, rows

ORDERS = "SELECT id, region FROM main.sales.orders"


def test_a_dataframe_view_of_spark_sql_reads_governed_through_table_and_sql(
    remote, embedded
) -> None:
    s = remote("carol")
    s.sql(ORDERS).createOrReplaceTempView("mine")
    assert rows(s.table("mine")) == embedded("carol", ORDERS)
    assert rows(s.sql("SELECT * FROM mine")) == embedded("carol", ORDERS)


def test_a_sql_temp_view_is_read_by_spark_table(remote, embedded) -> None:
    s = remote("carol")
    s.sql(f"CREATE OR REPLACE TEMP VIEW sqlview AS {ORDERS}")
    assert rows(s.table("sqlview")) == embedded("carol", ORDERS)


def test_a_dataframe_view_of_dataframe_operations_is_governed_at_each_read(
    remote, embedded
) -> None:
    s = remote("carol")
    df = s.table("main.sales.orders").select("id", "region").filter("id > 0")
    df.createOrReplaceTempView("ops")
    expected = [r for r in embedded("carol", ORDERS) if r[0] > 0]
    assert rows(s.table("ops")) == expected
    assert rows(s.table("ops").select("region").distinct()) == sorted(
        {(r[1],) for r in expected}, key=repr
    )
    with pytest.raises(Exception, match=r"spark\.table"):
        s.sql("SELECT * FROM ops").collect()


def test_two_users_with_one_session_id_never_see_each_others_views(remote, embedded) -> None:
    sid = str(uuid.uuid4())
    carol = remote("carol", extra=f";session_id={sid}")
    erin = remote("erin", extra=f";session_id={sid}")
    carol.sql(ORDERS).createOrReplaceTempView("same")
    erin.table("main.sales.orders").select("id").createOrReplaceTempView("same")
    assert rows(carol.table("same")) == embedded("carol", ORDERS)
    assert erin.table("same").columns == ["id"]
    other = remote("carol")
    with pytest.raises(Exception, match="access denied"):
        other.table("same").collect()


def test_a_global_temp_view_is_refused(remote) -> None:
    with pytest.raises(Exception, match="global temporary views are refused"):
        remote("erin").sql(ORDERS).createOrReplaceGlobalTempView("g")


def test_create_temp_view_without_replace_refuses_an_existing_name(remote) -> None:
    s = remote("alice")
    s.sql("SELECT 1 AS n").createTempView("once")
    with pytest.raises(Exception, match="temporary view once already exists"):
        s.sql("SELECT 2 AS n").createTempView("once")


def test_creating_a_dataframe_view_records_the_tables_it_reads(remote, audit_dir) -> None:
    before = len(audit_lines(audit_dir))
    s = remote("dana")
    s.table("main.sales.orders").createOrReplaceTempView("recorded")
    new = audit_lines(audit_dir)[before:]
    assert any(
        ln["cmd"] == "create" and ln["src"] == "main.sales.orders" and ln["ugi"].startswith("dana")
        for ln in new
    )


def test_a_dataframe_view_reads_the_tables_of_the_namespace_it_was_created_in(
    remote, embedded
) -> None:
    s = remote("alice")
    s.sql("USE main.sales")
    s.table("orders").select("id").createOrReplaceTempView("ids")
    s.sql("USE main.hr")
    assert rows(s.table("ids")) == embedded("alice", "SELECT id FROM main.sales.orders")
