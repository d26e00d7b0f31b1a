"""The catalog store: names case-insensitive, generation moves on writes, shared by processes."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from catalog.catalog import Catalog, CatalogError, normalise_location
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore, open_store


def _table(name: str = "t", location: str = "/wh/t") -> TableInfo:
    return TableInfo(
        "Main",
        "Sales",
        name,
        location,
        (ColumnInfo("Id", "int", position=0), ColumnInfo("email", "string", True, 1)),
    )


@pytest.fixture
def cat(tmp_path: Path) -> Catalog:
    c = Catalog(SqliteStore(tmp_path / "c.db"), tmp_path / "wh")
    c.create_catalog("main")
    c.create_schema("main", "sales")
    return c


def test_names_are_case_insensitive(cat: Catalog) -> None:
    cat.register_table(_table("Orders"))
    info = cat.table("MAIN", "sales", "ORDERS")
    assert info is not None and info.full_name == "main.sales.orders"
    assert [c.name for c in info.columns] == ["Id", "email"]  # column spelling kept


def test_register_twice_is_an_error_unless_replace(cat: Catalog) -> None:
    cat.register_table(_table())
    with pytest.raises(CatalogError, match="already exists"):
        cat.register_table(_table())
    again = cat.register_table(_table(location="/wh/t2"), replace=True)
    assert again.location == "/wh/t2"
    assert cat.table("main", "sales", "t").location == "/wh/t2"


def test_register_needs_the_schema(cat: Catalog) -> None:
    with pytest.raises(CatalogError, match="does not exist"):
        cat.register_table(TableInfo("main", "nope", "t", "/x", ()))


def test_drop_removes_and_bumps_generation(cat: Catalog) -> None:
    cat.register_table(_table())
    before = cat.store.generation()
    assert cat.drop_table("main", "sales", "t") is True
    assert cat.store.generation() == before + 1
    assert cat.table("main", "sales", "t") is None
    assert cat.drop_table("main", "sales", "t") is False


def _register_in_child(path: str) -> None:
    c = Catalog(SqliteStore(path), "/wh")
    c.register_table(_table("from_child", "/wh/child"))


def test_another_process_sees_writes_without_restart(cat: Catalog, tmp_path: Path) -> None:
    assert cat.table("main", "sales", "from_child") is None  # snapshot taken
    p = multiprocessing.get_context("spawn").Process(
        target=_register_in_child, args=(str(tmp_path / "c.db"),)
    )
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert cat.table("main", "sales", "from_child") is not None


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("file:///a/b/", "/a/b"),
        ("file:/a/b", "/a/b"),
        ("/a/b", "/a/b"),
        ("/", "/"),
    ],
)
def test_locations_normalise(given: str, expected: str) -> None:
    assert normalise_location(given) == expected


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("sqlite:///rel.db", True),
        ("plain.db", True),
        ("mysql://x/y", False),
    ],
)
def test_open_store_urls(url: str, ok: bool, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    if ok:
        open_store(url).close()
    else:
        with pytest.raises(ValueError, match="not supported"):
            open_store(url)
