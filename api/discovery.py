"""What each caller may discover: a sorted snapshot of the catalog and per-user visibility.

Listing is on the hot path (10,000 tables, dozens of clients), so:
- the catalog is snapshotted into sorted, bisectable lists per schema, rebuilt only when the
  store's generation counter moves;
- "is this catalog/schema visible to this user" is computed once per (user, snapshot,
  policy set) and kept;
- a table's Unity Catalog JSON is rendered once per (table version, visible columns, whether
  the caller manages it) and reused as bytes, so a page of tables is a byte join.
Every answer is derived from `PolicyEnforcer.table_access`, the same decision the governed
session uses, so discovery never shows what a SELECT would not return.
"""

from __future__ import annotations

import base64
import bisect
import functools
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from api.errors import ApiError
from api.types import field_json, precision_scale, type_name
from catalog.catalog import normalise_location
from catalog.model import CatalogInfo, SchemaInfo, TableInfo
from catalog.names import NAME_PATTERN, InvalidName, check_name

if TYPE_CHECKING:
    from api.caller import Caller
    from governance.policy.enforcer import PolicyEnforcer, TableAccess
    from governance.session.governed import Lakegate

DEFAULT_PAGE = 100
CHECK_INTERVAL = 0.05  # seconds between catalog generation checks
MAX_PAGE = 1000
_NS = uuid.UUID("6f1c1d2e-8a53-4c1e-9d1b-6c616b656761")  # uuid5 namespace for stable ids


def ms(t: float | None) -> int | None:
    return int(t * 1000) if t else None


@functools.lru_cache(maxsize=65536)
def stable_id(kind: str, name: str) -> str:
    return str(uuid.uuid5(_NS, f"{kind}:{name}"))


# pagination ---------------------------------------------------------------------------------


def page_size(max_results: int | None) -> int:
    """UC's rule: absent or 0 -> the server's page size; negative -> INVALID_ARGUMENT."""
    if max_results is None or max_results == 0:
        return DEFAULT_PAGE
    if max_results < 0:
        raise ApiError(400, "max_results must not be negative")
    return min(max_results, MAX_PAGE)


# A token is unpadded base64url; any such string is accepted (it only says where the next
# page starts, and every page is filtered for the caller), so the schema's pattern is exact.
TOKEN_PATTERN = r"^([A-Za-z0-9_-]{4})*([A-Za-z0-9_-]{2,3})?$"
_TOKEN_RE = re.compile(TOKEN_PATTERN)


def encode_token(after: str) -> str:
    return base64.urlsafe_b64encode(after.encode()).decode().rstrip("=")


def decode_token(token: str | None) -> str | None:
    """The last name of the previous page; opaque to clients."""
    if not token:
        return None
    if not _TOKEN_RE.fullmatch(token):
        raise ApiError(400, "invalid page_token")
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return raw.decode("utf-8", "replace")


# Property keys that carry storage credentials (connector options, account keys, SAS and
# session tokens): a key to the files behind the policies, so only the table's managers see
# them. Locations never carry a URL's password, query or fragment (where such secrets sit).
CREDENTIAL_KEY = re.compile(
    r"secret|passw|token|credential|\bsas\b|(access|account|private|session)[._-]?key"
    r"|^fs\.|^spark\.hadoop\.",
    re.IGNORECASE,
)


def without_credentials(location: str) -> str:
    """The location without a URL's `user:password@`, query or fragment (`abfss://` keeps
    its `container@`, which holds no secret)."""
    url = urlsplit(location)
    if not url.scheme or not url.netloc:
        return location
    user, at, host = url.netloc.rpartition("@")
    netloc = host if at and ":" in user else url.netloc
    return urlunsplit((url.scheme, netloc, url.path, "", ""))


# snapshot -----------------------------------------------------------------------------------


@dataclass
class Snapshot:
    generation: int
    tables: dict[str, TableInfo]  # full name -> table
    catalogs: dict[str, CatalogInfo]
    catalog_names: list[str]  # sorted
    schemas: dict[tuple[str, str], SchemaInfo]
    schema_names: dict[str, list[str]]  # catalog -> sorted schema names
    table_names: dict[tuple[str, str], list[str]]  # (catalog, schema) -> sorted table names

    def schema_tables(self, catalog: str, schema: str) -> Iterator[TableInfo]:
        for n in self.table_names.get((catalog, schema), ()):
            yield self.tables[f"{catalog}.{schema}.{n}"]


@dataclass
class _Visible:
    catalogs: frozenset[str]
    schemas: frozenset[tuple[str, str]]


@dataclass
class _Renders:
    """Cached UC JSON fragments; cleared wholesale when large (cheap to rebuild)."""

    items: dict[tuple, bytes] = field(default_factory=dict)


# What `split_name` accepts, for the OpenAPI schema (a name part holds no dot or slash).
_PART = NAME_PATTERN  # the one identifier set (catalog/names.py)
CATALOG_NAME_PATTERN = f"^{_PART}$"
SCHEMA_NAME_PATTERN = rf"^{_PART}\.{_PART}$"
TABLE_NAME_PATTERN = rf"^{_PART}\.{_PART}\.{_PART}$"


def split_name(full_name: str, parts: int) -> tuple[str, ...]:
    names = full_name.lower().split(".")
    if len(names) != parts or not all(names):
        kind = {1: "catalog", 2: "catalog.schema", 3: "catalog.schema.table"}[parts]
        raise ApiError(400, f"'{full_name[:200]}' is not a name of the form {kind}")
    try:  # names are never paths (catalog/names.py), here as everywhere else
        return tuple(check_name(n, "name part") for n in names)
    except InvalidName as e:
        raise ApiError(400, f"invalid name: {str(e)[:200]}") from None


class Discovery:
    def __init__(self, lg: Lakegate) -> None:
        self.lg = lg
        self._snap: Snapshot | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self._visible: dict[tuple[str, int, int], _Visible] = {}
        self._renders = _Renders()

    # snapshot ---------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Check the store on the next request (after this process changed the catalog)."""
        self._checked = 0.0

    def snapshot(self) -> Snapshot:
        """The catalog as of at most `CHECK_INTERVAL` ago (one SQLite read per interval, not
        per request; changes made through this server are seen at once via `invalidate`)."""
        snap = self._snap
        now = time.monotonic()
        if snap is not None and now - self._checked < CHECK_INTERVAL:
            return snap
        gen = self.lg.catalog.store.generation()
        self._checked = now
        if snap is not None and snap.generation == gen:
            return snap
        with self._lock:
            if self._snap is not None and self._snap.generation == gen:
                return self._snap
            store = self.lg.catalog.store
            tables = {t.full_name: t for t in store.list_tables()}
            schemas = {(s.catalog, s.name): s for s in store.list_schemas()}
            catalogs = {c.name: c for c in store.list_catalogs()}
            schema_names: dict[str, list[str]] = {}
            for c, s in sorted(schemas):
                schema_names.setdefault(c, []).append(s)
            table_names: dict[tuple[str, str], list[str]] = {}
            for t in sorted(tables.values(), key=lambda t: t.full_name):
                table_names.setdefault((t.catalog, t.schema), []).append(t.name)
            self._snap = Snapshot(
                gen, tables, catalogs, sorted(catalogs), schemas, schema_names, table_names
            )
            self._visible.clear()
            return self._snap

    # visibility -------------------------------------------------------------------------

    def access(self, caller: Caller, table: TableInfo) -> TableAccess:
        return caller.enforcer.table_access(caller.ident, table)

    def can_see(self, caller: Caller, table: TableInfo) -> bool:
        return "select" in caller.enforcer.table_access(caller.ident, table).privileges

    def _visibility(self, caller: Caller, snap: Snapshot) -> _Visible:
        key = (caller.ident.keys, snap.generation, id(caller.enforcer))
        hit = self._visible.get(key)
        if hit is not None:
            return hit
        enf: PolicyEnforcer = caller.enforcer
        ident = caller.ident
        schemas: set[tuple[str, str]] = set()
        for c, s in snap.schemas:
            if enf.has_privilege(ident, "manage", c, s, "*")[0] or any(
                self.can_see(caller, t) for t in snap.schema_tables(c, s)
            ):
                schemas.add((c, s))
        catalogs = {
            c
            for c in snap.catalogs
            if any(k[0] == c for k in schemas) or enf.has_privilege(ident, "manage", c, "*", "*")[0]
        }
        vis = _Visible(frozenset(catalogs), frozenset(schemas))
        if len(self._visible) > 10_000:
            self._visible.clear()
        self._visible[key] = vis
        return vis

    def visible_catalog(self, caller: Caller, name: str) -> CatalogInfo:
        (name,) = split_name(name, 1)
        snap = self.snapshot()
        info = snap.catalogs.get(name)
        if info is None or info.name not in self._visibility(caller, snap).catalogs:
            if info is not None:
                caller.deny(f"catalog {info.name} is not visible to {caller.user}")
            raise ApiError(404, f"Catalog not found: {name[:200]}")
        return info

    def visible_schema(self, caller: Caller, catalog: str, schema: str) -> SchemaInfo:
        snap = self.snapshot()
        key = (catalog.lower(), schema.lower())
        info = snap.schemas.get(key)
        if info is None or key not in self._visibility(caller, snap).schemas:
            if info is not None:
                caller.deny(f"schema {key[0]}.{key[1]} is not visible to {caller.user}")
            raise ApiError(404, f"Schema not found: {catalog[:100]}.{schema[:100]}")
        return info

    def visible_table(self, caller: Caller, full_name: str) -> tuple[TableInfo, TableAccess]:
        """The table and the caller's access, or 404 exactly as if it did not exist."""
        c, s, t = split_name(full_name, 3)
        table = self.snapshot().tables.get(f"{c}.{s}.{t}")
        caller.audit.src = f"{c}.{s}.{t}"
        if table is None:
            raise ApiError(404, f"Table not found: {c}.{s}.{t}")
        access = self.access(caller, table)
        if "select" not in access.privileges:
            caller.deny(f"user {caller.user} may not read table {table.full_name}")
            raise ApiError(404, f"Table not found: {c}.{s}.{t}")
        return table, access

    # listing ----------------------------------------------------------------------------

    def list_catalogs(
        self, caller: Caller, limit: int, after: str | None
    ) -> tuple[list[CatalogInfo], str | None]:
        snap = self.snapshot()
        vis = self._visibility(caller, snap)
        names = snap.catalog_names
        i = bisect.bisect_right(names, after) if after else 0
        out: list[CatalogInfo] = []
        while i < len(names) and len(out) <= limit:
            if names[i] in vis.catalogs:
                out.append(snap.catalogs[names[i]])
            i += 1
        return _page(out, limit, lambda c: c.name)

    def list_schemas(
        self, caller: Caller, catalog: str, limit: int, after: str | None
    ) -> tuple[list[SchemaInfo], str | None]:
        info = self.visible_catalog(caller, catalog)
        snap = self.snapshot()
        vis = self._visibility(caller, snap)
        names = snap.schema_names.get(info.name, [])
        i = bisect.bisect_right(names, after) if after else 0
        out: list[SchemaInfo] = []
        while i < len(names) and len(out) <= limit:
            if (info.name, names[i]) in vis.schemas:
                out.append(snap.schemas[(info.name, names[i])])
            i += 1
        return _page(out, limit, lambda s: s.name)

    def list_tables(
        self, caller: Caller, catalog: str, schema: str, limit: int, after: str | None
    ) -> tuple[list[tuple[TableInfo, TableAccess]], str | None]:
        info = self.visible_schema(caller, catalog, schema)
        snap = self.snapshot()
        names = snap.table_names.get((info.catalog, info.name), [])
        i = bisect.bisect_right(names, after) if after else 0
        out: list[tuple[TableInfo, TableAccess]] = []
        prefix = f"{info.catalog}.{info.name}."
        while i < len(names) and len(out) <= limit:
            table = snap.tables[prefix + names[i]]
            access = self.access(caller, table)
            if "select" in access.privileges:
                out.append((table, access))
            i += 1
        return _page(out, limit, lambda p: p[0].name)

    # rendering (UC JSON) ------------------------------------------------------------------

    def owner(self, caller: Caller, catalog: str, schema: str) -> str | None:
        ps = caller.enforcer.policy_set
        d = ps.domain_of_schema(catalog, schema)
        if d is None or not ps.domains[d].owners:
            return None
        return ps.domains[d].owners[0].key

    def tables_json(
        self, caller: Caller, items: list[tuple[TableInfo, TableAccess]]
    ) -> list[bytes]:
        owners: dict[tuple[str, str], str | None] = {}
        out = []
        for table, access in items:
            k = (table.catalog, table.schema)
            if k not in owners:
                owners[k] = self.owner(caller, *k)
            out.append(self.table_json(table, access, owners[k]))
        return out

    def table_json(self, table: TableInfo, access: TableAccess, owner: str | None) -> bytes:
        manages = "manage" in access.privileges
        key = (
            table.catalog,
            table.schema,
            table.name,
            table.updated_at,
            table.location,
            access.visible_columns,
            manages,
            owner,
        )
        hit = self._renders.items.get(key)
        if hit is not None:
            return hit
        by_name = {c.name: c for c in table.columns}
        parts = {p.lower(): i for i, p in enumerate(table.partition_columns)}
        cols = []
        for pos, name in enumerate(access.visible_columns):
            c = by_name[name]
            prec, scale = precision_scale(c.type_text)
            col = {
                "name": c.name,
                "type_text": c.type_text,
                "type_json": c.type_json or field_json(c.name, c.type_text, c.nullable, c.comment),
                "type_name": type_name(c.type_text),
                "position": pos,
                "nullable": c.nullable,
            }
            if prec is not None:
                col["type_precision"], col["type_scale"] = prec, scale
            if c.comment:
                col["comment"] = c.comment
            if c.name.lower() in parts:
                col["partition_index"] = parts[c.name.lower()]
            cols.append(col)
        doc: dict = {
            "name": table.name,
            "catalog_name": table.catalog,
            "schema_name": table.schema,
            "full_name": table.full_name,
            "table_type": self.table_type(table),
            "data_source_format": "DELTA",
            "columns": cols,
        }
        if manages:
            doc["storage_location"] = without_credentials(table.location)
        if table.comment:
            doc["comment"] = table.comment
        doc["properties"] = {
            str(k): str(v)
            for k, v in (table.properties or {}).items()
            if manages or not CREDENTIAL_KEY.search(str(k))
        }
        if owner:
            doc["owner"] = owner
        if table.created_at:
            doc["created_at"] = ms(table.created_at)
        if table.updated_at:
            doc["updated_at"] = ms(table.updated_at)
        doc["table_id"] = stable_id("table", table.full_name)
        out = json.dumps(doc, separators=(",", ":")).encode()
        if len(self._renders.items) > 50_000:
            self._renders.items.clear()
        self._renders.items[key] = out
        return out

    def table_type(self, table: TableInfo) -> str:
        loc = normalise_location(table.location)
        wh = str(self.lg.catalog.warehouse)
        return (
            "MANAGED"
            if "://" not in loc and (loc + "/").startswith(wh + "/") and Path(loc) != Path(wh)
            else "EXTERNAL"
        )

    def schema_doc(self, caller: Caller, s: SchemaInfo) -> dict:
        doc: dict = {
            "name": s.name,
            "catalog_name": s.catalog,
            "full_name": s.full_name,
            "schema_id": stable_id("schema", s.full_name),
        }
        if s.comment:
            doc["comment"] = s.comment
        owner = self.owner(caller, s.catalog, s.name)
        if owner:
            doc["owner"] = owner
        if s.created_at:
            doc["created_at"] = ms(s.created_at)
        return doc

    @staticmethod
    def catalog_doc(c: CatalogInfo) -> dict:
        doc: dict = {"name": c.name, "id": stable_id("catalog", c.name)}
        if c.comment:
            doc["comment"] = c.comment
        if c.created_at:
            doc["created_at"] = ms(c.created_at)
        return doc


def _page(items: list, limit: int, name_of: object) -> tuple[list, str | None]:
    """`items` holds up to limit+1 entries: the extra one only says another page exists."""
    if len(items) > limit:
        items = items[:limit]
        return items, encode_token(name_of(items[-1]))  # type: ignore[operator]
    return items, None
