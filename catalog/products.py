"""Data products: what a domain publishes for others to use, kept beside the catalog.

A product names its domain, its output tables, a lifecycle stage and a freshness objective.
Products are registered through the REST API (source `api`) or written as YAML next to the
policies (source `yaml:<file>`); both land in one SQLite table in the catalog's file, so every
reader has one path. YAML-defined products are owned by their files: the API refuses to
change them (git is where they are reviewed), and a sync replaces them wholesale.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

STAGES: tuple[str, ...] = ("draft", "active", "deprecated", "retired")
# Lifecycle moves forward; deprecation can be undone, retirement cannot.
TRANSITIONS: dict[str, frozenset[str]] = {
    "draft": frozenset({"draft", "active", "retired"}),
    "active": frozenset({"active", "deprecated", "retired"}),
    "deprecated": frozenset({"deprecated", "active", "retired"}),
    "retired": frozenset({"retired"}),
}
CLASSIFICATIONS: tuple[str, ...] = ("public", "internal", "confidential", "restricted")
PRODUCT_KEYS: tuple[str, ...] = ("name", "domain", "description", "output_tables", "stage",
                                 "tags", "classification", "freshness")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_\-]{0,127}")
TAG_RE = re.compile(r"[a-z0-9][a-z0-9_\-:.]{0,63}")
TABLE_RE = re.compile(r"[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+")
_DURATION_RE = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class ProductError(ValueError):
    """A product definition is invalid, or a change to it is not allowed."""


class ProductConflict(ProductError):
    """The product exists already, or is owned by a YAML file."""


def parse_duration(text: str) -> int:
    """`90m`, `24h`, `1d12h`, `2w` -> seconds (freshness objectives are coarse on purpose)."""
    s = str(text).strip().lower()
    pos, total = 0, 0
    for m in _DURATION_RE.finditer(s):
        if s[pos:m.start()].strip():
            break
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s or s[pos:].strip() or total <= 0:
        raise ProductError(f"freshness '{text}' is not a duration like 30m, 24h or 7d")
    return total


@dataclass(frozen=True)
class DataProduct:
    name: str
    domain: str
    description: str = ""
    output_tables: tuple[str, ...] = ()
    stage: str = "draft"
    tags: tuple[str, ...] = ()
    classification: str | None = None
    freshness: str | None = None  # objective: max age of the newest commit, e.g. "24h"
    source: str = "api"  # `api` or `yaml:<file name>`
    created_at: float = 0.0
    updated_at: float = 0.0
    created_by: str | None = None
    updated_by: str | None = None

    @property
    def freshness_seconds(self) -> int | None:
        return parse_duration(self.freshness) if self.freshness else None


def normalise(p: DataProduct) -> DataProduct:
    """Lower-case names, de-duplicated lists, and every field checked on its own."""
    name = str(p.name).strip().lower()
    if not NAME_RE.fullmatch(name):
        raise ProductError(f"product name '{p.name}' must match {NAME_RE.pattern}")
    domain = str(p.domain).strip().lower()
    if not domain:
        raise ProductError(f"product '{name}' names no domain")
    tables = tuple(dict.fromkeys(str(t).strip().strip("`").lower() for t in p.output_tables))
    for t in tables:
        if not TABLE_RE.fullmatch(t):
            raise ProductError(f"output table '{t}' of product '{name}' is not "
                               "catalog.schema.table")
    tags = tuple(dict.fromkeys(str(t).strip().lower() for t in p.tags))
    for t in tags:
        if not TAG_RE.fullmatch(t):
            raise ProductError(f"tag '{t}' of product '{name}' must match {TAG_RE.pattern}")
    if p.stage not in STAGES:
        raise ProductError(f"stage '{p.stage}' of product '{name}' is not one of "
                           f"{', '.join(STAGES)}")
    if p.classification is not None and p.classification not in CLASSIFICATIONS:
        raise ProductError(f"classification '{p.classification}' of product '{name}' is not "
                           f"one of {', '.join(CLASSIFICATIONS)}")
    if p.freshness is not None:
        parse_duration(p.freshness)
    if len(p.description) > 4000:
        raise ProductError(f"description of product '{name}' is longer than 4000 characters")
    return replace(p, name=name, domain=domain, output_tables=tables, tags=tags,
                   description=str(p.description))


def check_domain(p: DataProduct, domain_schemas: Mapping[str, Iterable[str]]) -> None:
    """The domain exists and owns every output table (a table belongs to one domain)."""
    if p.domain not in domain_schemas:
        raise ProductError(f"domain '{p.domain}' of product '{p.name}' is not defined in the "
                           "policies")
    owned = set(domain_schemas[p.domain])
    for t in p.output_tables:
        if t.rsplit(".", 1)[0] not in owned:
            raise ProductError(f"output table {t} of product '{p.name}' is not in a schema of "
                               f"domain '{p.domain}' ({', '.join(sorted(owned)) or 'none'})")


def check_transition(old: str, new: str) -> None:
    if new not in TRANSITIONS.get(old, frozenset()):
        raise ProductConflict(f"a product cannot move from stage {old} to {new}")


_DDL = """
CREATE TABLE IF NOT EXISTS data_products (
    name TEXT PRIMARY KEY, domain TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
    output_tables TEXT NOT NULL DEFAULT '[]', stage TEXT NOT NULL, tags TEXT NOT NULL DEFAULT '[]',
    classification TEXT, freshness TEXT, source TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, created_by TEXT, updated_by TEXT);
CREATE INDEX IF NOT EXISTS data_products_domain ON data_products (domain);
"""
_COLS = ("name, domain, description, output_tables, stage, tags, classification, freshness, "
         "source, created_at, updated_at, created_by, updated_by")


class ProductStore:
    """The `data_products` table in the catalog's SQLite file (shared by processes)."""

    def __init__(self, connect: Any) -> None:
        """`connect` is the catalog store's `connection` (a per-thread sqlite3 connection)."""
        self._connect = connect
        self._lock = threading.Lock()
        self._connect().executescript(_DDL)

    @staticmethod
    def _row(r: tuple) -> DataProduct:
        return DataProduct(
            name=r[0], domain=r[1], description=r[2], output_tables=tuple(json.loads(r[3])),
            stage=r[4], tags=tuple(json.loads(r[5])), classification=r[6], freshness=r[7],
            source=r[8], created_at=r[9], updated_at=r[10], created_by=r[11], updated_by=r[12])

    @staticmethod
    def _args(p: DataProduct) -> tuple:
        return (p.name, p.domain, p.description, json.dumps(list(p.output_tables)), p.stage,
                json.dumps(list(p.tags)), p.classification, p.freshness, p.source, p.created_at,
                p.updated_at, p.created_by, p.updated_by)

    def get(self, name: str) -> DataProduct | None:
        r = self._connect().execute(f"SELECT {_COLS} FROM data_products WHERE name=?",
                                    (name.lower(),)).fetchone()
        return self._row(r) if r else None

    def list(self, domain: str | None = None) -> list[DataProduct]:
        sql, args = f"SELECT {_COLS} FROM data_products", ()
        if domain is not None:
            sql, args = sql + " WHERE domain=?", (domain.lower(),)
        return [self._row(r) for r in self._connect().execute(sql + " ORDER BY name", args)]

    def _tx(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        return conn

    def create(self, p: DataProduct, user: str) -> DataProduct:
        now = time.time()
        p = replace(p, source="api", created_at=now, updated_at=now, created_by=user,
                    updated_by=user)
        conn = self._tx()
        try:
            if conn.execute("SELECT 1 FROM data_products WHERE name=?", (p.name,)).fetchone():
                raise ProductConflict(f"product '{p.name}' already exists")
            conn.execute(f"INSERT INTO data_products ({_COLS}) VALUES "
                         f"({','.join('?' * 13)})", self._args(p))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return p

    def update(self, p: DataProduct, user: str, *, expected_updated_at: float) -> DataProduct:
        """Replace an API-owned product if nobody changed it since it was read."""
        p = replace(p, updated_at=max(time.time(), expected_updated_at + 1e-6), updated_by=user)
        conn = self._tx()
        try:
            cur = conn.execute(
                f"UPDATE data_products SET ({_COLS}) = ({','.join('?' * 13)}) "
                "WHERE name=? AND updated_at=? AND source='api'",
                (*self._args(p), p.name, expected_updated_at))
            if cur.rowcount != 1:
                raise ProductConflict(f"product '{p.name}' changed meanwhile; read it again")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return p

    def sync_yaml(self, products: Iterable[DataProduct]) -> list[str]:
        """Make the YAML-sourced rows equal `products`; returns the names it had to skip
        because the API already owns them."""
        skipped: list[str] = []
        now = time.time()
        conn = self._tx()
        try:
            api_owned = {r[0] for r in conn.execute(
                "SELECT name FROM data_products WHERE source='api'")}
            old = {r[0]: r for r in conn.execute(
                f"SELECT {_COLS} FROM data_products WHERE source LIKE 'yaml:%'")}
            conn.execute("DELETE FROM data_products WHERE source LIKE 'yaml:%'")
            for p in products:
                if p.name in api_owned:
                    skipped.append(p.name)
                    continue
                prev = self._row(old[p.name]) if p.name in old else None
                keep = prev is not None and replace(prev, created_at=0, updated_at=0) == \
                    replace(p, created_at=0, updated_at=0)
                created = prev.created_at if prev else now
                updated = prev.updated_at if (prev and keep) else now
                conn.execute(f"INSERT INTO data_products ({_COLS}) VALUES "
                             f"({','.join('?' * 13)})",
                             self._args(replace(p, created_at=created, updated_at=updated)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return skipped


def load_product_dir(root: Path) -> list[DataProduct]:
    """Every `*.yaml`/`*.yml` under `root` holding `products: [...]` (and optionally a
    file-wide `domain:`); raises ProductError naming the file on the first problem."""
    out: dict[str, DataProduct] = {}
    if not root.is_dir():
        return []
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    for f in files:
        rel = f.relative_to(root).as_posix()
        try:
            raw = yaml.safe_load(f.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ProductError(f"{rel}: cannot read: {str(e).splitlines()[0]}") from None
        if not isinstance(raw, dict) or not set(raw) <= {"products", "domain", "description"}:
            raise ProductError(f"{rel}: expected a mapping with products: [...] (and domain:)")
        items = raw.get("products") or []
        if not isinstance(items, list):
            raise ProductError(f"{rel}: products must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ProductError(f"{rel}: products[{i}] must be a mapping")
            unknown = set(item) - set(PRODUCT_KEYS)
            if unknown:
                raise ProductError(f"{rel}: products[{i}]: unknown key(s) "
                                   f"{', '.join(sorted(unknown))}; "
                                   f"known: {', '.join(PRODUCT_KEYS)}")
            try:
                p = normalise(DataProduct(
                    name=str(item.get("name", "")), domain=str(item.get("domain") or
                                                               raw.get("domain") or ""),
                    description=str(item.get("description") or ""),
                    output_tables=tuple(item.get("output_tables") or ()),
                    stage=str(item.get("stage", "draft")), tags=tuple(item.get("tags") or ()),
                    classification=item.get("classification"),
                    freshness=None if item.get("freshness") is None else str(item["freshness"]),
                    source=f"yaml:{rel}"))
            except (ProductError, TypeError) as e:
                raise ProductError(f"{rel}: products[{i}]: {e}") from None
            if p.name in out:
                raise ProductError(f"{rel}: product '{p.name}' is also defined in "
                                   f"{out[p.name].source[5:]}")
            out[p.name] = p
    return list(out.values())


def dir_stamp(root: Path) -> tuple:
    """Names, sizes and mtimes of the YAML files: a cheap change check for hot reload."""
    if not root.is_dir():
        return ()
    out = []
    for f in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(out)
