"""Where catalog state lives: a small interface, and SQLite behind it by default.

Several processes share one catalog file (the CLI, the REST server, notebooks), so SQLite
runs in WAL mode with a busy timeout; a server database can replace it by implementing
`CatalogStore`. Names are stored lower-case: Spark compares them case-insensitively.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol

from catalog.model import CatalogInfo, ColumnInfo, SchemaInfo, TableInfo


class CatalogStore(Protocol):
    def generation(self) -> int: ...
    def get_catalog(self, name: str) -> CatalogInfo | None: ...
    def list_catalogs(self) -> list[CatalogInfo]: ...
    def put_catalog(self, info: CatalogInfo) -> None: ...
    def get_schema(self, catalog: str, name: str) -> SchemaInfo | None: ...
    def list_schemas(self, catalog: str | None = None) -> list[SchemaInfo]: ...
    def put_schema(self, info: SchemaInfo) -> None: ...
    def get_table(self, catalog: str, schema: str, name: str) -> TableInfo | None: ...
    def list_tables(
        self, catalog: str | None = None, schema: str | None = None
    ) -> list[TableInfo]: ...
    def put_table(self, info: TableInfo) -> None: ...
    def delete_table(self, catalog: str, schema: str, name: str) -> bool: ...
    def close(self) -> None: ...


_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('generation', 0);
CREATE TABLE IF NOT EXISTS catalogs (
    name TEXT PRIMARY KEY, comment TEXT, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS schemas (
    catalog TEXT NOT NULL, name TEXT NOT NULL, comment TEXT, created_at REAL NOT NULL,
    PRIMARY KEY (catalog, name));
CREATE TABLE IF NOT EXISTS tables (
    catalog TEXT NOT NULL, schema TEXT NOT NULL, name TEXT NOT NULL,
    location TEXT NOT NULL, columns TEXT NOT NULL, domain TEXT, comment TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    partition_columns TEXT NOT NULL DEFAULT '[]', properties TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (catalog, schema, name));
"""


class SqliteStore:
    """The default store: one SQLite file, safe for several processes at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self._conn() as c:
            c.executescript(_DDL)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _write(self, sql: str, args: tuple) -> int:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(sql, args)
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
            conn.execute("COMMIT")
            return cur.rowcount
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, for modules that keep their own tables in the same file
        (data products); their writes do not move the catalog's generation."""
        return self._conn()

    def generation(self) -> int:
        row = self._conn().execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0])

    # catalogs
    def get_catalog(self, name: str) -> CatalogInfo | None:
        row = self._conn().execute(
            "SELECT name, comment, created_at FROM catalogs WHERE name=?", (name.lower(),)
        ).fetchone()
        return CatalogInfo(*row) if row else None

    def list_catalogs(self) -> list[CatalogInfo]:
        rows = self._conn().execute("SELECT name, comment, created_at FROM catalogs ORDER BY name")
        return [CatalogInfo(*r) for r in rows]

    def put_catalog(self, info: CatalogInfo) -> None:
        self._write(
            "INSERT OR REPLACE INTO catalogs VALUES (?,?,?)",
            (info.name.lower(), info.comment, info.created_at or time.time()),
        )

    # schemas
    def get_schema(self, catalog: str, name: str) -> SchemaInfo | None:
        row = self._conn().execute(
            "SELECT catalog, name, comment, created_at FROM schemas WHERE catalog=? AND name=?",
            (catalog.lower(), name.lower()),
        ).fetchone()
        return SchemaInfo(*row) if row else None

    def list_schemas(self, catalog: str | None = None) -> list[SchemaInfo]:
        sql = "SELECT catalog, name, comment, created_at FROM schemas"
        args: tuple = ()
        if catalog is not None:
            sql += " WHERE catalog=?"
            args = (catalog.lower(),)
        return [SchemaInfo(*r) for r in self._conn().execute(sql + " ORDER BY catalog, name", args)]

    def put_schema(self, info: SchemaInfo) -> None:
        self._write(
            "INSERT OR REPLACE INTO schemas VALUES (?,?,?,?)",
            (info.catalog.lower(), info.name.lower(), info.comment,
             info.created_at or time.time()),
        )

    # tables
    _TABLE_COLS = ("catalog, schema, name, location, columns, domain, comment, created_at, "
                   "updated_at, partition_columns, properties")

    @staticmethod
    def _table(row: tuple) -> TableInfo:
        cols = tuple(ColumnInfo(**c) for c in json.loads(row[4]))
        return TableInfo(
            catalog=row[0], schema=row[1], name=row[2], location=row[3], columns=cols,
            domain=row[5], comment=row[6], created_at=row[7], updated_at=row[8],
            partition_columns=tuple(json.loads(row[9])), properties=json.loads(row[10]),
        )

    def get_table(self, catalog: str, schema: str, name: str) -> TableInfo | None:
        row = self._conn().execute(
            f"SELECT {self._TABLE_COLS} FROM tables WHERE catalog=? AND schema=? AND name=?",
            (catalog.lower(), schema.lower(), name.lower()),
        ).fetchone()
        return self._table(row) if row else None

    def list_tables(self, catalog: str | None = None, schema: str | None = None) -> list[TableInfo]:
        sql = f"SELECT {self._TABLE_COLS} FROM tables WHERE 1=1"
        args: list[str] = []
        if catalog is not None:
            sql += " AND catalog=?"
            args.append(catalog.lower())
        if schema is not None:
            sql += " AND schema=?"
            args.append(schema.lower())
        rows = self._conn().execute(sql + " ORDER BY catalog, schema, name", args)
        return [self._table(r) for r in rows]

    def put_table(self, info: TableInfo) -> None:
        cols = json.dumps([
            {"name": c.name, "type_text": c.type_text, "nullable": c.nullable,
             "position": c.position, "comment": c.comment, "type_json": c.type_json}
            for c in info.columns
        ])
        now = time.time()
        self._write(
            f"INSERT OR REPLACE INTO tables ({self._TABLE_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (info.catalog.lower(), info.schema.lower(), info.name.lower(), info.location, cols,
             info.domain, info.comment, info.created_at or now, info.updated_at or now,
             json.dumps(list(info.partition_columns)), json.dumps(info.properties)),
        )

    def put_tables(self, infos: list[TableInfo]) -> None:
        """Many tables in one transaction (bulk registration, benchmarks): one generation
        step instead of one fsync'ed commit per table."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = time.time()
            for info in infos:
                cols = json.dumps([
                    {"name": c.name, "type_text": c.type_text, "nullable": c.nullable,
                     "position": c.position, "comment": c.comment, "type_json": c.type_json}
                    for c in info.columns
                ])
                conn.execute(
                    f"INSERT OR REPLACE INTO tables ({self._TABLE_COLS}) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (info.catalog.lower(), info.schema.lower(), info.name.lower(),
                     info.location, cols, info.domain, info.comment, info.created_at or now,
                     info.updated_at or now, json.dumps(list(info.partition_columns)),
                     json.dumps(info.properties)))
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def delete_table(self, catalog: str, schema: str, name: str) -> bool:
        return self._write(
            "DELETE FROM tables WHERE catalog=? AND schema=? AND name=?",
            (catalog.lower(), schema.lower(), name.lower()),
        ) > 0

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                c.close()
            self._all.clear()
        self._local = threading.local()


def open_store(url: str | Path) -> CatalogStore:
    """`sqlite:///rel/path`, `sqlite:////abs/path` (SQLAlchemy's spelling), a bare file path,
    or `:memory:`; other schemes are not built yet."""
    text = str(url)
    if text.startswith("sqlite:///"):
        return SqliteStore(text[len("sqlite:///") :])
    if "://" in text:
        raise ValueError(f"catalog URL scheme not supported: {text.split('://')[0]}")
    return SqliteStore(text)
