"""Where catalog state lives: a small interface, and SQL databases behind it.

SQLite (one file in WAL mode, shared by the processes of one host) is the default;
PostgreSQL serves several hosts. Both go through SQLAlchemy Core, and the schema is created
and upgraded by versioned Alembic migrations (`catalog/migrations`), so a catalog made by an
earlier release upgrades in place. Names are stored lower-case: Spark compares them
case-insensitively.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, create_engine, delete, event, inspect, select, text
from sqlalchemy import update as sql_update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from catalog import schema as db
from catalog.model import CatalogInfo, ColumnInfo, SchemaInfo, TableInfo

_GENERATION = "SELECT value FROM meta WHERE key = 'generation'"
HEAD = "0003"  # the newest migration; tests check it is Alembic's head
_MIGRATION_LOCK = 0x4C47_4341  # PostgreSQL advisory lock key ("LGCA") for migrations
_REGISTER_LOCK = 0x4C47_4C4F  # ("LGLO") serialises checked table registrations


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
    def put_table(
        self, info: TableInfo, *, check: Callable[[list[TableInfo]], None] | None = None
    ) -> None: ...
    def delete_table(self, catalog: str, schema: str, name: str) -> bool: ...
    def close(self) -> None: ...


def _engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ":memory:"
        if database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(parsed, connect_args={"timeout": 30})
        else:  # one shared in-memory database, not one per thread
            engine = create_engine(
                parsed, poolclass=StaticPool, connect_args={"check_same_thread": False}
            )

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # transactions are begun below, explicitly
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # writers take the write lock up front, so two never deadlock upgrading
            write = conn.get_execution_options().get("lakegate_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True)
    raise ValueError(f"catalog URL scheme not supported: {parsed.drivername}")


def migrate(engine: Engine) -> None:
    """Bring the database to HEAD; a catalog of the first release (no Alembic version, but
    its tables) is stamped as 0001 first. Concurrent processes migrate one at a time."""
    from alembic import command
    from alembic.config import Config as AlembicConfig

    def version(conn: Connection) -> str | None:
        if "alembic_version" not in inspect(conn).get_table_names():
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()

    with engine.connect() as conn:
        if version(conn) == HEAD:
            return
    with engine.connect() as conn:
        conn = conn.execution_options(lakegate_write=True)
        with conn.begin():
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            current = version(conn)
            if current == HEAD:
                return
            cfg = AlembicConfig()
            cfg.set_main_option("script_location", "catalog:migrations")
            cfg.attributes["connection"] = conn
            if current is None and "tables" in inspect(conn).get_table_names():
                command.stamp(cfg, "0001")
            command.upgrade(cfg, "head")


def _columns_json(info: TableInfo) -> str:
    return json.dumps(
        [
            {
                "name": c.name,
                "type_text": c.type_text,
                "nullable": c.nullable,
                "position": c.position,
                "comment": c.comment,
                "type_json": c.type_json,
            }
            for c in info.columns
        ]
    )


class SqlStore:
    """The catalog in a SQL database (SQLite or PostgreSQL), safe for many processes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine(url)
        migrate(self.engine)
        self._insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        self._local = threading.local()
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    @contextmanager
    def write(self, *, bump: bool = True) -> Iterator[Connection]:
        """One transaction; `bump` moves the generation (catalog changes), so every process
        re-reads its snapshot. Data products' writes do not."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(lakegate_write=True)
            with conn.begin():
                yield conn
                if bump:
                    conn.execute(
                        sql_update(db.meta)
                        .where(db.meta.c.key == "generation")
                        .values(value=db.meta.c.value + 1)
                    )

    def upsert(self, table: Any, rows: list[dict[str, Any]]) -> Any:
        """INSERT ... ON CONFLICT (primary key) DO UPDATE, in the database's dialect."""
        stmt = self._insert(table)
        keys = [c.name for c in table.primary_key]
        return stmt.on_conflict_do_update(
            index_elements=keys, set_={c: stmt.excluded[c] for c in rows[0] if c not in keys}
        )

    def _reader(self) -> Any:
        """This thread's own autocommit DB-API connection, outside the pool: generation() runs
        on every catalog lookup (the rewrite hot path), where a pooled SQLAlchemy round trip
        costs ~1 ms and this one a few µs (SQLite) or one network round trip (PostgreSQL)."""
        conn = getattr(self._local, "reader", None)
        if conn is None:
            url = self.engine.url
            if self.engine.dialect.name == "postgresql":
                import psycopg

                conn = psycopg.connect(
                    url.set(drivername="postgresql").render_as_string(hide_password=False),
                    autocommit=True,
                )
            elif (url.database or ":memory:") == ":memory:":
                conn = self.engine.raw_connection().driver_connection  # the one shared db
            else:
                conn = sqlite3.connect(
                    url.database, timeout=30, isolation_level=None, check_same_thread=False
                )
            self._local.reader = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def generation(self) -> int:
        row = self._reader().execute(_GENERATION).fetchone()
        return int(row[0])

    # catalogs
    def get_catalog(self, name: str) -> CatalogInfo | None:
        c = db.catalogs.c
        with self.read() as conn:
            row = conn.execute(
                select(c.name, c.comment, c.created_at).where(c.name == name.lower())
            ).first()
        return CatalogInfo(*row) if row else None

    def list_catalogs(self) -> list[CatalogInfo]:
        c = db.catalogs.c
        with self.read() as conn:
            rows = conn.execute(select(c.name, c.comment, c.created_at).order_by(c.name))
            return [CatalogInfo(*r) for r in rows]

    def put_catalog(self, info: CatalogInfo) -> None:
        row = {
            "name": info.name.lower(),
            "comment": info.comment,
            "created_at": info.created_at or time.time(),
        }
        with self.write() as conn:
            conn.execute(self.upsert(db.catalogs, [row]), [row])

    # schemas
    def get_schema(self, catalog: str, name: str) -> SchemaInfo | None:
        c = db.schemas.c
        with self.read() as conn:
            row = conn.execute(
                select(c.catalog, c.name, c.comment, c.created_at).where(
                    c.catalog == catalog.lower(), c.name == name.lower()
                )
            ).first()
        return SchemaInfo(*row) if row else None

    def list_schemas(self, catalog: str | None = None) -> list[SchemaInfo]:
        c = db.schemas.c
        query = select(c.catalog, c.name, c.comment, c.created_at)
        if catalog is not None:
            query = query.where(c.catalog == catalog.lower())
        with self.read() as conn:
            return [SchemaInfo(*r) for r in conn.execute(query.order_by(c.catalog, c.name))]

    def put_schema(self, info: SchemaInfo) -> None:
        row = {
            "catalog": info.catalog.lower(),
            "name": info.name.lower(),
            "comment": info.comment,
            "created_at": info.created_at or time.time(),
        }
        with self.write() as conn:
            conn.execute(self.upsert(db.schemas, [row]), [row])

    # tables
    @staticmethod
    def _table(row: Any) -> TableInfo:
        cols = tuple(ColumnInfo(**c) for c in json.loads(row.columns))
        return TableInfo(
            catalog=row.catalog,
            schema=row.schema,
            name=row.name,
            location=row.location,
            columns=cols,
            domain=row.domain,
            comment=row.comment,
            created_at=row.created_at,
            updated_at=row.updated_at,
            partition_columns=tuple(json.loads(row.partition_columns)),
            properties=json.loads(row.properties),
        )

    @staticmethod
    def _table_row(info: TableInfo, now: float) -> dict[str, Any]:
        return {
            "catalog": info.catalog.lower(),
            "schema": info.schema.lower(),
            "name": info.name.lower(),
            "location": info.location,
            "columns": _columns_json(info),
            "domain": info.domain,
            "comment": info.comment,
            "created_at": info.created_at or now,
            "updated_at": info.updated_at or now,
            "partition_columns": json.dumps(list(info.partition_columns)),
            "properties": json.dumps(info.properties),
        }

    def get_table(self, catalog: str, schema: str, name: str) -> TableInfo | None:
        c = db.tables.c
        with self.read() as conn:
            row = conn.execute(
                select(db.tables).where(
                    c.catalog == catalog.lower(), c.schema == schema.lower(), c.name == name.lower()
                )
            ).first()
        return self._table(row) if row else None

    def list_tables(self, catalog: str | None = None, schema: str | None = None) -> list[TableInfo]:
        c = db.tables.c
        query = select(db.tables)
        if catalog is not None:
            query = query.where(c.catalog == catalog.lower())
        if schema is not None:
            query = query.where(c.schema == schema.lower())
        with self.read() as conn:
            rows = conn.execute(query.order_by(c.catalog, c.schema, c.name))
            return [self._table(r) for r in rows]

    def put_table(
        self, info: TableInfo, *, check: Callable[[list[TableInfo]], None] | None = None
    ) -> None:
        """One table; `check` sees every registered table inside the writing transaction
        (writers serialised) and raises to refuse it (overlapping locations)."""
        self.put_tables([info], check=check)

    def put_tables(
        self, infos: list[TableInfo], *, check: Callable[[list[TableInfo]], None] | None = None
    ) -> None:
        """Many tables in one transaction (bulk registration, benchmarks): one generation
        step instead of one commit per table."""
        if not infos:
            return
        now = time.time()
        rows = [self._table_row(i, now) for i in infos]
        with self.write() as conn:
            if check is not None:
                if self.engine.dialect.name == "postgresql":  # SQLite: BEGIN IMMEDIATE
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _REGISTER_LOCK})
                check([self._table(r) for r in conn.execute(select(db.tables))])
            conn.execute(self.upsert(db.tables, rows), rows)

    def delete_table(self, catalog: str, schema: str, name: str) -> bool:
        c = db.tables.c
        with self.write() as conn:
            done = conn.execute(
                delete(db.tables).where(
                    c.catalog == catalog.lower(), c.schema == schema.lower(), c.name == name.lower()
                )
            )
            return done.rowcount > 0

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._local = threading.local()
        self.engine.dispose()


class SqliteStore(SqlStore):
    """The default store: one SQLite file (or `:memory:`)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"sqlite:///{path}")


def open_store(url: str | Path) -> SqlStore:
    """`sqlite:///rel/path`, `sqlite:////abs/path`, `postgresql://user@host:port/db`
    (SQLAlchemy's spellings), a bare file path, or `:memory:`."""
    text_url = str(url)
    if "://" in text_url:
        return SqlStore(text_url)
    return SqliteStore(text_url)
