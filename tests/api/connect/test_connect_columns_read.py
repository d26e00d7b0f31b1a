"""Through the gateway, a DataFrame's audit lines name the columns it reads after column
pruning (docs/audit-columns.md), not every column of the governed view it was read from;
the same query in SQL, in the embedded session, records the same lists. Each row is one
DataFrame operation, its SQL, and the columns read per table, written by hand; None: the
table's lines name no column (the operation reads no column's values).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from connect_testkit import audit_lines

CUS = "main.sales.customers"  # carol sees id, name, email (hash), phone (last4), country
ORD = "main.sales.orders"  # carol's row filters read region and is_test
USER = "carol"
READ_CMDS = ("select", "insert", "create")


def _join(s: Any) -> Any:
    o, c = s.table(ORD), s.table(CUS)
    return o.join(c, o.customer_id == c.id).select(o.amount, c.name).collect()


def _write(s: Any) -> Any:
    s.table(ORD).where("id < 0").selectExpr(
        "id",
        "id AS customer_id",
        "region",
        "amount",
        "order_date",
        "false AS is_test",
    ).write.insertInto(ORD)


def _f() -> Any:
    from pyspark.sql.connect import functions

    return functions


WRITE_SQL = (
    f"INSERT INTO {ORD} SELECT id, id, region, amount, order_date, false FROM {ORD} WHERE id < 0"
)

# (operation, setup (DataFrame), setup (SQL), the DataFrame action, the same in SQL (None:
# there is none), {table: columns read})
Case = tuple[
    str,
    Callable[[Any], Any] | None,
    str | None,
    Callable[[Any], Any],
    str | None,
    dict[str, str | None],
]
CASES: list[Case] = [
    (
        "select",
        None,
        None,
        lambda s: s.table(CUS).select("name", "email").collect(),
        f"SELECT name, email FROM {CUS}",
        {CUS: "name,email"},
    ),
    (
        "filter",
        None,
        None,
        lambda s: s.table(CUS).filter(_f().col("id") > 2).select("name").collect(),
        f"SELECT name FROM {CUS} WHERE id > 2",
        {CUS: "id,name"},
    ),
    (
        "row filter column is the policy's",
        None,
        None,
        lambda s: s.table(ORD).select("id").collect(),
        f"SELECT id FROM {ORD}",
        {ORD: "id"},
    ),
    (
        "filter on a row filter column",
        None,
        None,
        lambda s: s.table(ORD).where("region = 'EMEA'").select("id").collect(),
        f"SELECT id FROM {ORD} WHERE region = 'EMEA'",
        {ORD: "id,region"},
    ),
    (
        "join",
        None,
        None,
        _join,
        f"SELECT o.amount, c.name FROM {ORD} o JOIN {CUS} c ON o.customer_id = c.id",
        {ORD: "customer_id,amount", CUS: "id,name"},
    ),
    (
        "groupBy agg",
        None,
        None,
        lambda s: s.table(ORD).groupBy("region").agg(_f().sum("amount")).collect(),
        f"SELECT region, sum(amount) FROM {ORD} GROUP BY region",
        {ORD: "region,amount"},
    ),
    (
        "withColumn",
        None,
        None,
        lambda s: (
            s.table(CUS).withColumn("loud", _f().upper("name")).select("id", "loud").collect()
        ),
        f"SELECT id, upper(name) AS loud FROM {CUS}",
        {CUS: "id,name"},
    ),
    (
        "drop",
        None,
        None,
        lambda s: s.table(CUS).drop("email", "phone").collect(),
        f"SELECT id, name, country FROM {CUS}",
        {CUS: "id,name,country"},
    ),
    (
        "distinct",
        None,
        None,
        lambda s: s.table(CUS).select("country").distinct().collect(),
        f"SELECT DISTINCT country FROM {CUS}",
        {CUS: "country"},
    ),
    (
        "orderBy",
        None,
        None,
        lambda s: s.table(CUS).orderBy("country").select("name").collect(),
        f"SELECT name FROM {CUS} ORDER BY country",
        {CUS: "name,country"},
    ),
    (
        "union",
        None,
        None,
        lambda s: s.table(ORD).select("id").union(s.table(CUS).select("id")).collect(),
        f"SELECT id FROM {ORD} UNION ALL SELECT id FROM {CUS}",
        {ORD: "id", CUS: "id"},
    ),
    (
        "temp view (SQL)",
        lambda s: s.sql(f"SELECT id, name, email FROM {CUS}").createOrReplaceTempView("cols_v"),
        f"CREATE OR REPLACE TEMP VIEW cols_v AS SELECT id, name, email FROM {CUS}",
        lambda s: s.sql("SELECT name FROM cols_v").collect(),
        "SELECT name FROM cols_v",
        {CUS: "name"},
    ),
    (
        "temp view (DataFrame)",
        lambda s: (
            s.table(CUS)
            .filter("id > 0")
            .select("id", "name", "email")
            .createOrReplaceTempView("cols_w")
        ),
        f"CREATE OR REPLACE TEMP VIEW cols_w AS SELECT id, name, email FROM {CUS} WHERE id > 0",
        lambda s: s.table("cols_w").select("email").collect(),
        "SELECT email FROM cols_w",
        {CUS: "id,email"},
    ),
    (
        "write's source",
        None,
        None,
        _write,
        WRITE_SQL,
        {ORD: "id,region,amount,order_date"},
    ),
    (
        "toPandas",
        None,
        None,
        lambda s: s.table(CUS).select("name", "country").toPandas(),
        f"SELECT name, country FROM {CUS}",
        {CUS: "name,country"},
    ),
    (
        "show",
        None,
        None,
        lambda s: s.table(CUS).select("name").show(),
        f"SELECT name FROM {CUS}",
        {CUS: "name"},
    ),
    (
        "count",
        None,
        None,
        lambda s: s.table(ORD).count(),
        f"SELECT count(*) FROM {ORD}",
        {ORD: None},
    ),
    (
        "count after select",
        None,
        None,
        lambda s: s.table(CUS).select("name", "email").count(),
        f"SELECT count(*) FROM (SELECT name, email FROM {CUS}) t",
        {CUS: None},
    ),
    (
        "spark.sql",
        None,
        None,
        lambda s: s.sql(f"SELECT name, email FROM {CUS}").collect(),
        f"SELECT name, email FROM {CUS}",
        {CUS: "name,email"},
    ),
    (
        ".columns reads no data",
        None,
        None,
        lambda s: s.table(CUS).select("name", "email").columns,
        None,
        {CUS: None},
    ),
]


def read_columns(lines: list[dict[str, str]], ugi: str) -> dict[str, set[str] | None]:
    """Per table, the columns an operation's lines say it read (all of its read lines: a
    Connect operation may write several, e.g. `spark.sql` and then its run)."""
    out: dict[str, set[str]] = {}
    for ln in lines:
        if (
            not ln.get("ugi", "").startswith(ugi)
            or ln.get("cmd") not in READ_CMDS
            or ln.get("src") == "null"
            or ln.get("phase") == "intent"
        ):
            continue
        cols = set() if ln["columns"] == "null" else set(ln["columns"].split(","))
        out.setdefault(ln["src"], set()).update(cols)
    return {k: (v or None) for k, v in out.items()}


def expected_sets(expected: dict[str, str | None]) -> dict[str, set[str] | None]:
    return {k: (set(v.split(",")) if v else None) for k, v in expected.items()}


@pytest.mark.parametrize(
    ("op", "df_setup", "sql_setup", "action", "sql", "expected"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_the_columns_a_dataframe_reads_are_recorded_as_sql_records_them(
    remote, connect_lakegate, audit_dir, op, df_setup, sql_setup, action, sql, expected
) -> None:
    s = remote(USER)
    if df_setup is not None:
        df_setup(s)
    before = len(audit_lines(audit_dir))
    action(s)
    got = read_columns(audit_lines(audit_dir)[before:], f"{USER} (auth:TOKEN)")
    assert got == expected_sets(expected), op
    if sql is None:
        return
    embedded = connect_lakegate.session(USER)
    if sql_setup is not None:
        embedded.sql(sql_setup)
    before = len(audit_lines(audit_dir))
    embedded.sql(sql)
    got = read_columns(audit_lines(audit_dir)[before:], f"{USER} (auth:SIMPLE)")
    assert got == expected_sets(expected), f"{op} (SQL)"


def test_a_read_in_a_plan_that_never_ran_records_no_column(remote, audit_dir) -> None:
    s = remote(USER)
    before = len(audit_lines(audit_dir))
    with pytest.raises(Exception, match="UNRESOLVED_COLUMN"):
        s.table(CUS).select("name", "no_such_column").collect()
    reads = [
        ln
        for ln in audit_lines(audit_dir)[before:]
        if ln["cmd"] == "select" and ln["ugi"].startswith(f"{USER} ")
    ]
    assert [(ln["src"], ln["succeeded"], ln["columns"]) for ln in reads] == [(CUS, "false", "null")]
    assert reads[0]["reason"].startswith("not run:")


def test_masks_are_recorded_only_for_masked_columns_read(remote, audit_dir) -> None:
    s = remote(USER)
    before = len(audit_lines(audit_dir))
    s.table(CUS).select("name", "email").collect()
    (line,) = [
        ln
        for ln in audit_lines(audit_dir)[before:]
        if ln["cmd"] == "select" and ln["ugi"].startswith(f"{USER} ")
    ]
    assert (line["columns"], line["masked"]) == ("name,email", "email:hash")
