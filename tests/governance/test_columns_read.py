"""The audit's `columns` are the columns a statement reads, after column pruning
(docs/audit-columns.md): what Spark's analysed plan uses of each governed view, mapped back
to the table's names, in the table's order. A column only a row filter or a mask reads is
the policy's, not the user's; a column the user filters, joins, groups or sorts on is read.

Each row is an operation and the lists written by hand; the embedded session's outcome
lines must say exactly that (tests/api/connect/test_connect_columns_read.py holds the
DataFrame side of the same table).
"""

from __future__ import annotations

from typing import Any

import pytest

CUS = "main.sales.customers"  # carol sees id, name, email (hash), phone (last4), country
ORD = "main.sales.orders"  # carol's row filters read region and is_test

# (operation, user, SQL, {table: columns read}); None: the line names no column
CASES = [
    ("select", "carol", f"SELECT name, email FROM {CUS}", {CUS: "name,email"}),
    ("select star", "carol", f"SELECT * FROM {CUS}", {CUS: "id,name,email,phone,country"}),
    ("filter", "carol", f"SELECT name FROM {CUS} WHERE id > 2", {CUS: "id,name"}),
    ("row filter column is the policy's", "carol", f"SELECT id FROM {ORD}", {ORD: "id"}),
    (
        "the user's own filter on a row filter column",
        "carol",
        f"SELECT id FROM {ORD} WHERE region = 'EMEA'",
        {ORD: "id,region"},
    ),
    (
        "join",
        "carol",
        f"SELECT o.amount, c.name FROM {ORD} o JOIN {CUS} c ON o.customer_id = c.id",
        {ORD: "customer_id,amount", CUS: "id,name"},
    ),
    (
        "groupBy agg",
        "carol",
        f"SELECT region, sum(amount) AS total FROM {ORD} GROUP BY region",
        {ORD: "region,amount"},
    ),
    ("withColumn", "carol", f"SELECT id, upper(name) AS loud FROM {CUS}", {CUS: "id,name"}),
    (
        "drop",
        "carol",
        f"SELECT id, name, country FROM (SELECT id, name, email, country FROM {CUS}) t",
        {CUS: "id,name,country"},
    ),
    ("distinct", "carol", f"SELECT DISTINCT country FROM {CUS}", {CUS: "country"}),
    ("orderBy", "carol", f"SELECT name FROM {CUS} ORDER BY country", {CUS: "name,country"}),
    (
        "union",
        "carol",
        f"SELECT id FROM {ORD} UNION ALL SELECT id FROM {CUS}",
        {ORD: "id", CUS: "id"},
    ),
    ("count", "carol", f"SELECT count(*) FROM {ORD}", {ORD: None}),
    (
        "count over a projection",
        "carol",
        f"SELECT count(*) FROM (SELECT name, email FROM {CUS}) t",
        {CUS: None},
    ),
    (
        "a subquery's unused columns",
        "carol",
        f"SELECT name FROM (SELECT name, email, phone FROM {CUS}) t",
        {CUS: "name"},
    ),
    (
        "a CTE's unused columns",
        "carol",
        f"WITH t AS (SELECT id, name, email FROM {CUS}) SELECT name FROM t",
        {CUS: "name"},
    ),
    (
        "IN subquery",
        "carol",
        f"SELECT name FROM {CUS} WHERE id IN (SELECT customer_id FROM {ORD})",
        {CUS: "id,name", ORD: "customer_id"},
    ),
    (
        "EXISTS subquery",
        "carol",
        f"SELECT name FROM {CUS} c WHERE EXISTS "
        f"(SELECT 1 FROM {ORD} o WHERE o.customer_id = c.id AND o.amount > 100)",
        {CUS: "id,name", ORD: "customer_id,amount"},
    ),
    (
        "window",
        "carol",
        f"SELECT id, row_number() OVER (PARTITION BY region ORDER BY amount) AS n FROM {ORD}",
        {ORD: "id,region,amount"},
    ),
    (
        "self join, one line per table",
        "alice",
        f"SELECT a.id FROM {ORD} a JOIN {ORD} b ON a.id = b.customer_id",
        {ORD: "id,customer_id"},
    ),
]


def lines_of(lg, user: Any, sql: str) -> list[dict[str, str]]:
    """The outcome lines `sql` wrote (read as soon as `sql()` returns) in a new session of
    `user`, or in `user` when it is a session."""
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size if log.exists() else 0
    (lg.session(user) if isinstance(user, str) else user).sql(sql)
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    out = []
    for raw in text.splitlines():
        body = raw.split(": ", 1)[1]
        out.append(dict(kv.split("=", 1) for kv in body.split("\t")))
    return [ln for ln in out if ln.get("phase") != "intent"]


def columns_by_table(lines: list[dict[str, str]]) -> dict[str, str | None]:
    return {
        ln["src"]: None if ln["columns"] == "null" else ln["columns"]
        for ln in lines
        if ln["src"] != "null"
    }


@pytest.mark.parametrize(("op", "user", "sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_audit_records_the_columns_the_statement_reads_after_pruning(
    lakehouse, op, user, sql, expected
) -> None:
    got = columns_by_table(lines_of(lakehouse, user, sql))
    assert got == expected, op


def test_a_temp_views_creation_records_its_query_and_each_read_what_it_uses(lakehouse) -> None:
    s = lakehouse.session("carol")
    made = lines_of(lakehouse, s, f"CREATE TEMP VIEW cols_t AS SELECT id, name, email FROM {CUS}")
    assert columns_by_table(made) == {CUS: "id,name,email"}
    assert columns_by_table(lines_of(lakehouse, s, "SELECT name FROM cols_t")) == {CUS: "name"}
    counted = lines_of(lakehouse, s, "SELECT count(*) FROM cols_t")
    assert columns_by_table(counted) == {CUS: None}


def test_a_masked_column_not_read_is_not_recorded_as_masked(lakehouse) -> None:
    lines = lines_of(lakehouse, "carol", f"SELECT name FROM (SELECT name, email FROM {CUS}) t")
    assert [(ln["columns"], ln["masked"]) for ln in lines] == [("name", "null")]
    read = lines_of(lakehouse, "carol", f"SELECT length(email) AS n FROM {CUS}")
    assert [(ln["columns"], ln["masked"]) for ln in read] == [("email", "email:hash")]


def test_a_mask_reading_another_column_does_not_record_it(make_lakegate) -> None:
    lg = make_lakegate(
        "columns-masks",
        """
        groups:
          admins: [admin]
        grants:
          - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
          - {id: u-read, principals: [u], privileges: [select], on: "a.s.t"}
        row_filters:
          - {id: u-rows, on: a.s.t, principals: [u], where: "region = 'EU'"}
        column_masks:
          - id: u-card
            on: a.s.t
            columns: [card]
            mask: custom
            expression: "CASE WHEN region = 'EU' THEN {col} ELSE '****' END"
            principals: [u]
        """,
        [
            "CREATE CATALOG a",
            "CREATE SCHEMA a.s",
            "CREATE TABLE a.s.t (id INT, card STRING, region STRING)",
            "INSERT INTO a.s.t VALUES (1, '4111', 'EU'), (2, '5500', 'US')",
        ],
    )
    got = lines_of(lg, "u", "SELECT card FROM a.s.t")
    assert [(ln["columns"], ln["masked"], ln["rowFilters"]) for ln in got] == [
        ("card", "card:custom", "u-rows")
    ]


WRITE_POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: u-all, principals: [u], privileges: [select, modify, create], on: "a.s.*"}
"""


def test_a_writes_source_records_the_columns_it_copies(make_lakegate) -> None:
    lg = make_lakegate(
        "columns-writes",
        WRITE_POLICIES,
        [
            "CREATE CATALOG a",
            "CREATE SCHEMA a.s",
            "CREATE TABLE a.s.src (id INT, name STRING, email STRING, note STRING)",
            "INSERT INTO a.s.src VALUES (1, 'a', 'a@x.de', 'n'), (2, 'b', 'b@x.de', 'm')",
            "CREATE TABLE a.s.dst (id INT, name STRING)",
        ],
    )
    got = lines_of(
        lg,
        "u",
        "INSERT INTO a.s.dst SELECT id, name FROM "
        "(SELECT id, name, email, note FROM a.s.src WHERE note <> 'x') t",
    )
    assert columns_by_table(got) == {"a.s.src": "id,name,note", "a.s.dst": None}
