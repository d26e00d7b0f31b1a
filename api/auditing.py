"""The audit log for people: a filtered timeline, reads and denials per table and per user,
masked versus clear reads of tagged columns, and whether the hash chains verify.

Who sees which lines: auditors and admins (`select` on `system.access.audit`) every line;
a domain's owners the lines on tables they manage, and their own; anyone else only their
own. Outside the full view a line is shown only if every table it names is one the viewer
may read (manage, for someone else's line), its column lists keep only the columns the viewer
may read, and its reason, policy ids and row filters only when the viewer manages the table
(a refusal's reason or a deny id names the hidden column). Used by the JSON routes here and
the console.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Query, Request

from api.deps import CallerDep, Service, authenticated_router, get_service
from api.errors import ApiError, responses
from audit.format import AuditRecord, to_utc
from audit.query import Filters, parse_time, read_records
from audit.verify import verify

if TYPE_CHECKING:
    from api.caller import Caller
    from catalog.model import TableInfo

router = authenticated_router(tags=["Lakegate: audit"])

AUDIT_TABLE = ("system", "access", "audit")
READS = frozenset({"select", "read", "query"})


def scope_of(svc: Service, caller: Caller) -> str:
    """`all` (may read the audit table), `domains` (owns a domain) or `own`."""
    if caller.enforcer.has_privilege(caller.ident, "select", *AUDIT_TABLE)[0]:
        return "all"
    return "domains" if svc.registry.owned_domains(caller) else "own"


@dataclass
class AuditQuery:
    """The filters a person sets on the timeline (all optional)."""

    user: str | None = None
    table: str | None = None
    cmd: str | None = None
    denied: bool = False
    policy_version: str | None = None
    since: datetime | str | None = None  # a datetime from the JSON route, text from a form
    until: datetime | str | None = None
    limit: int = 200

    def filters(self) -> Filters:
        try:
            since, until = _time(self.since), _time(self.until)
        except ValueError as e:
            raise ApiError(400, str(e)[:200]) from None
        return Filters(
            user=self.user.lower() if self.user else None,
            table=self.table or None,
            cmd=self.cmd or None,
            denied=self.denied,
            policy_version=self.policy_version or None,
            since=since,
            until=until,
        )


def _time(value: datetime | str | None) -> datetime | None:
    if isinstance(value, datetime):
        try:
            return to_utc(value)
        except OverflowError:  # year 1 west of UTC, year 9999 east of it: the very ends
            return (datetime.min if value.year < 2 else datetime.max).replace(tzinfo=UTC)
    return parse_time(value) if value else None


class _Viewer:
    """Decides, per line, what one caller may see of it."""

    def __init__(self, svc: Service, caller: Caller, scope: str) -> None:
        self.caller = caller
        self.scope = scope
        self.tables = svc.discovery.snapshot().tables
        self._access: dict[str, Any] = {}

    def _acc(self, table: TableInfo) -> Any:
        hit = self._access.get(table.full_name)
        if hit is None:
            hit = self.caller.enforcer.table_access(self.caller.ident, table)
            self._access[table.full_name] = hit
        return hit

    def view(self, r: AuditRecord) -> dict[str, Any] | None:
        row = r.to_json()
        row.pop("prevHash", None)
        if self.scope == "all":
            return row
        own = r.user == self.caller.user
        named = [n for n in (r.src, r.dst) if n]
        accs = []
        for name in named:
            table = self.tables.get(name.lower())
            if table is None:
                return None  # a path, a product, a table gone or never there: not shown
            acc = self._acc(table)
            if "manage" not in acc.privileges and not (own and acc.can_select):
                return None
            accs.append(acc)
        if not own and not accs:
            return None
        managed = bool(accs) and all("manage" in a.privileges for a in accs)
        if accs and not managed:
            visible = {c.lower() for a in accs for c in a.visible_columns}
            row["columns"] = [c for c in r.columns if c.lower() in visible]
            row["masked"] = [m for m in row["masked"] if str(m["column"]).lower() in visible]
        if not managed:
            row["reason"] = None if r.allowed else "refused"
            row["policies"], row["rowFilters"] = [], []
        return row


def _tagged(svc: Service, caller: Caller, table: str | None, column: str) -> bool:
    t = svc.discovery.snapshot().tables.get((table or "").lower())
    if t is None:
        return False
    return bool(caller.enforcer.policy_set.column_tags(t.catalog, t.schema, t.name, column.lower()))


def records(svc: Service, caller: Caller, q: AuditQuery) -> dict[str, Any]:
    """The newest `q.limit` lines the caller may see that match `q`, newest first."""
    scope = scope_of(svc, caller)
    filters = q.filters()
    viewer = _Viewer(svc, caller, scope)
    kept: list[dict[str, Any]] = []
    scanned = 0
    for r in read_records(svc.lg.config.audit):
        scanned += 1
        if r is None or not filters.keeps(r):
            continue
        row = viewer.view(r)
        if row is not None:
            kept.append(row)
    kept.reverse()
    return {"scope": scope, "records": kept[: q.limit], "matched": len(kept), "scanned": scanned}


def summary(svc: Service, caller: Caller, q: AuditQuery) -> dict[str, Any]:
    """Reads and denials per table and per user, masked versus clear reads of tagged
    columns (over every line the caller may see that matches `q`), and the chain status."""
    found = records(svc, caller, AuditQuery(**{**q.__dict__, "limit": 10**9}))
    per_table: dict[str, Counter[str]] = {}
    per_user: dict[str, Counter[str]] = {}
    tagged: dict[str, Counter[str]] = {}
    for row in found["records"]:
        if row.get("phase") == "intent":
            continue  # its outcome line counts the access once
        table = row.get("src")
        kind = "denied" if not row["allowed"] else "read" if row["cmd"].lower() in READS else None
        if kind is None:
            continue
        if table:
            per_table.setdefault(table, Counter())[kind] += 1
        per_user.setdefault(row["user"], Counter())[kind] += 1
        if kind == "read":
            masked = {str(m["column"]).lower() for m in row["masked"]}
            for col in row["columns"]:
                if _tagged(svc, caller, table, col):
                    how = "masked" if col.lower() in masked else "clear"
                    tagged.setdefault(f"{table}.{col}", Counter())[how] += 1
    return {
        "scope": found["scope"],
        "lines": found["matched"],
        "by_table": [
            {"table": k, **_counts(v, "read", "denied")} for k, v in sorted(per_table.items())
        ],
        "by_user": [
            {"user": k, **_counts(v, "read", "denied")} for k, v in sorted(per_user.items())
        ],
        "tagged_columns": [
            {"column": k, **_counts(v, "masked", "clear")} for k, v in sorted(tagged.items())
        ],
        "chain": chain_status(svc, found["scope"]),
    }


def _counts(c: Counter[str], *keys: str) -> dict[str, int]:
    return {k: c.get(k, 0) for k in keys}


def chain_status(svc: Service, scope: str) -> dict[str, Any]:
    """Whether every hash chain verifies; where it breaks only for the full view (a finding
    names files and lines of others' records)."""
    report = verify(svc.lg.config.audit)
    out: dict[str, Any] = {"ok": report.ok, "lines": report.lines, "files": len(report.files)}
    if scope == "all":
        out["breaks"] = [str(b) for b in report.breaks]
    return out


# routes ---------------------------------------------------------------------------------------

Text = Annotated[str | None, Query(max_length=200)]
Time = Annotated[
    datetime | None, Query(description="ISO 8601; without a zone, UTC (the log's zone)")
]


def audit_filters(
    user: Text = None,
    table: Text = None,
    cmd: Text = None,
    denied: bool = False,
    policy_version: Text = None,
    since: Time = None,
    until: Time = None,
) -> AuditQuery:
    """The timeline's filters, shared by the records and the summary routes."""
    return AuditQuery(user, table, cmd, denied, policy_version, since, until)


FiltersDep = Annotated[AuditQuery, Depends(audit_filters)]


@router.get("/audit/records", operation_id="queryAudit", responses=responses(400))
async def query_audit(
    request: Request,
    caller: CallerDep,
    q: FiltersDep,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> dict:
    """Audit lines you may see (`lakegate audit query`), newest first: every line for
    auditors, your domains' tables for their owners, your own otherwise."""
    return records(get_service(request), caller, replace(q, limit=limit))


@router.get("/audit/summary", operation_id="getAuditSummary", responses=responses(400))
async def audit_summary(request: Request, caller: CallerDep, q: FiltersDep) -> dict:
    """Reads and denials per table and user, masked vs clear reads of tagged columns, and
    whether the audit log's hash chains verify, over the lines you may see."""
    return summary(get_service(request), caller, q)
