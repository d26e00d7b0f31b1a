"""Issue 10 item 4: names are names, never paths (catalog/names.py).

One test per rule: each forbidden character class, each statement kind, each entry point
(SQL, `register_table`, the catalog store, the REST API), the warehouse containment check,
and the exact attack from the issue on a real Delta table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from catalog.catalog import Catalog, CatalogError
from catalog.model import TableInfo
from catalog.names import InvalidName, check_name
from catalog.store import SqliteStore
from governance.errors import Refused
from governance.planning.dispatch import Planner

BAD_PARTS = {
    "slash": "a/b",
    "backslash": "a\\b",
    "dot_dot": "..",
    "nul": "a\x00b",
    "control_char": "a\nb",
    "bidi_override": "abc\u202e",
    "zero_width_space": "ab\u200bc",
    "unicode_look_alike": "\u0430dmin",  # Cyrillic a
    "dot_in_quoted_part": "a.b",
    "leading_space": " ab",
    "trailing_space": "ab ",
    "empty": "",
    "too_long": "a" * 256,
}


@pytest.mark.parametrize("part", BAD_PARTS.values(), ids=BAD_PARTS.keys())
def test_name_part_outside_allowed_set_is_refused(part: str) -> None:
    with pytest.raises(InvalidName):
        check_name(part)


@pytest.mark.parametrize("part", ["orders", "Orders_2024", "a-b", "_x", "a" * 255])
def test_allowed_name_part_is_lower_cased(part: str) -> None:
    assert check_name(part) == part.lower()


def _q(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


# Every statement kind that takes a name; {n} is a quoted bad name part.
STATEMENTS = {
    "create_schema": "CREATE SCHEMA main.{n}",
    "create_table": "CREATE TABLE main.sales.{n} (a INT)",
    "create_table_as_select": "CREATE TABLE main.sales.{n} AS SELECT 1 AS a",
    "drop_table": "DROP TABLE main.sales.{n}",
    "drop_table_if_exists": "DROP TABLE IF EXISTS main.sales.{n}",
    "use_schema": "USE main.{n}",
    "use_catalog": "USE CATALOG {n}",
    "describe": "DESCRIBE TABLE main.sales.{n}",
    "select": "SELECT * FROM main.sales.{n}",
    "select_join": "SELECT * FROM main.sales.orders o JOIN main.{n}.orders x ON o.id = x.id",
    "insert": "INSERT INTO main.sales.{n} VALUES (1)",
    "update": "UPDATE main.sales.{n} SET a = 1",
    "delete": "DELETE FROM main.sales.{n} WHERE a = 1",
    "merge": "MERGE INTO main.sales.{n} t USING main.sales.orders s ON t.id = s.id "
    "WHEN MATCHED THEN DELETE",
}


@pytest.mark.parametrize(
    "bad",
    ["a/b", "a\\b", "..", "a\x01b", "x\u202ey"],
    ids=["slash", "backslash", "dot_dot", "control_char", "bidi"],
)
@pytest.mark.parametrize("template", STATEMENTS.values(), ids=STATEMENTS.keys())
def test_every_statement_kind_refuses_invalid_name_part(
    planner: Callable[..., Planner],
    template: str,
    bad: str,
) -> None:
    with pytest.raises(Refused, match="invalid name"):
        planner("root").plan(template.format(n=_q(bad)))


@pytest.mark.parametrize(
    "stmt",
    ["CREATE CATALOG \u0430dmin", "SHOW SCHEMAS IN \u0430dmin", "SHOW TABLES FROM main.s\u0430les"],
    ids=["create_catalog", "show_schemas", "show_tables"],
)
def test_text_matched_statements_refuse_unicode_look_alike_names(
    planner: Callable[..., Planner],
    stmt: str,
) -> None:
    with pytest.raises(Refused, match="invalid name"):
        planner("root").plan(stmt)


def test_create_table_refuses_the_issue_path_name(planner: Callable[..., Planner]) -> None:
    stmt = "CREATE TABLE main.sandbox.`/some/path/_delta_log/00000000000000000002.json` (a INT)"
    with pytest.raises(Refused, match="path separator"):
        planner("root").plan(stmt)


@pytest.mark.parametrize(
    "stmt",
    [
        "CREATE TABLE main.sales.t1 (a INT COMMENT 'x`) USING parquet LOCATION /tmp --') "
        "PARTITIONED BY (a)",
        "CREATE TABLE main.sales.t2 USING delta AS SELECT 'USING parquet' AS `a``b`",
    ],
)
def test_create_table_is_one_delta_statement_whatever_its_text(
    planner: Callable[..., Planner], stmt: str
) -> None:
    """The CREATE TABLE Lakegate runs is built as a tree: comments, literals and quoted
    names in the user's text cannot add a clause, a provider or a location."""
    sql = planner("root").plan(stmt).sql
    (tree,) = sqlglot.parse(sql, read="spark")
    assert isinstance(tree, exp.Create)
    props = tree.args["properties"].expressions
    assert [p.name.lower() for p in props if isinstance(p, exp.FileFormatProperty)] == ["delta"]
    assert not any(isinstance(p, exp.LocationProperty) for p in props)
    assert tree.find(exp.Table).db == "delta"


@pytest.fixture
def fresh_catalog(tmp_path: Path) -> Catalog:
    cat = Catalog(SqliteStore(tmp_path / "catalog.db"), tmp_path / "warehouse")
    cat.create_catalog("main")
    cat.create_schema("main", "s")
    return cat


@pytest.mark.parametrize(
    "bad", ["a/b", "..", "a\x00b", "a\u200bb"], ids=["slash", "dot_dot", "nul", "zero_width"]
)
def test_catalog_store_refuses_invalid_parts(fresh_catalog: Catalog, bad: str) -> None:
    with pytest.raises(CatalogError):
        fresh_catalog.create_catalog(bad)
    with pytest.raises(CatalogError):
        fresh_catalog.create_schema("main", bad)
    with pytest.raises(CatalogError):
        fresh_catalog.register_table(TableInfo("main", "s", bad, "/tmp/x", ()))
    with pytest.raises(CatalogError):
        fresh_catalog.managed_location("main", "s", bad)
    assert fresh_catalog.tables() == []


def test_managed_location_through_existing_symlink_out_of_warehouse_is_refused(
    fresh_catalog: Catalog,
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (fresh_catalog.warehouse / "main").mkdir(parents=True)
    (fresh_catalog.warehouse / "main" / "s").symlink_to(outside)
    with pytest.raises(CatalogError, match="not inside the warehouse"):
        fresh_catalog.managed_location("main", "s", "t")


def test_managed_location_lies_inside_warehouse(fresh_catalog: Catalog) -> None:
    loc = Path(fresh_catalog.managed_location("Main", "S", "T"))
    assert loc == fresh_catalog.warehouse / "main" / "s" / "t"


# End to end on real Delta tables ---------------------------------------------------------

NAMES_POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
"""


@pytest.fixture(scope="module")
def names_lakehouse(make_lakegate):
    return make_lakegate(
        "names",
        NAMES_POLICIES,
        [
            "CREATE CATALOG main",
            "CREATE SCHEMA main.sandbox",
            "CREATE TABLE main.sandbox.victim (a INT)",
            "INSERT INTO main.sandbox.victim VALUES (1), (2)",
            "INSERT INTO main.sandbox.victim VALUES (3)",
        ],
    )


def _victim(lg) -> list[int]:
    rows = lg.session("admin").sql("SELECT a FROM main.sandbox.victim").collect()
    return sorted(r[0] for r in rows)


def test_issue_attack_leaves_victim_table_readable_and_unchanged(names_lakehouse) -> None:
    lg = names_lakehouse
    victim = Path(lg.catalog.table("main", "sandbox", "victim").location)
    log_before = sorted(p.name for p in (victim / "_delta_log").iterdir())
    assert _victim(lg) == [1, 2, 3]
    commit = victim / "_delta_log" / "00000000000000000002.json"
    with pytest.raises(Refused, match="invalid name"):
        lg.session("admin").sql(f"CREATE TABLE main.sandbox.{_q(str(commit))} (a INT)")
    assert sorted(p.name for p in (victim / "_delta_log").iterdir()) == log_before
    assert _victim(lg) == [1, 2, 3]


def test_register_table_refuses_path_in_name(names_lakehouse) -> None:
    lg = names_lakehouse
    victim = lg.catalog.table("main", "sandbox", "victim").location
    with pytest.raises(CatalogError, match="path separator"):
        lg.register_table("main.sandbox.a/b", victim)
    assert [t.name for t in lg.catalog.tables("main", "sandbox")] == ["victim"]


def test_drop_deletes_files_only_at_the_tables_own_managed_location(names_lakehouse) -> None:
    lg = names_lakehouse
    # a catalog registered before issue 25 may still hold two names for one location
    old = lg.catalog.table("main", "sandbox", "victim")
    lg.catalog.store.put_table(dataclasses.replace(old, name="alias"))
    lg.session("admin").sql("DROP TABLE main.sandbox.alias")
    assert lg.catalog.table("main", "sandbox", "alias") is None
    assert _victim(lg) == [1, 2, 3]
