"""Data products: what a domain publishes for others to use, kept beside the catalog.

A product names its domain, its output tables, a lifecycle stage and a freshness objective.
Products are registered through the REST API (source `api`) or written as YAML next to the
policies (source `yaml:<file>`); both land in one table of the catalog's database, so every
reader has one path. YAML-defined products are owned by their files: the API refuses to
change them (git is where they are reviewed), and a sync replaces them wholesale.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import delete, insert, select, update

from catalog.schema import data_products as _T
from catalog.store import SqlStore

STAGES: tuple[str, ...] = ("draft", "active", "deprecated", "retired")
# Lifecycle moves forward; deprecation can be undone, retirement cannot.
TRANSITIONS: dict[str, frozenset[str]] = {
    "draft": frozenset({"draft", "active", "retired"}),
    "active": frozenset({"active", "deprecated", "retired"}),
    "deprecated": frozenset({"deprecated", "active", "retired"}),
    "retired": frozenset({"retired"}),
}
CLASSIFICATIONS: tuple[str, ...] = ("public", "internal", "confidential", "restricted")
PRODUCT_KEYS: tuple[str, ...] = (
    "name",
    "domain",
    "description",
    "output_tables",
    "stage",
    "tags",
    "classification",
    "freshness",
)
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
        if s[pos : m.start()].strip():
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
            raise ProductError(
                f"output table '{t}' of product '{name}' is not catalog.schema.table"
            )
    tags = tuple(dict.fromkeys(str(t).strip().lower() for t in p.tags))
    for t in tags:
        if not TAG_RE.fullmatch(t):
            raise ProductError(f"tag '{t}' of product '{name}' must match {TAG_RE.pattern}")
    if p.stage not in STAGES:
        raise ProductError(
            f"stage '{p.stage}' of product '{name}' is not one of {', '.join(STAGES)}"
        )
    if p.classification is not None and p.classification not in CLASSIFICATIONS:
        raise ProductError(
            f"classification '{p.classification}' of product '{name}' is not "
            f"one of {', '.join(CLASSIFICATIONS)}"
        )
    if p.freshness is not None:
        parse_duration(p.freshness)
    if len(p.description) > 4000:
        raise ProductError(f"description of product '{name}' is longer than 4000 characters")
    return replace(
        p, name=name, domain=domain, output_tables=tables, tags=tags, description=str(p.description)
    )


def check_domain(p: DataProduct, domain_schemas: Mapping[str, Iterable[str]]) -> None:
    """The domain exists and owns every output table (a table belongs to one domain)."""
    if p.domain not in domain_schemas:
        raise ProductError(
            f"domain '{p.domain}' of product '{p.name}' is not defined in the policies"
        )
    owned = set(domain_schemas[p.domain])
    for t in p.output_tables:
        if t.rsplit(".", 1)[0] not in owned:
            raise ProductError(
                f"output table {t} of product '{p.name}' is not in a schema of "
                f"domain '{p.domain}' ({', '.join(sorted(owned)) or 'none'})"
            )


def check_transition(old: str, new: str) -> None:
    if new not in TRANSITIONS.get(old, frozenset()):
        raise ProductConflict(f"a product cannot move from stage {old} to {new}")


class ProductStore:
    """The `data_products` table in the catalog's database (shared by processes)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    @staticmethod
    def _product(r: Any) -> DataProduct:
        return DataProduct(
            name=r.name,
            domain=r.domain,
            description=r.description,
            output_tables=tuple(json.loads(r.output_tables)),
            stage=r.stage,
            tags=tuple(json.loads(r.tags)),
            classification=r.classification,
            freshness=r.freshness,
            source=r.source,
            created_at=r.created_at,
            updated_at=r.updated_at,
            created_by=r.created_by,
            updated_by=r.updated_by,
        )

    @staticmethod
    def _row(p: DataProduct) -> dict[str, Any]:
        return {
            "name": p.name,
            "domain": p.domain,
            "description": p.description,
            "output_tables": json.dumps(list(p.output_tables)),
            "stage": p.stage,
            "tags": json.dumps(list(p.tags)),
            "classification": p.classification,
            "freshness": p.freshness,
            "source": p.source,
            "created_at": p.created_at,
            "updated_at": p.updated_at,
            "created_by": p.created_by,
            "updated_by": p.updated_by,
        }

    def get(self, name: str) -> DataProduct | None:
        with self.store.read() as conn:
            r = conn.execute(select(_T).where(_T.c.name == name.lower())).first()
        return self._product(r) if r else None

    def list(self, domain: str | None = None) -> list[DataProduct]:
        query = select(_T)
        if domain is not None:
            query = query.where(_T.c.domain == domain.lower())
        with self.store.read() as conn:
            return [self._product(r) for r in conn.execute(query.order_by(_T.c.name))]

    def create(self, p: DataProduct, user: str) -> DataProduct:
        now = time.time()
        p = replace(
            p, source="api", created_at=now, updated_at=now, created_by=user, updated_by=user
        )
        with self.store.write(bump=False) as conn:
            if conn.execute(select(_T.c.name).where(_T.c.name == p.name)).first():
                raise ProductConflict(f"product '{p.name}' already exists")
            conn.execute(insert(_T), [self._row(p)])
        return p

    def update(self, p: DataProduct, user: str, *, expected_updated_at: float) -> DataProduct:
        """Replace an API-owned product if nobody changed it since it was read."""
        p = replace(p, updated_at=max(time.time(), expected_updated_at + 1e-6), updated_by=user)
        with self.store.write(bump=False) as conn:
            done = conn.execute(
                update(_T)
                .where(
                    _T.c.name == p.name,
                    _T.c.updated_at == expected_updated_at,
                    _T.c.source == "api",
                )
                .values(self._row(p))
            )
            if done.rowcount != 1:
                raise ProductConflict(f"product '{p.name}' changed meanwhile; read it again")
        return p

    def sync_yaml(self, products: Iterable[DataProduct]) -> list[str]:
        """Make the YAML-sourced rows equal `products`; returns the names it had to skip
        because the API already owns them."""
        skipped: list[str] = []
        now = time.time()
        with self.store.write(bump=False) as conn:
            api_owned = set(conn.execute(select(_T.c.name).where(_T.c.source == "api")).scalars())
            yaml_rows = _T.c.source.like("yaml:%")
            old = {r.name: r for r in conn.execute(select(_T).where(yaml_rows))}
            conn.execute(delete(_T).where(yaml_rows))
            rows = []
            for p in products:
                if p.name in api_owned:
                    skipped.append(p.name)
                    continue
                prev = self._product(old[p.name]) if p.name in old else None
                keep = prev is not None and replace(prev, created_at=0, updated_at=0) == replace(
                    p, created_at=0, updated_at=0
                )
                created = prev.created_at if prev else now
                updated = prev.updated_at if (prev and keep) else now
                rows.append(self._row(replace(p, created_at=created, updated_at=updated)))
            if rows:
                conn.execute(insert(_T), rows)
        return skipped


def load_product_dir(root: Path) -> list[DataProduct]:
    """Every `*.yaml`/`*.yml` under `root` holding `products: [...]` (and optionally a
    file-wide `domain:`); raises ProductError naming the file on the first problem."""
    out: dict[str, DataProduct] = {}
    if not root.is_dir():
        return []
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in (".yaml", ".yml")
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
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
                raise ProductError(
                    f"{rel}: products[{i}]: unknown key(s) "
                    f"{', '.join(sorted(unknown))}; "
                    f"known: {', '.join(PRODUCT_KEYS)}"
                )
            try:
                p = normalise(
                    DataProduct(
                        name=str(item.get("name", "")),
                        domain=str(item.get("domain") or raw.get("domain") or ""),
                        description=str(item.get("description") or ""),
                        output_tables=tuple(item.get("output_tables") or ()),
                        stage=str(item.get("stage", "draft")),
                        tags=tuple(item.get("tags") or ()),
                        classification=item.get("classification"),
                        freshness=None if item.get("freshness") is None else str(item["freshness"]),
                        source=f"yaml:{rel}",
                    )
                )
            except (ProductError, TypeError) as e:
                raise ProductError(f"{rel}: products[{i}]: {e}") from None
            if p.name in out:
                raise ProductError(
                    f"{rel}: product '{p.name}' is also defined in {out[p.name].source[5:]}"
                )
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
