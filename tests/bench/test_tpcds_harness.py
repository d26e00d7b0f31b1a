"""The shared TPC-DS harness: queries, schema and benchmark policies, checked without Spark.

Both benchmarks (rewrite latency, TPC-DS on Delta) trust these facts; if a duckdb, extension
or sqlglot upgrade changes them, this is where it should show.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest
import sqlglot
import yaml
from sqlglot import exp

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks import tpcds, tpcds_policies, tpcds_tables  # noqa: E402
from catalog.model import TableInfo  # noqa: E402
from governance.policy.model import MASKS, NamePattern, Principal  # noqa: E402

# All 99 transpile with sqlglot 30.30.0, and all ran on Spark 3.5.8 with DuckDB's answers.
EXPECTED_SPARK_QUERIES = 99
SPARK_TYPES = {"int", "bigint", "date", "string"}


@pytest.fixture(scope="module")
def tables() -> list[TableInfo]:
    return tpcds.tpcds_tables("/lake")


@pytest.fixture(scope="module")
def policy(tables: list[TableInfo]) -> dict:
    return yaml.safe_load(tpcds_policies.tpcds_policy_yaml(tables))


def _groups_of(user: str, groups: dict[str, list[str]]) -> set[str]:
    """Every group `user` is in, through nesting (the contract's `group:` members)."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for group, members in groups.items():
            if group in found:
                continue
            for m in members:
                p = Principal.parse(m)
                if (p.kind == "user" and p.name == user) or (p.kind == "group" and p.name in found):
                    found.add(group)
                    changed = True
                    break
    return found


def _applies(principals: list[str], user: str, groups: set[str]) -> bool:
    for text in principals:
        p = Principal.parse(text)
        if p.kind == "any" or (p.kind == "user" and p.name == user):
            return True
        if p.kind == "group" and p.name in groups:
            return True
    return False


def test_99_queries_as_shipped() -> None:
    queries = tpcds.tpcds_queries()
    assert [n for n, _ in queries] == list(range(1, 100))
    for n, sql in queries:
        assert sql.strip(), n
        sqlglot.parse_one(sql, read="duckdb")


def test_load_into_a_given_connection() -> None:
    con = duckdb.connect()
    assert tpcds.load_tpcds(con) is con
    assert con.execute("SELECT count(*) FROM tpcds_queries()").fetchone() == (99,)
    assert tpcds.extension_path().name == "tpcds.duckdb_extension"


def test_spark_transpile_count() -> None:
    assert sqlglot.__version__ == tpcds.SQLGLOT_VERSION  # the count below was checked with it
    spark = tpcds.spark_queries()
    assert len(spark) == EXPECTED_SPARK_QUERIES
    assert len(spark) + len(tpcds.SKIPPED) == 99
    assert not {n for n, _ in spark} & set(tpcds.SKIPPED)
    for n, sql in spark:
        assert sqlglot.parse_one(sql, read="spark") is not None, n


def test_qualified_queries_name_only_tpcds_tables(tables: list[TableInfo]) -> None:
    names = {t.name for t in tables}
    for n, sql in tpcds.spark_queries(qualify="tpcds.sf1"):
        tree = sqlglot.parse_one(sql, read="spark")
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        for t in tree.find_all(exp.Table):
            if t.name.lower() in ctes and not t.db:
                continue
            assert (t.catalog, t.db) == ("tpcds", "sf1"), (n, t.sql())
            assert t.name in names, (n, t.sql())
            assert t.alias, (n, t.sql())  # the bare name stays usable as a qualifier


def test_floor_text_keeps_comma_joins_as_commas() -> None:
    """A' (and the probes) must join as A's text does: an explicit CROSS JOIN where the
    query has a comma turns off Spark's dynamic partition pruning (q21 on `inventory`)."""
    from benchmarks.tpcds_views import qualify

    texts = {n: qualify(sql, "global_temp") for n, sql in tpcds.spark_queries()}
    assert [n for n, sql in texts.items() if "CROSS JOIN" in sql.upper()] == []
    assert "global_temp.inventory AS inventory, global_temp.warehouse AS warehouse" in texts[21]
    assert qualify("SELECT 1 FROM a CROSS JOIN b, c", "db") == (
        "SELECT 1 FROM a CROSS JOIN b CROSS JOIN c"
    )


def test_24_tables_with_spark_types(tables: list[TableInfo]) -> None:
    assert len(tables) == 24
    assert [t.name for t in tables] == sorted(tpcds.TABLES)
    assert set(tpcds_tables.FACT_TABLES) | set(tpcds_tables.DIMENSION_TABLES) == set(tpcds.TABLES)
    for t in tables:
        assert t.full_name == f"tpcds.sf1.{t.name}"
        assert t.location == f"/lake/sf1/{t.name}"
        assert t.columns, t.name
        assert [c.position for c in t.columns] == list(range(len(t.columns)))
        for c in t.columns:
            assert c.type_text in SPARK_TYPES or c.type_text.startswith("decimal("), c
            assert c.type_json and f'"name":"{c.name}"' in c.type_json
    by = {t.name: t for t in tables}
    assert len(by["store_sales"].columns) == 23
    assert by["store_sales"].column("ss_sold_date_sk").type_text == "bigint"
    assert by["store_sales"].column("SS_SALES_PRICE").type_text == "decimal(7,2)"
    assert by["date_dim"].column("d_date").type_text == "date"
    assert by["customer"].column("c_last_review_date_sk").type_text == "int"
    assert by["store"].column("s_store_id").type_text == "string"
    assert '"type":"long"' in by["item"].column("i_item_sk").type_json


def test_tables_catalog_and_schema_are_parameters() -> None:
    t = tpcds.tpcds_tables("s3://b/w/", catalog="bench", schema="sf10")[0]
    assert (t.catalog, t.schema, t.location) == ("bench", "sf10", f"s3://b/w/sf10/{t.name}")


@pytest.mark.parametrize(
    ("duck", "spark"),
    [
        ("INTEGER", "int"),
        ("BIGINT", "bigint"),
        ("DECIMAL(15,2)", "decimal(15,2)"),
        ("VARCHAR", "string"),
        ("CHAR(16)", "string"),
        ("DATE", "date"),
        ("DOUBLE", "double"),
        ("BOOLEAN", "boolean"),
    ],
)
def test_spark_type_mapping(duck: str, spark: str) -> None:
    assert tpcds.spark_type(duck)[0] == spark


def test_unknown_duckdb_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="no Spark type"):
        tpcds.spark_type("UNION(a INT)")


def test_policy_has_a_filter_on_every_table_for_bench(tables: list[TableInfo], policy: dict):
    groups = _groups_of("bench", policy["groups"])
    assert {"analysts", "regional"} <= groups
    ids = [f["id"] for f in policy["row_filters"]]
    assert len(ids) == len(set(ids)) and all(ids)
    for t in tables:
        mine = [
            f
            for f in policy["row_filters"]
            if NamePattern.parse(f["on"]).matches_table(t.catalog, t.schema, t.name)
            and _applies(f["principals"], "bench", groups)
        ]
        assert any(f.get("kind", "permissive") == "permissive" for f in mine), t.name
        for f in mine:
            cols = {c.name.lower() for c in sqlglot.parse_one(f["where"]).find_all(exp.Column)}
            assert cols, f["id"]
            assert all(t.column(c) for c in cols), (f["id"], cols)
    member_filters = [f for f in policy["row_filters"] if "is_member('regional')" in f["where"]]
    assert len(member_filters) >= 5


def test_policy_has_a_mask_on_every_table_for_bench(tables: list[TableInfo], policy: dict):
    groups = _groups_of("bench", policy["groups"])
    tags: dict[str, set[str]] = {k.lower(): set(v) for k, v in policy["tags"].items()}
    ids = [m["id"] for m in policy["column_masks"]]
    assert len(ids) == len(set(ids)) and all(ids)
    kinds = {m["mask"] for m in policy["column_masks"]}
    assert {"hash", "last4", "redact", "null", "year"} <= kinds <= set(MASKS)
    for t in tables:
        hit: dict[str, list[tuple[int, str]]] = {}
        for m in policy["column_masks"]:
            if not NamePattern.parse(m["on"]).matches_table(t.catalog, t.schema, t.name):
                continue
            if not _applies(m.get("principals", ["*"]), "bench", groups):
                continue
            if _applies(m.get("except", []), "bench", groups):
                continue
            for col in t.columns:
                named = col.name.lower() in m.get("columns", [])
                tagged = tags.get(f"{t.full_name}.{col.name}", set()) & set(m.get("tags", []))
                if named or tagged:
                    hit.setdefault(col.name, []).append((m.get("priority", 0), m["mask"]))
                    if m["mask"] in ("redact", "last4", "first4", "email_domain"):
                        assert col.type_text == "string", (m["id"], col)
                    if m["mask"] == "year":
                        assert col.type_text in ("date", "timestamp"), (m["id"], col)
                    if m["mask"] == "custom":
                        assert "{col}" in m["expression"], m["id"]
        assert hit, f"no mask hits a column of {t.name} for bench"
        for col, rules in hit.items():
            assert len(rules) == 1, (t.name, col, rules)  # one mask per column, no ties
        for m in policy["column_masks"]:
            for c in m.get("columns", []):
                on = NamePattern.parse(m["on"])
                if on.matches_table(t.catalog, t.schema, t.name):
                    assert t.column(c), (m["id"], c)
    for key in tags:
        pattern = NamePattern.parse(key, allow_column=True)
        table = next(t for t in tables if pattern.matches_table(t.catalog, t.schema, t.name))
        assert table.column(pattern.column), key


def test_policy_grants_select_to_analysts(policy: dict) -> None:
    (grant,) = policy["grants"]
    assert grant["principals"] == ["group:analysts"]
    assert grant["privileges"] == ["select"]
    assert grant["on"] == "tpcds.sf1.*"
    assert grant.get("effect", "allow") == "allow"


def test_policy_follows_catalog_and_schema(tables: list[TableInfo]) -> None:
    text = tpcds_policies.tpcds_policy_yaml(tables, catalog="bench", schema="sf10")
    doc = yaml.safe_load(text)
    assert doc["grants"][0]["on"] == "bench.sf10.*"
    assert all(f["on"].startswith("bench.sf10.") for f in doc["row_filters"])
    assert "tpcds.sf1" not in text


def test_policy_for_a_subset_and_for_a_wrong_schema(tables: list[TableInfo]) -> None:
    few = [t for t in tables if t.name in ("store", "store_sales")]
    doc = yaml.safe_load(tpcds_policies.tpcds_policy_yaml(few))
    assert {f["on"] for f in doc["row_filters"]} == {"tpcds.sf1.store", "tpcds.sf1.store_sales"}
    with pytest.raises(ValueError, match="not TPC-DS tables"):
        tpcds_policies.tpcds_policy_yaml([*few, TableInfo("tpcds", "sf1", "orders", "/x", ())])


def test_generate_parquet_matches_the_catalog_schema(tmp_path: Path, tables: list[TableInfo]):
    paths = tpcds.generate_parquet(0, str(tmp_path))
    assert set(paths) == set(tpcds.TABLES)
    con = duckdb.connect()
    for t in tables:
        assert Path(paths[t.name]) == tmp_path / t.name
        rows = con.execute(
            f"DESCRIBE SELECT * FROM read_parquet('{paths[t.name]}/*.parquet')"
        ).fetchall()
        got = [(name, tpcds.spark_type(dtype)[0]) for name, dtype, *_ in rows]
        assert got == [(c.name, c.type_text) for c in t.columns], t.name


def test_policy_passes_the_real_validator_and_enforcer(tables: list[TableInfo]) -> None:
    """The product's own loader, validator and enforcer agree: bench is filtered and masked."""
    from governance.policy.enforcer import PolicyEnforcer
    from governance.policy.loader import load_policy_text
    from governance.policy.validate import format_problems, validate_policy_text

    files = {"bench.yaml": tpcds_policies.tpcds_policy_yaml(tables)}
    problems = validate_policy_text(files)
    assert not problems, format_problems(problems)
    enforcer = PolicyEnforcer(load_policy_text(files))
    bench = enforcer.identity(tpcds_policies.BENCH_USER)
    for t in tables:
        access = enforcer.table_access(bench, t)
        assert access.can_select, t.name
        assert access.row_filters, t.name
        assert access.masks, t.name
        assert not access.hidden_columns, t.name
    assert not enforcer.table_access(enforcer.identity("nobody"), tables[0]).can_select
