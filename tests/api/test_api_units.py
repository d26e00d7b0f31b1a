"""Pieces without a server: product store and YAML, type mapping, the Delta log reader, the
`api:` config section and the `serve` command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from api.delta_log import read_log
from api.types import field_json, precision_scale, type_name
from catalog.products import (
    DataProduct,
    ProductConflict,
    ProductError,
    ProductStore,
    check_domain,
    check_transition,
    load_product_dir,
    normalise,
    parse_duration,
)
from catalog.store import SqliteStore
from governance.config import Config
from governance.errors import ConfigError

# --- products ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("24h", 86400), ("1d12h", 129600),
                                               ("2w", 1209600), (" 90 s ", 90)])
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0h", "h", "10", "1y", "1h x"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ProductError):
        parse_duration(text)


def test_normalise_and_domain_check() -> None:
    p = normalise(DataProduct("Sales-KPIs", "Sales", output_tables=("Main.Sales.Orders",
                                                                    "main.sales.orders"),
                              tags=("Finance", "finance")))
    assert (p.name, p.domain, p.output_tables, p.tags) == \
        ("sales-kpis", "sales", ("main.sales.orders",), ("finance",))
    check_domain(p, {"sales": ("main.sales",)})
    with pytest.raises(ProductError, match="not in a schema of domain"):
        check_domain(p, {"sales": ("main.other",)})
    with pytest.raises(ProductError, match="not defined"):
        check_domain(p, {})
    for bad in (DataProduct("x y", "d"), DataProduct("x", "d", stage="live"),
                DataProduct("x", "d", classification="secret"),
                DataProduct("x", "d", output_tables=("a.b",))):
        with pytest.raises(ProductError):
            normalise(bad)


def test_lifecycle_transitions() -> None:
    check_transition("draft", "active")
    check_transition("deprecated", "active")
    for old, new in (("active", "draft"), ("retired", "active"), ("retired", "draft")):
        with pytest.raises(ProductConflict):
            check_transition(old, new)


def test_store_create_update_and_yaml_sync(tmp_path: Path) -> None:
    store = ProductStore(SqliteStore(tmp_path / "c.db"))
    p = store.create(normalise(DataProduct("a", "sales")), "erin")
    with pytest.raises(ProductConflict):
        store.create(p, "erin")
    newer = store.update(DataProduct(**{**p.__dict__, "description": "x"}), "erin",
                         expected_updated_at=p.updated_at)
    with pytest.raises(ProductConflict, match="changed meanwhile"):  # a stale writer loses
        store.update(p, "erin", expected_updated_at=p.updated_at)
    assert store.get("a").description == "x" and newer.updated_at > p.updated_at
    yaml_p = DataProduct("b", "hr", source="yaml:hr.yaml")
    assert store.sync_yaml([yaml_p, DataProduct("a", "sales", source="yaml:x.yaml")]) == ["a"]
    assert [q.name for q in store.list()] == ["a", "b"] and store.get("a").source == "api"
    first = store.get("b").updated_at
    store.sync_yaml([yaml_p])
    assert store.get("b").updated_at == first  # unchanged YAML keeps its timestamps
    store.sync_yaml([])
    assert [q.name for q in store.list()] == ["a"]


def test_load_product_dir(tmp_path: Path) -> None:
    (tmp_path / "sales.yaml").write_text(
        "domain: sales\nproducts:\n  - {name: orders, output_tables: [main.sales.orders],"
        " freshness: 1d}\n  - {name: leads, domain: marketing}\n")
    (tmp_path / ".hidden.yaml").write_text("not: [valid")
    got = {p.name: p for p in load_product_dir(tmp_path)}
    assert (got["orders"].domain, got["orders"].freshness_seconds) == ("sales", 86400)
    assert got["leads"].domain == "marketing" and got["orders"].source == "yaml:sales.yaml"
    (tmp_path / "dup.yml").write_text("products:\n  - {name: orders, domain: sales}\n")
    with pytest.raises(ProductError, match="product 'orders' is also defined in"):
        load_product_dir(tmp_path)
    (tmp_path / "dup.yml").write_text("products:\n  - {name: z, domain: s, owner: me}\n")
    with pytest.raises(ProductError, match=r"dup.yml: products\[0\]: unknown key"):
        load_product_dir(tmp_path)
    assert load_product_dir(tmp_path / "missing") == []


# --- types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "name"), [
    ("int", "INT"), ("bigint", "LONG"), ("smallint", "SHORT"), ("tinyint", "BYTE"),
    ("decimal(10,2)", "DECIMAL"), ("string", "STRING"), ("varchar(5)", "STRING"),
    ("char(3)", "CHAR"), ("array<int>", "ARRAY"), ("map<string,int>", "MAP"),
    ("struct<a:int>", "STRUCT"), ("timestamp_ntz", "TIMESTAMP_NTZ"), ("date", "DATE"),
    ("interval day to second", "INTERVAL"), ("geometry", "USER_DEFINED_TYPE"),
])
def test_type_name(text: str, name: str) -> None:
    assert type_name(text) == name


def test_type_json_matches_sparks_struct_field_json() -> None:
    doc = json.loads(field_json("s", "struct<a:int,`b c`:array<decimal(5,1)>,m:map<string,"
                                "double>>", False, "note"))
    assert doc == {"name": "s", "nullable": False, "metadata": {"comment": "note"}, "type": {
        "type": "struct", "fields": [
            {"name": "a", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "b c", "type": {"type": "array", "elementType": "decimal(5,1)",
                                     "containsNull": True}, "nullable": True, "metadata": {}},
            {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": "double",
                                   "valueContainsNull": True},
             "nullable": True, "metadata": {}}]}}
    assert precision_scale("decimal(12, 3)") == (12, 3)
    assert precision_scale("int") == (None, None)


# --- Delta log -------------------------------------------------------------------------------


def _commit(log: Path, version: int, *actions: dict) -> None:
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))


def _add(path: str, rows: int | None) -> dict:
    add: dict = {"path": path, "size": 1, "dataChange": True}
    if rows is not None:
        add["stats"] = json.dumps({"numRecords": rows})
    return {"add": add}


def test_delta_log_version_history_and_row_count(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    _commit(log, 0, {"commitInfo": {"timestamp": 1000, "operation": "CREATE TABLE"}},
            {"metaData": {}}, _add("a", 3))
    _commit(log, 1, {"commitInfo": {"timestamp": 2000, "operation": "WRITE",
                                    "userName": "etl"}}, _add("b", 4))
    _commit(log, 2, {"commitInfo": {"timestamp": 3000, "operation": "DELETE"}},
            {"remove": {"path": "a"}}, _add("c", 1))
    d = read_log(str(tmp_path / "t"))
    assert (d.version, d.row_count, d.history_complete, d.last_commit_ms) == (2, 5, True, 3000)
    assert [(c.version, c.operation, c.user) for c in d.commits] == \
        [(2, "DELETE", None), (1, "WRITE", "etl"), (0, "CREATE TABLE", None)]
    assert read_log("file:" + str(tmp_path / "t")).version == 2
    _commit(log, 3, {"commitInfo": {"timestamp": 4000, "operation": "WRITE"}}, _add("d", None))
    assert read_log(str(tmp_path / "t")).row_count is None  # stats missing: unknown, not 0
    (log / f"{0:020d}.json").unlink()  # log cleaned after a checkpoint: history incomplete
    d = read_log(str(tmp_path / "t"))
    assert (d.version, d.history_complete, d.row_count) == (3, False, None)
    assert read_log(str(tmp_path / "nothing")).version is None
    assert read_log("s3://bucket/t").version is None


# --- config and CLI --------------------------------------------------------------------------


def test_api_config_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "lakegate.yaml"
    digest = "ab" * 32
    monkeypatch.setenv("LG_SECRET", "s" * 20)
    f.write_text(f"api:\n  tokens: [{{user: Alice, sha256: {digest.upper()}}}]\n"
                 "  secret_env: LG_SECRET\n  row_limit: 7\n  timeout: 2.5\n"
                 "  products: ../prod\n  port: 9000\n")
    cfg = Config.load(f)
    assert cfg.api.tokens[0].user == "alice" and cfg.api.tokens[0].sha256 == digest
    assert (cfg.api.secret, cfg.api.row_limit, cfg.api.timeout, cfg.api.port) == \
        ("s" * 20, 7, 2.5, 9000)
    assert cfg.products_dir == tmp_path.parent / "prod"
    assert Config.load(_write(tmp_path, "warehouse: w\n")).products_dir == \
        tmp_path / "products"


@pytest.mark.parametrize(("text", "message"), [
    ("api: [1]\n", "'api' must be a mapping"),
    ("api: {tokenz: []}\n", "unknown api setting"),
    ("api: {tokens: [{user: a}]}\n", re.escape("must be {user: NAME, sha256: HEX}")),
    ("api: {tokens: [{user: a, sha256: xyz}]}\n", "not 64 hex digits"),
    ("api: {secret: short}\n", "at least 16"),
    ("api: {row_limit: 0}\n", "must be positive"),
    ("api: {timeout: soon}\n", "must be numbers"),
])
def test_api_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.load(_write(tmp_path, text))


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    return f


def test_serve_command_is_registered() -> None:
    from api.server import serve
    from governance.cli import cli

    assert cli.commands["serve"] is serve
    assert {p.name for p in serve.params} >= {"host", "port", "log_level", "access_log"}
