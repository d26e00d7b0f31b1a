"""A throwaway PostgreSQL server on loopback, for the tests and benchmarks that need the
server catalog: `initdb` and `pg_ctl` from the machine's own server binaries into a temp
directory, a free port, trust authentication on 127.0.0.1 only, removed when done.

Not for production: a deployment points `catalog:` at its own managed PostgreSQL.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    """The machine has no PostgreSQL server binaries."""


def pg_ctl() -> Path | None:
    """The newest PostgreSQL server binaries on the machine, if any."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1])
    which = shutil.which("pg_ctl")
    return Path(which) if which else None


@contextmanager
def local_postgres() -> Iterator[str]:
    """Yields the server's URL (no database part); stops the server and deletes its files."""
    ctl = pg_ctl()
    if ctl is None:
        raise PostgresUnavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
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
    initdb = [str(ctl.with_name("initdb")), "-D", str(data), "-U", "lakegate", "--auth=trust"]
    subprocess.run([*run_as, *initdb, "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = [str(ctl), "-D", str(data), "-o", opts, "-l", str(root / "server.log"), "-w", "start"]
    subprocess.run([*run_as, *start], check=True, capture_output=True)
    try:
        yield f"postgresql://lakegate@127.0.0.1:{port}"
    finally:
        stop = [str(ctl), "-D", str(data), "-m", "fast", "-w", "stop"]
        subprocess.run([*run_as, *stop], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def new_database(server_url: str) -> str:
    """A new, empty database on `server_url`; returns its URL."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{server_url}/{name}"
