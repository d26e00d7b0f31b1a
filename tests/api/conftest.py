"""A live Lakegate REST server over a copy of the demo lakehouse, one token per persona.

The shared `lakehouse` fixture's Delta tables are read, never written: the server gets its own
copy of the catalog database (so data products and audit lines stay private to these tests)
and its own audit directory. uvicorn runs in a thread on a socket bound to 127.0.0.1:0.
"""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from api_testkit import PERSONAS, PRODUCTS_YAML, SECRET, token_of


@pytest.fixture(scope="session")
def api_lakegate(lakehouse, spark, tmp_path_factory: pytest.TempPathFactory):
    """A Lakegate on the demo lakehouse's tables and policies with an `api:` section."""
    from governance.config import ApiConfig, ApiToken
    from governance.session import Lakegate

    root = tmp_path_factory.mktemp("api")
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
    cfg = replace(lakehouse.config, catalog=str(root / "catalog.db"), audit=root / "audit", api=api)
    lg = Lakegate(cfg, spark=spark)
    yield lg
    lg.close()


@pytest.fixture(scope="session")
def app(api_lakegate):
    from api.app import create_app

    return create_app(api_lakegate)


@pytest.fixture(scope="session")
def server(app) -> Iterator[str]:
    """The app under a real uvicorn on 127.0.0.1, on a free port; yields the base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not srv.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture(scope="session")
def as_user(server: str) -> Iterator[Callable[[str], httpx.Client]]:
    """`as_user("bob")`: an httpx client for the live server with bob's bearer token."""
    clients: dict[str, httpx.Client] = {}

    def make(user: str) -> httpx.Client:
        if user not in clients:
            clients[user] = httpx.Client(
                base_url=server, timeout=60, headers={"Authorization": f"Bearer {token_of(user)}"}
            )
        return clients[user]

    yield make
    for c in clients.values():
        c.close()


@pytest.fixture(scope="session")
def anonymous(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def products_dir(api_lakegate) -> Path:
    return api_lakegate.config.products_dir
