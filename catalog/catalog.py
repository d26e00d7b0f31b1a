"""The catalog service: resolves three-part names to tables, and registers Delta tables.

Lookups sit on the rewrite hot path, so a snapshot of every table is kept in memory and
refreshed only when the store's generation counter moved (another process may have created
or dropped a table). The planner checks that counter once per statement (`pinned`), so a
statement costs one indexed store read however many tables it names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from catalog.locations import LocationOverlaps, normalise_location, overlapping
from catalog.model import CatalogInfo, SchemaInfo, TableInfo
from catalog.names import InvalidName, check_name

__all__ = ["Catalog", "CatalogError", "LocationOverlaps", "normalise_location"]
from catalog.store import CatalogStore


class CatalogError(Exception):
    """A catalog object is missing or already exists, or a name is not a valid name."""


def _names(*parts: tuple[str, str]) -> list[str]:
    """Checked, lower-cased name parts: the store's last line of defence against paths."""
    try:
        return [check_name(p, what) for p, what in parts]
    except InvalidName as e:
        raise CatalogError(str(e)) from None


class Catalog:
    def __init__(self, store: CatalogStore, warehouse: str | Path) -> None:
        self.store = store
        self.warehouse = Path(warehouse).resolve()
        self._lock = threading.Lock()
        self._pins = threading.local()  # depth of `pinned` blocks in this thread
        self._generation = -1
        self._tables: dict[tuple[str, str, str], TableInfo] = {}
        self._schemas: set[tuple[str, str]] = set()
        self._catalogs: set[str] = set()

    # snapshot ---------------------------------------------------------------------------

    def _snapshot(self) -> None:
        if getattr(self._pins, "depth", 0):
            return
        gen = self.store.generation()
        if gen == self._generation:
            return
        with self._lock:
            tables = {(t.catalog, t.schema, t.name): t for t in self.store.list_tables()}
            schemas = {(s.catalog, s.name) for s in self.store.list_schemas()}
            catalogs = {c.name for c in self.store.list_catalogs()}
            self._tables, self._schemas, self._catalogs = tables, schemas, catalogs
            self._generation = gen

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """In this thread, lookups inside the block skip the generation check: it is made
        once, on entry (one statement's planning, one store read)."""
        self._snapshot()
        self._pins.depth = getattr(self._pins, "depth", 0) + 1
        try:
            yield
        finally:
            self._pins.depth -= 1

    # reads ------------------------------------------------------------------------------

    def table(self, catalog: str, schema: str, name: str) -> TableInfo | None:
        self._snapshot()
        return self._tables.get((catalog.lower(), schema.lower(), name.lower()))

    def tables(self, catalog: str | None = None, schema: str | None = None) -> list[TableInfo]:
        self._snapshot()
        return [
            t
            for (c, s, _), t in sorted(self._tables.items())
            if (catalog is None or c == catalog.lower()) and (schema is None or s == schema.lower())
        ]

    def has_schema(self, catalog: str, schema: str) -> bool:
        self._snapshot()
        return (catalog.lower(), schema.lower()) in self._schemas

    def has_catalog(self, catalog: str) -> bool:
        self._snapshot()
        return catalog.lower() in self._catalogs

    def schemas(self, catalog: str | None = None) -> list[SchemaInfo]:
        return self.store.list_schemas(catalog)

    def catalogs(self) -> list[CatalogInfo]:
        return self.store.list_catalogs()

    def managed_location(self, catalog: str, schema: str, name: str) -> str:
        """`warehouse/catalog/schema/table`, built only from valid name parts."""
        c, s, t = _names((catalog, "catalog name"), (schema, "schema name"), (name, "table name"))
        location = self.warehouse / c / s / t
        self.check_managed(location)
        return str(location)

    def check_managed(self, location: str | Path) -> Path:
        """The resolved location if it lies strictly inside the warehouse, symlinks that
        already exist followed; anything else is refused before a file is written or removed."""
        resolved = Path(normalise_location(str(location))).resolve()
        try:
            inside = resolved.relative_to(self.warehouse)
        except ValueError:
            inside = None
        if inside is None or inside == Path("."):
            raise CatalogError(f"location {location} is not inside the warehouse")
        return resolved

    # writes -----------------------------------------------------------------------------

    def create_catalog(
        self, name: str, comment: str | None = None, *, if_not_exists: bool = False
    ) -> None:
        (name,) = _names((name, "catalog name"))
        if self.store.get_catalog(name):
            if if_not_exists:
                return
            raise CatalogError(f"catalog {name.lower()} already exists")
        self.store.put_catalog(CatalogInfo(name.lower(), comment, time.time()))

    def create_schema(
        self, catalog: str, name: str, comment: str | None = None, *, if_not_exists: bool = False
    ) -> None:
        catalog, name = _names((catalog, "catalog name"), (name, "schema name"))
        if not self.store.get_catalog(catalog):
            raise CatalogError(f"catalog {catalog.lower()} does not exist")
        if self.store.get_schema(catalog, name):
            if if_not_exists:
                return
            raise CatalogError(f"schema {catalog.lower()}.{name.lower()} already exists")
        self.store.put_schema(SchemaInfo(catalog.lower(), name.lower(), comment, time.time()))

    def register_table(self, info: TableInfo, *, replace: bool = False) -> TableInfo:
        _names(
            (info.catalog, "catalog name"), (info.schema, "schema name"), (info.name, "table name")
        )
        if not self.store.get_schema(info.catalog, info.schema):
            raise CatalogError(f"schema {info.catalog}.{info.schema} does not exist")
        old = self.store.get_table(info.catalog, info.schema, info.name)
        if old and not replace:
            raise CatalogError(f"table {info.full_name} already exists")
        now = time.time()
        created = old.created_at if old else (info.created_at or now)
        from dataclasses import replace as dc_replace

        stored = dc_replace(
            info,
            catalog=info.catalog.lower(),
            schema=info.schema.lower(),
            name=info.name.lower(),
            created_at=created,
            updated_at=now,
        )
        try:  # checked inside the store's write transaction: two registrations race in vain
            self.store.put_table(stored, check=lambda others: overlapping(stored, others))
        except LocationOverlaps as e:
            raise CatalogError(str(e)) from e
        return stored

    def check_location_free(self, catalog: str, schema: str, name: str, location: str) -> None:
        """Refuse (CatalogError) before any file is written when `location` overlaps another
        registered table's; the registration checks again, atomically."""
        probe = TableInfo(catalog.lower(), schema.lower(), name.lower(), location, ())
        try:
            overlapping(probe, self.store.list_tables())
        except LocationOverlaps as e:
            raise CatalogError(str(e)) from e

    def drop_table(self, catalog: str, schema: str, name: str) -> bool:
        return self.store.delete_table(catalog, schema, name)
