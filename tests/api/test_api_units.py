"""Pieces without a server: product store and YAML, type mapping, the `api:` config section
and the `serve` command (the Delta log reader, which needs real tables: test_api_delta_log)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("24h", 86400), ("1d12h", 129600), ("2w", 1209600), (" 90 s ", 90)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0h", "h", "10", "1y", "1h x"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ProductError):
        parse_duration(text)


def test_normalise_and_domain_check() -> None:
    p = normalise(
        DataProduct(
            "Sales-KPIs",
            "Sales",
            output_tables=("Main.Sales.Orders", "main.sales.orders"),
            tags=("Finance", "finance"),
        )
    )
    assert (p.name, p.domain, p.output_tables, p.tags) == (
        "sales-kpis",
        "sales",
        ("main.sales.orders",),
        ("finance",),
    )
    check_domain(p, {"sales": ("main.sales",)})
    with pytest.raises(ProductError, match="not in a schema of domain"):
        check_domain(p, {"sales": ("main.other",)})
    with pytest.raises(ProductError, match="not defined"):
        check_domain(p, {})
    for bad in (
        DataProduct("x y", "d"),
        DataProduct("x", "d", stage="live"),
        DataProduct("x", "d", classification="secret"),
        DataProduct("x", "d", output_tables=("a.b",)),
    ):
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
    newer = store.update(
        DataProduct(**{**p.__dict__, "description": "x"}), "erin", expected_updated_at=p.updated_at
    )
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
        " freshness: 1d}\n  - {name: leads, domain: marketing}\n"
    )
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

_DEC = {"type": "array", "elementType": "decimal(5,1)", "containsNull": True}


def _f(name: str, type_: object, nullable: bool = True, comment: str | None = None) -> dict:
    return {
        "name": name,
        "type": type_,
        "nullable": nullable,
        "metadata": {"comment": comment} if comment else {},
    }


# Spark type string -> (UC type_name, (precision, scale), StructField JSON "type")
@pytest.mark.parametrize(
    ("text", "name", "prec", "json_type"),
    [
        ("int", "INT", (None, None), "integer"),
        ("integer", "INT", (None, None), "integer"),
        ("bigint", "LONG", (None, None), "long"),
        ("long", "LONG", (None, None), "long"),
        ("smallint", "SHORT", (None, None), "short"),
        ("tinyint", "BYTE", (None, None), "byte"),
        ("boolean", "BOOLEAN", (None, None), "boolean"),
        ("real", "FLOAT", (None, None), "float"),
        ("double", "DOUBLE", (None, None), "double"),
        ("date", "DATE", (None, None), "date"),
        ("timestamp", "TIMESTAMP", (None, None), "timestamp"),
        ("timestamp_ntz", "TIMESTAMP_NTZ", (None, None), "timestamp_ntz"),
        ("string", "STRING", (None, None), "string"),
        ("STRING", "STRING", (None, None), "string"),
        ("binary", "BINARY", (None, None), "binary"),
        ("variant", "VARIANT", (None, None), "variant"),
        ("void", "NULL", (None, None), "void"),  # sqlglot has no `void`: the fallback answers
        ("decimal(10,2)", "DECIMAL", (10, 2), "decimal(10,2)"),
        ("Decimal(12, 3)", "DECIMAL", (12, 3), "decimal(12,3)"),
        ("decimal", "DECIMAL", (10, 0), "decimal(10,0)"),
        ("numeric(5,1)", "DECIMAL", (5, 1), "decimal(5,1)"),
        ("decimal(5)", "DECIMAL", (5, 0), "decimal(5,0)"),
        ("char(3)", "CHAR", (None, None), "char(3)"),
        ("varchar(5)", "STRING", (None, None), "varchar(5)"),
        ("varchar", "STRING", (None, None), "string"),
        ("interval day to second", "INTERVAL", (None, None), "interval day to second"),
        ("interval year to month", "INTERVAL", (None, None), "interval year to month"),
        ("interval hour", "INTERVAL", (None, None), "interval hour"),
        (
            "array<int>",
            "ARRAY",
            (None, None),
            {"type": "array", "elementType": "integer", "containsNull": True},
        ),
        (
            "map<string,array<bigint>>",
            "MAP",
            (None, None),
            {
                "type": "map",
                "keyType": "string",
                "valueContainsNull": True,
                "valueType": {"type": "array", "elementType": "long", "containsNull": True},
            },
        ),
        (
            "struct<a:int,`b c`:array<decimal(5,1)>,m:map<string,double>>",
            "STRUCT",
            (None, None),
            {
                "type": "struct",
                "fields": [
                    _f("a", "integer"),
                    _f("b c", _DEC),
                    _f(
                        "m",
                        {
                            "type": "map",
                            "keyType": "string",
                            "valueType": "double",
                            "valueContainsNull": True,
                        },
                    ),
                ],
            },
        ),
        # simpleString prints field names unquoted, whatever they are
        (
            "struct<user-id:string,a b:int,select:date,key:struct<not:int>>",
            "STRUCT",
            (None, None),
            {
                "type": "struct",
                "fields": [
                    _f("user-id", "string"),
                    _f("a b", "integer"),
                    _f("select", "date"),
                    _f("key", {"type": "struct", "fields": [_f("not", "integer")]}),
                ],
            },
        ),
        (
            "struct<`a``b`:int,`x,y:z`:int>",
            "STRUCT",
            (None, None),
            {"type": "struct", "fields": [_f("a`b", "integer"), _f("x,y:z", "integer")]},
        ),
        (
            "struct<a:int not null comment 'k, v: w'>",
            "STRUCT",
            (None, None),
            {"type": "struct", "fields": [_f("a", "integer", False, "k, v: w")]},
        ),
        ("geometry", "USER_DEFINED_TYPE", (None, None), "geometry"),
        ("array<int", "ARRAY", (None, None), "array<int"),  # malformed: refused, not repaired
        ("int not null", "USER_DEFINED_TYPE", (None, None), "int not null"),
    ],
)
def test_uc_type_fields_follow_the_spark_type_string(
    text: str, name: str, prec: tuple[int | None, int | None], json_type: object
) -> None:
    assert type_name(text) == name
    assert precision_scale(text) == prec
    doc = json.loads(field_json("c", text, False, "note"))
    assert doc == {
        "name": "c",
        "type": json_type,
        "nullable": False,
        "metadata": {"comment": "note"},
    }


# --- config and CLI --------------------------------------------------------------------------


def test_api_config_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "lakegate.yaml"
    digest = "ab" * 32
    monkeypatch.setenv("LG_SECRET", "s" * 20)
    f.write_text(
        f"api:\n  tokens: [{{user: Alice, sha256: {digest.upper()}}}]\n"
        "  secret_env: LG_SECRET\n  row_limit: 7\n  timeout: 2.5\n"
        "  products: ../prod\n  port: 9000\n"
    )
    cfg = Config.load(f)
    assert cfg.api.tokens[0].user == "alice" and cfg.api.tokens[0].sha256 == digest
    assert (cfg.api.secret, cfg.api.row_limit, cfg.api.timeout, cfg.api.port) == (
        "s" * 20,
        7,
        2.5,
        9000,
    )
    assert cfg.products_dir == tmp_path.parent / "prod"
    assert Config.load(_write(tmp_path, "warehouse: w\n")).products_dir == tmp_path / "products"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("api: [1]\n", "'api' must be a mapping"),
        ("api: {tokenz: []}\n", "unknown api setting"),
        ("api: {tokens: [{user: a}]}\n", re.escape("must be {user: NAME, sha256: HEX}")),
        ("api: {tokens: [{user: a, sha256: xyz}]}\n", "not 64 hex digits"),
        ("api: {secret: short}\n", "at least 16"),
        ("api: {row_limit: 0}\n", "must be positive"),
        ("api: {timeout: soon}\n", "must be numbers"),
    ],
)
def test_api_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.load(_write(tmp_path, text))


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    return f


def test_serve_command_is_registered() -> None:
    from cli import cli
    from cli.serve import serve

    assert cli.commands["serve"] is serve
    assert {p.name for p in serve.params} >= {"host", "port", "log_level", "access_log"}
