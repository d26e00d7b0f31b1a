"""Compatibility with the official Unity Catalog client (`unitycatalog-client` from PyPI)
against the live server: it parses our JSON with its own pydantic models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from api_testkit import UC, token_of
from unitycatalog.client import (
    ApiClient,
    ApiException,
    CatalogsApi,
    Configuration,
    SchemasApi,
    TablesApi,
)
from unitycatalog.client.models import ColumnTypeName, DataSourceFormat, TableType


def with_client(server: str, user: str, fn: Callable[[ApiClient], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        cfg = Configuration(host=f"{server}{UC}")
        async with ApiClient(
            cfg, header_name="Authorization", header_value=f"Bearer {token_of(user)}"
        ) as client:
            return await fn(client)

    return asyncio.run(run())


async def _walk(client: ApiClient) -> dict[str, Any]:
    """catalogs -> schemas -> tables (one table per page, to exercise page tokens)."""
    out: dict[str, Any] = {}
    cats = await CatalogsApi(client).list_catalogs()
    for c in cats.catalogs or []:
        schemas = await SchemasApi(client).list_schemas(catalog_name=c.name)
        for s in schemas.schemas or []:
            token = None
            while True:
                page = await TablesApi(client).list_tables(
                    catalog_name=c.name, schema_name=s.name, max_results=1, page_token=token
                )
                for t in page.tables or []:
                    out[f"{t.catalog_name}.{t.schema_name}.{t.name}"] = t
                token = page.next_page_token
                if not token:
                    break
    return out


def test_official_client_walks_the_catalog_as_bob(server: str) -> None:
    tables = with_client(server, "bob", _walk)
    assert sorted(tables) == ["main.hr.employees", "main.sales.customers", "main.sales.orders"]
    customers = tables["main.sales.customers"]
    assert [c.name for c in customers.columns] == ["id", "name", "email", "country"]
    assert customers.table_type == TableType.MANAGED
    assert customers.data_source_format == DataSourceFormat.DELTA
    assert customers.columns[0].type_name == ColumnTypeName.INT
    assert json.loads(customers.columns[0].type_json)["type"] == "integer"
    assert all(c.nullable for c in customers.columns)
    assert customers.created_at and customers.table_id


def test_official_client_get_table_and_schema(server: str) -> None:
    async def run(client: ApiClient) -> tuple:
        t = await TablesApi(client).get_table(full_name="main.sales.orders")
        s = await SchemasApi(client).get_schema(full_name="main.sales")
        c = await CatalogsApi(client).get_catalog(name="main")
        return t, s, c

    table, schema, catalog = with_client(server, "carol", run)
    assert (table.catalog_name, table.schema_name, table.name) == ("main", "sales", "orders")
    assert [c.name for c in table.columns] == [
        "id",
        "customer_id",
        "region",
        "amount",
        "order_date",
        "is_test",
    ]
    amount = table.columns[3]
    assert (amount.type_name, amount.type_precision, amount.type_scale) == (
        ColumnTypeName.DECIMAL,
        10,
        2,
    )
    assert schema.full_name == "main.sales" and schema.owner == "group:sales-owners"
    assert catalog.name == "main"


@pytest.mark.parametrize(
    ("user", "call"),
    [
        ("bob", lambda c: TablesApi(c).get_table(full_name="main.marketing.campaigns")),
        ("bob", lambda c: SchemasApi(c).get_schema(full_name="main.marketing")),
        ("frank", lambda c: CatalogsApi(c).get_catalog(name="main")),
        ("alice", lambda c: TablesApi(c).get_table(full_name="main.sales.nope")),
    ],
)
def test_official_client_sees_not_found(server: str, user: str, call: Callable) -> None:
    with pytest.raises(ApiException) as e:
        with_client(server, user, call)
    assert e.value.status == 404
    assert json.loads(e.value.body)["error_code"] == "NOT_FOUND"


def test_official_client_without_a_valid_token_is_401(server: str) -> None:
    with pytest.raises(ApiException) as e:
        with_client(server, "nobody-configured", lambda c: CatalogsApi(c).list_catalogs())
    assert e.value.status == 401
    assert json.loads(e.value.body)["error_code"] == "UNAUTHENTICATED"


def test_official_client_as_marketing_owner(server: str) -> None:
    tables = with_client(server, "mallory", _walk)
    assert sorted(tables) == ["main.marketing.campaigns"]


def test_lakegate_serve_command_answers_the_official_client(api_lakegate, tmp_path) -> None:
    """`lakegate serve` as an operator runs it: its own process, config from lakegate.yaml."""
    import hashlib
    import os
    import socket
    import sqlite3
    import subprocess
    import sys
    import time
    import urllib.request

    import yaml

    cfg = api_lakegate.config
    with sqlite3.connect(cfg.catalog) as src, sqlite3.connect(tmp_path / "catalog.db") as dst:
        src.backup(dst)
    (tmp_path / "lakegate.yaml").write_text(
        yaml.safe_dump(
            {
                "warehouse": str(cfg.warehouse),
                "catalog": "catalog.db",
                "policies": str(cfg.policies),
                "audit": "audit",
                "api": {
                    "tokens": [
                        {
                            "user": "bob",
                            "sha256": hashlib.sha256(token_of("bob").encode()).hexdigest(),
                        }
                    ]
                },
            }
        )
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli",
            "--config",
            str(tmp_path / "lakegate.yaml"),
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        deadline = time.time() + 600  # the port opens at once, /readyz is 200 once Spark is up
        while True:
            assert proc.poll() is None and time.time() < deadline, "server did not start"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5):
                    break  # 200 (a 503 raises HTTPError, an OSError)
            except OSError:
                time.sleep(0.2)
        table = with_client(
            f"http://127.0.0.1:{port}",
            "bob",
            lambda c: TablesApi(c).get_table(full_name="main.sales.customers"),
        )
        assert [c.name for c in table.columns] == ["id", "name", "email", "country"]
    finally:
        proc.terminate()
        proc.wait(120)  # Spark is stopped before the process ends
    log = (tmp_path / "audit" / "audit.log").read_text()
    assert "ugi=bob (auth:TOKEN)\tip=/127.0.0.1\tcmd=getTable\tsrc=main.sales.customers" in log
