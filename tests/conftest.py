"""One SparkSession per test run (starting Spark is the slow part) and one demo lakehouse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from governance.spark import build_spark

    session = build_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The demo lakehouse with the reference policies; tests must not change its tables."""
    from governance.demo import build_demo

    root: Path = tmp_path_factory.mktemp("lakehouse")
    lg = build_demo(root, spark=spark)
    yield lg
    lg.close()


def _pg_ctl() -> Path | None:
    """The newest PostgreSQL server binaries on the machine, if any."""
    import glob
    import shutil

    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1])
    which = shutil.which("pg_ctl")
    return Path(which) if which else None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free loopback port (initdb + pg_ctl into a temp
    dir), stopped at the end of the run; skipped where the server binaries are absent."""
    import os
    import shutil
    import socket
    import subprocess
    import tempfile

    pg_ctl = _pg_ctl()
    if pg_ctl is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="lakegate-pg-"))
    root.chmod(0o755)
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as its own user
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(
        [
            *run_as,
            str(pg_ctl.with_name("initdb")),
            "-D",
            str(data),
            "-U",
            "lakegate",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [
            *run_as,
            str(pg_ctl),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(root / "server.log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://lakegate@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*run_as, str(pg_ctl), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def new_postgres_database(postgres_server: str):
    """Makes a new, empty database on the test server and returns its URL."""
    import uuid

    import psycopg
    from psycopg import sql

    def make() -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return f"{postgres_server}/{name}"

    return make


@pytest.fixture
def postgres_url(new_postgres_database) -> str:
    """A new, empty database on the test server, for one test."""
    return new_postgres_database()
