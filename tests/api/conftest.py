"""A live Lakegate REST server over a copy of the demo lakehouse, one token per persona.

The shared `lakehouse` fixture's Delta tables are read, never written: the server gets its own
copy of the catalog database (so data products and audit lines stay private to these tests)
and its own audit directory. uvicorn runs in a thread on a socket bound to 127.0.0.1:0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from api_testkit import api_lakegate_on, serve, token_of


@pytest.fixture(scope="session")
def api_lakegate(lakehouse, spark, tmp_path_factory: pytest.TempPathFactory):
    """A Lakegate on the demo lakehouse's tables and policies with an `api:` section."""
    lg = api_lakegate_on(lakehouse, spark, tmp_path_factory.mktemp("api"))
    yield lg
    lg.close()


@pytest.fixture(scope="session")
def app(api_lakegate):
    from api.app import create_app

    return create_app(api_lakegate)


@pytest.fixture(scope="session")
def server(app) -> Iterator[str]:
    """The app under a real uvicorn on 127.0.0.1, on a free port; yields the base URL."""
    with serve(app) as url:
        yield url


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
