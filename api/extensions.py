"""Lakegate's governance view of tables: effective access, tags, domain, Delta history, search.

Everything here is computed from the same `TableAccess` the governed session rewrites with,
and nothing describes a column the caller may not read. Row filter text is policy detail
that can reveal data (`WHERE salary > 100000`), so only a table's managers see it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Annotated

from fastapi import Query, Request

from api.caller import Caller
from api.delta_log import read_log
from api.deps import CallerDep, authenticated_router, get_service
from api.discovery import Snapshot
from api.errors import responses
from api.models import SearchResponse, TableDetail, TableHistory, TablePath, WhoAmI
from api.registry import dt
from catalog.model import TableInfo

router = authenticated_router(tags=["Lakegate: tables"])


@router.get("/whoami", operation_id="whoami", response_model=WhoAmI, responses=responses())
async def whoami(request: Request, caller: CallerDep) -> dict:
    """The user the token stands for, their groups (nesting resolved) and owned domains."""
    reg = get_service(request).registry
    return {
        "user": caller.user,
        "groups": sorted(caller.ident.groups),
        "auth": caller.principal.method,
        "token_expires": dt(caller.principal.expires) if caller.principal.expires else None,
        "domains_owned": reg.owned_domains(caller),
    }


@router.get(
    "/tables/{full_name}",
    operation_id="getTableDetail",
    response_model=TableDetail,
    responses=responses(400, 404),
)
async def table_detail(request: Request, caller: CallerDep, full_name: TablePath) -> dict:
    """The caller's effective access to one table, its tags, domain and Delta state."""
    svc = get_service(request)
    table, access = svc.discovery.visible_table(caller, full_name)
    ps = caller.enforcer.policy_set
    key = (table.catalog, table.schema, table.name)
    manages = "manage" in access.privileges
    by_name = {c.name: c for c in table.columns}
    columns = []
    for pos, name in enumerate(access.visible_columns):
        c = by_name[name]
        applied = access.masks.get(name.lower())
        columns.append(
            {
                "name": c.name,
                "type_text": c.type_text,
                "nullable": c.nullable,
                "position": pos,
                "comment": c.comment,
                "tags": sorted(ps.column_tags(*key, name.lower())),
                "mask": {"kind": applied.mask.mask, "policy": applied.mask.id if manages else None}
                if applied
                else None,
            }
        )
    filters = None
    if manages:
        applying = {f.id for f in access.row_filters}
        filters = [
            {
                "id": f.id,
                "kind": f.kind,
                "where": f.where,
                "principals": [p.key for p in f.principals],
                "applies_to_caller": f.id in applying,
            }
            for f in ps.row_filters
            if f.on.matches_table(*key)
        ]
    dname = ps.domain_of_schema(table.catalog, table.schema)
    domain = ps.domains.get(dname) if dname else None
    delta = read_log(table.location)
    # Under a row filter a query shows only some rows: the raw row count, the version and the
    # last commit would tell how many rows are hidden and when they change.
    withheld = bool(access.row_filters)
    return {
        "full_name": table.full_name,
        "catalog_name": table.catalog,
        "schema_name": table.schema,
        "name": table.name,
        "comment": table.comment,
        "table_type": svc.discovery.table_type(table),
        "domain": None
        if domain is None
        else {
            "name": domain.name,
            "description": domain.description,
            "owners": [p.key for p in domain.owners],
        },
        "tags": sorted(ps.table_tags(*key)),
        "columns": columns,
        "access": {
            "privileges": sorted(access.privileges),
            "masked_columns": [
                {"column": m.column, "kind": m.mask.mask, "policy": m.mask.id if manages else None}
                for m in access.masks.values()
            ],
            "row_filter_applies": bool(access.row_filters),
            "row_filters": filters,
        },
        "delta": {"withheld": True}
        if withheld
        else {
            "version": delta.version,
            "last_commit": dt(delta.last_commit_ms / 1000) if delta.last_commit_ms else None,
            "row_count": delta.row_count,
            "history_complete": delta.history_complete,
        },
        "products": svc.registry.products_by_table().get(table.full_name, []),
    }


@router.get(
    "/tables/{full_name}/history",
    operation_id="getTableHistory",
    response_model=TableHistory,
    responses=responses(400, 404),
)
async def table_history(
    request: Request,
    caller: CallerDep,
    full_name: TablePath,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict:
    """Delta commits, newest first, read from `_delta_log` (no Spark); none for a caller whose
    row filter applies, since commit times and operations show when hidden rows change."""
    table, access = get_service(request).discovery.visible_table(caller, full_name)
    if access.row_filters:
        return {
            "full_name": table.full_name,
            "version": None,
            "complete": False,
            "withheld": True,
            "commits": [],
        }
    log = read_log(table.location)
    return {
        "full_name": table.full_name,
        "version": log.version,
        "complete": log.history_complete,
        "commits": [
            {
                "version": c.version,
                "timestamp": dt(c.timestamp_ms / 1000) if c.timestamp_ms else None,
                "operation": c.operation,
                "user": c.user,
            }
            for c in log.commits[:limit]
        ],
    }


# search ---------------------------------------------------------------------------------------

_TERM = re.compile(r"[\w\-]+")


@dataclass(frozen=True, slots=True)
class _Doc:
    table: TableInfo
    name: str  # full name, lower-case
    description: str  # table comment, lower-case
    tags: frozenset[str]
    columns: dict[str, tuple[str, frozenset[str]]]  # column -> (comment lower, tags)
    domain: str | None


class _SearchIndex:
    """Static per-table text, built per (catalog snapshot, policy set); per-caller filtering
    happens at query time so hidden columns never match."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._docs: list[_Doc] = []
        self._lock = threading.Lock()

    def docs(self, snap: Snapshot, caller: Caller) -> list[_Doc]:
        key = (snap.generation, id(caller.enforcer))
        if key == self._key:
            return self._docs
        with self._lock:
            ps = caller.enforcer.policy_set
            docs = []
            for t in sorted(snap.tables.values(), key=lambda t: t.full_name):
                k = (t.catalog, t.schema, t.name)
                docs.append(
                    _Doc(
                        t,
                        t.full_name,
                        (t.comment or "").lower(),
                        frozenset(ps.table_tags(*k)),
                        {
                            c.name: (
                                (c.comment or "").lower(),
                                frozenset(ps.column_tags(*k, c.name.lower())),
                            )
                            for c in t.columns
                        },
                        ps.domain_of_schema(t.catalog, t.schema),
                    )
                )
            self._docs, self._key = docs, key
            return docs


_index = _SearchIndex()


def _match(term: str, doc: _Doc, visible: tuple[str, ...]) -> tuple[float, list[str]]:
    """Best weight of one term in one table, and where it matched."""
    best, where = 0.0, []
    short = doc.name.rsplit(".", 1)[1]
    if term == short:
        best, where = 10.0, ["name"]
    elif term in doc.name:
        best, where = 5.0, ["name"]
    for col in visible:
        comment, tags = doc.columns[col]
        low = col.lower()
        if term in low:
            w = 4.0 if term == low else 3.0
            where.append(f"column:{col}")
            best = max(best, w)
        if term in tags or any(term in t for t in tags):
            where += [f"tag:{t}" for t in sorted(tags) if term in t]
            best = max(best, 3.0)
        if term in comment:
            where.append(f"description:{col}")
            best = max(best, 1.0)
    hits = [t for t in sorted(doc.tags) if term in t]
    if hits:
        where += [f"tag:{t}" for t in hits]
        best = max(best, 3.0)
    if term in doc.description:
        where.append("description")
        best = max(best, 1.0)
    if doc.domain and term == doc.domain:
        where.append("domain")
        best = max(best, 2.0)
    return best, where


@router.get(
    "/search", operation_id="search", response_model=SearchResponse, responses=responses(400)
)
async def search(
    request: Request,
    caller: CallerDep,
    q: Annotated[
        str, Query(min_length=1, max_length=200, description="words; every one must match")
    ],
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> dict:
    """Full-text search over the names, columns, tags and descriptions of readable tables."""
    svc = get_service(request)
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(q)))[:10]
    hits = []
    if terms:
        for doc in _index.docs(svc.discovery.snapshot(), caller):
            access = caller.enforcer.table_access(caller.ident, doc.table)
            if "select" not in access.privileges:
                continue
            score, matched = 0.0, []
            for term in terms:
                w, where = _match(term, doc, access.visible_columns)
                if w == 0:
                    break
                score += w
                matched += where
            else:
                hits.append(
                    {
                        "full_name": doc.table.full_name,
                        "domain": doc.domain,
                        "comment": doc.table.comment,
                        "score": score,
                        "matched": list(dict.fromkeys(matched)),
                    }
                )
    hits.sort(key=lambda h: (-h["score"], h["full_name"]))
    return {"query": q, "results": hits[:limit]}
