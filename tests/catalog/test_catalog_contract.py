"""The catalog store's contract, on every backend: SQLite (the default) and PostgreSQL
(a real server the tests start from the machine's binaries), plus migrations: a fresh
database is created by them, and a catalog file of the first release upgrades in place."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from catalog.catalog import Catalog, CatalogError
from catalog.model import CatalogInfo, ColumnInfo, TableInfo
from catalog.products import DataProduct, ProductConflict, ProductStore, normalise
from catalog.store import HEAD, SqliteStore, open_store

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def cat(url: str, tmp_path: Path) -> Catalog:
    c = Catalog(open_store(url), tmp_path / "wh")
    c.create_catalog("main")
    c.create_schema("main", "sales")
    yield c
    c.store.close()


def _table(name: str = "t", location: str = "/wh/t") -> TableInfo:
    return TableInfo(
        "Main",
        "Sales",
        name,
        location,
        (ColumnInfo("Id", "int", position=0), ColumnInfo("email", "string", True, 1)),
        partition_columns=("email",),
        properties={"k": "v"},
    )


def test_names_are_case_insensitive_and_column_spelling_kept(cat: Catalog) -> None:
    cat.register_table(_table("Orders"))
    info = cat.table("MAIN", "sales", "ORDERS")
    assert info is not None and info.full_name == "main.sales.orders"
    assert [c.name for c in info.columns] == ["Id", "email"]
    assert info.partition_columns == ("email",) and info.properties == {"k": "v"}


def test_register_twice_is_an_error_unless_replace(cat: Catalog) -> None:
    cat.register_table(_table())
    with pytest.raises(CatalogError, match="already exists"):
        cat.register_table(_table())
    assert cat.register_table(_table(location="/wh/t2"), replace=True).location == "/wh/t2"
    assert cat.table("main", "sales", "t").location == "/wh/t2"


def test_every_change_moves_the_generation(cat: Catalog) -> None:
    store = cat.store
    g0 = store.generation()
    cat.register_table(_table())
    g1 = store.generation()
    cat.drop_table("main", "sales", "t")
    g2 = store.generation()
    store.put_catalog(CatalogInfo("other"))
    assert g0 < g1 < g2 < store.generation()
    assert cat.table("main", "sales", "t") is None
    assert cat.drop_table("main", "sales", "t") is False


def test_bulk_registration_is_one_generation_step(cat: Catalog) -> None:
    before = cat.store.generation()
    cat.store.put_tables([_table(f"t{i}", f"/wh/t{i}") for i in range(50)])
    assert cat.store.generation() == before + 1
    assert len(cat.tables("main", "sales")) == 50


def test_concurrent_writers_lose_nothing(cat: Catalog) -> None:
    errors: list[Exception] = []

    def register(i: int) -> None:
        try:
            cat.store.put_table(_table(f"c{i}", f"/wh/c{i}"))
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {t.name for t in cat.tables()} == {f"c{i}" for i in range(16)}


def _register_in_child(url: str) -> None:
    store = open_store(url)
    store.put_table(_table("from_child", "/wh/child"))
    store.close()


def test_another_process_sees_writes_without_restart(cat: Catalog, url: str) -> None:
    assert cat.table("main", "sales", "from_child") is None  # snapshot taken
    p = multiprocessing.get_context("spawn").Process(target=_register_in_child, args=(url,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert cat.table("main", "sales", "from_child") is not None


def test_data_products_keep_their_rules(cat: Catalog) -> None:
    products = ProductStore(cat.store)
    before = cat.store.generation()
    p = products.create(normalise(DataProduct("a", "sales")), "erin")
    with pytest.raises(ProductConflict):
        products.create(p, "erin")
    newer = products.update(
        DataProduct(**{**p.__dict__, "description": "x"}), "erin", expected_updated_at=p.updated_at
    )
    with pytest.raises(ProductConflict, match="changed meanwhile"):
        products.update(p, "erin", expected_updated_at=p.updated_at)
    assert products.get("a").description == "x" and newer.updated_at > p.updated_at
    skipped = products.sync_yaml(
        [
            DataProduct("a", "sales", source="yaml:x.yaml"),
            DataProduct("b", "sales", source="yaml:x.yaml"),
        ]
    )
    assert skipped == ["a"] and [q.name for q in products.list("sales")] == ["a", "b"]
    assert cat.store.generation() == before  # products do not invalidate table snapshots


def test_a_fresh_database_is_at_the_newest_migration(url: str) -> None:
    store = open_store(url)
    with store.read() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
        names = set(inspect(conn).get_table_names())
    store.close()
    assert {"meta", "catalogs", "schemas", "tables", "data_products"} <= names


def test_head_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", "catalog:migrations")
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD


# The schema the first release created by hand (CREATE TABLE IF NOT EXISTS), verbatim.
FIRST_RELEASE_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('generation', 0);
CREATE TABLE IF NOT EXISTS catalogs (
    name TEXT PRIMARY KEY, comment TEXT, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS schemas (
    catalog TEXT NOT NULL, name TEXT NOT NULL, comment TEXT, created_at REAL NOT NULL,
    PRIMARY KEY (catalog, name));
CREATE TABLE IF NOT EXISTS tables (
    catalog TEXT NOT NULL, schema TEXT NOT NULL, name TEXT NOT NULL,
    location TEXT NOT NULL, columns TEXT NOT NULL, domain TEXT, comment TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    partition_columns TEXT NOT NULL DEFAULT '[]', properties TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (catalog, schema, name));
"""
FIRST_RELEASE_PRODUCTS = """
CREATE TABLE IF NOT EXISTS data_products (
    name TEXT PRIMARY KEY, domain TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
    output_tables TEXT NOT NULL DEFAULT '[]', stage TEXT NOT NULL, tags TEXT NOT NULL DEFAULT '[]',
    classification TEXT, freshness TEXT, source TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, created_by TEXT, updated_by TEXT);
CREATE INDEX IF NOT EXISTS data_products_domain ON data_products (domain);
"""


@pytest.mark.parametrize("with_products", [False, True], ids=["catalog-only", "with-products"])
def test_a_first_release_sqlite_catalog_upgrades_in_place(tmp_path: Path, with_products: bool):
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(FIRST_RELEASE_DDL + (FIRST_RELEASE_PRODUCTS if with_products else ""))
    old.execute("INSERT INTO catalogs VALUES ('main', NULL, 1.0)")
    old.execute("INSERT INTO schemas VALUES ('main', 'sales', NULL, 1.0)")
    old.execute(
        "INSERT INTO tables (catalog, schema, name, location, columns, created_at, "
        "updated_at) VALUES ('main', 'sales', 'orders', '/wh/o', "
        '\'[{"name": "id", "type_text": "int"}]\', 1.0, 1.0)'
    )
    old.execute("UPDATE meta SET value = 7")
    old.commit()
    old.close()
    store = SqliteStore(path)
    cat = Catalog(store, tmp_path / "wh")
    info = cat.table("main", "sales", "orders")
    assert info is not None and info.location == "/wh/o" and info.columns[0].name == "id"
    assert store.generation() == 7
    with store.read() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
    ProductStore(store).create(normalise(DataProduct("p", "sales")), "erin")
    store.close()


def test_processes_opening_a_new_database_at_once_migrate_it_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_register_in_child_named, args=(url, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    store = open_store(url)
    assert {t.name for t in store.list_tables()} == {f"r{i}" for i in range(4)}
    store.close()


def _register_in_child_named(url: str, i: int) -> None:
    store = open_store(url)
    store.put_catalog(CatalogInfo("main"))
    store.put_table(_table(f"r{i}", f"/wh/r{i}"))
    store.close()
