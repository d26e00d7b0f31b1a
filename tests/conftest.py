"""One SparkSession per test run (starting Spark is the slow part) and one demo lakehouse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from governance.runtime.spark import build_spark

    # FAIR: the gateway's per-user pools act only then (tests/api/connect/
    # test_connect_fair_pools.py); Lakegate's default is Spark's FIFO
    session = build_spark(
        "local[2]", {"spark.sql.shuffle.partitions": "2", "spark.scheduler.mode": "FAIR"}
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The demo lakehouse with the reference policies; tests must not change its tables."""
    from governance.tools.demo import build_demo

    root: Path = tmp_path_factory.mktemp("lakehouse")
    lg = build_demo(root, spark=spark)
    yield lg
    lg.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free loopback port, stopped at the end of the run;
    skipped where the server binaries are absent."""
    from contextlib import ExitStack

    from catalog.local_postgres import PostgresUnavailable, local_postgres

    with ExitStack() as stack:
        try:
            url = stack.enter_context(local_postgres())
        except PostgresUnavailable as e:
            pytest.skip(str(e))
        yield url


@pytest.fixture(scope="session")
def new_postgres_database(postgres_server: str):
    """Makes a new, empty database on the test server and returns its URL."""
    from catalog.local_postgres import new_database

    return lambda: new_database(postgres_server)


@pytest.fixture
def postgres_url(new_postgres_database) -> str:
    """A new, empty database on the test server, for one test."""
    return new_postgres_database()


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A real Keycloak over HTTPS on 127.0.0.1 with the `lakegate` realm
    (tests/identity/keycloak.py), started the first time a test asks for it and stopped at
    the end of the run. Fails, never skips, when it cannot start: the reason is the error."""
    from identity.keycloak import Keycloak, KeycloakUnavailable

    kc = Keycloak(tmp_path_factory.mktemp("keycloak"))
    try:
        kc.start()
    except KeycloakUnavailable as e:
        kc.stop()
        pytest.fail(str(e), pytrace=False)
    try:
        yield kc
    finally:
        kc.stop()
