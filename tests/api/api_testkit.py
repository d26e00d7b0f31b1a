"""Helpers shared by the REST API tests (fixtures are in conftest.py)."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx

from governance.config import ApiConfig

PERSONAS = ("alice", "bob", "carol", "dana", "erin", "frank", "harriet", "mallory", "root")
SECRET = "test-secret-0123456789abcdef"
PRODUCTS_YAML = """\
domain: hr
products:
  - name: headcount
    description: Employees by department, for planning
    output_tables: [main.hr.employees]
    stage: active
    tags: [planning]
    classification: confidential
    freshness: 3650d
"""


def token_of(user: str) -> str:
    return f"tok-{user}-{hashlib.sha256(user.encode()).hexdigest()[:12]}"


def read_audit(lg) -> list[dict[str, str]]:
    """The audit lines as key -> value dicts (values unescaped enough for tests)."""
    out = []
    for line in (lg.config.audit / "audit.log").read_text().splitlines():
        _, _, rest = line.partition(": ")
        out.append(dict(f.split("=", 1) for f in rest.split("\t") if "=" in f))
    return out


UC = "/api/2.1/unity-catalog"
LG = "/api/lakegate/v1"


def uc_tables(client: httpx.Client, catalog: str, schema: str) -> dict[str, list[str]]:
    """Full table name -> listed column names, following every page."""
    out: dict[str, list[str]] = {}
    token = None
    while True:
        params = {"catalog_name": catalog, "schema_name": schema, "max_results": 1}
        if token:
            params["page_token"] = token
        r = client.get(f"{UC}/tables", params=params)
        if r.status_code == 404:
            return out
        r.raise_for_status()
        body = r.json()
        for t in body["tables"]:
            out[f"{t['catalog_name']}.{t['schema_name']}.{t['name']}"] = [
                c["name"] for c in t["columns"]
            ]
        token = body.get("next_page_token")
        if not token:
            return out


def all_visible(client: httpx.Client) -> dict[str, list[str]]:
    """Everything a caller can discover by walking catalogs -> schemas -> tables."""
    out: dict[str, list[str]] = {}
    for c in client.get(f"{UC}/catalogs").json()["catalogs"]:
        for s in client.get(f"{UC}/schemas", params={"catalog_name": c["name"]}).json()["schemas"]:
            out.update(uc_tables(client, c["name"], s["name"]))
    return out


@contextmanager
def serve(app, keep_alive: int = ApiConfig.keep_alive_seconds) -> Iterator[str]:
    """`app` under a real uvicorn on 127.0.0.1, on a free port, kept alive as `lakegate
    serve` keeps connections (`api.keep_alive_seconds`); yields the base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=keep_alive,
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not srv.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)
        sock.close()


def api_lakegate_on(lakehouse, spark, root: Path, **config):
    """A Lakegate on the demo lakehouse's tables with an `api:` section (a token per persona)
    and its own copy of the catalog, products and audit under `root`; `config` overrides
    lakegate.yaml keys (e.g. `policies`)."""
    from governance.config import ApiToken
    from governance.session.governed import Lakegate

    src = sqlite3.connect(lakehouse.config.catalog)
    dst = sqlite3.connect(root / "catalog.db")
    src.backup(dst)
    src.close()
    dst.close()
    (root / "products").mkdir()
    (root / "products" / "hr.yaml").write_text(PRODUCTS_YAML)
    api = ApiConfig(
        tokens=tuple(
            ApiToken(u, hashlib.sha256(token_of(u).encode()).hexdigest()) for u in PERSONAS
        ),
        secret=SECRET,
        row_limit=5,
        timeout=300.0,
        products=root / "products",
    )
    cfg = replace(
        lakehouse.config, catalog=str(root / "catalog.db"), audit=root / "audit", api=api, **config
    )
    return Lakegate(cfg, spark=spark)
