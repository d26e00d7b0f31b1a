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

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Query, Request

from api.deps import CallerDep, Service, authenticated_router, get_service
from api.errors import ApiError, responses
from audit.format import AuditRecord, parse_complete, to_record, to_utc
from audit.handler import SnapshotFile, open_snapshot
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
    return {
        "scope": found["scope"],
        "lines": found["matched"],
        **counts(svc, caller, found["records"]),
        "chain": chain_status(svc, found["scope"]),
    }


def counts(svc: Service, caller: Caller, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Reads and denials per table and per user, masked versus clear reads of tagged
    columns, over `rows` (lines as `_Viewer.view` shows them)."""
    per_table: dict[str, Counter[str]] = {}
    per_user: dict[str, Counter[str]] = {}
    tagged: dict[str, Counter[str]] = {}
    for row in rows:
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
        "by_table": [
            {"table": k, **_counts(v, "read", "denied")} for k, v in sorted(per_table.items())
        ],
        "by_user": [
            {"user": k, **_counts(v, "read", "denied")} for k, v in sorted(per_user.items())
        ],
        "tagged_columns": [
            {"column": k, **_counts(v, "masked", "clear")} for k, v in sorted(tagged.items())
        ],
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


# one page of the timeline ------------------------------------------------------------------

PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
SCAN_LIMIT = 50_000  # lines read for one page at most; a sparse filter goes on in the next
_BLOCK = 1 << 16
_CURSOR = re.compile(r"([0-9a-f]{32})\.([0-9]{1,15})")


def _backwards(item: SnapshotFile, end: int) -> Iterator[tuple[int, bytes]]:
    """`(offset, line)` of the complete lines of `item` that end before byte `end`, newest
    first, read in blocks from the end (a line still being written is left out)."""
    pos, data, trimmed = end, b"", False
    while True:
        while trimmed:
            j = data.rfind(b"\n", 0, len(data) - 1)
            if j < 0:
                break
            yield pos + j + 1, data[j + 1 : -1]
            data = data[: j + 1]
        if pos == 0:
            if trimmed and data:
                yield 0, data[:-1]
            return
        step = min(_BLOCK, pos)
        pos -= step
        item.handle.seek(pos)
        data = item.handle.read(step) + data
        if not trimmed:
            k = data.rfind(b"\n")
            if k >= 0:
                data, trimmed = data[: k + 1], True


@dataclass
class _Segment:
    """The hash chain check of the contiguous lines one page read: each line's own hash,
    and each writer's consecutive lines among them linked (prevHash = the hash before)."""

    lines: int = 0
    breaks: list[str] = field(default_factory=list)
    newer: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # writer -> seq, prev

    def check(self, where: str, raw: bytes) -> dict[str, str] | None:
        """The line's fields when it is a well-formed line (checked), else None (a break)."""
        self.lines += 1
        parsed = parse_complete(raw.decode("ascii", "replace"))
        if parsed is None:
            self.breaks.append(f"{where}: not a well-formed audit line")
            return None
        values, link = parsed
        if not link.hash_ok:
            self.breaks.append(f"{where}: content does not match its hash")
        after = self.newer.get(link.writer)
        if after is not None:
            seq, prev = after
            if link.seq != seq - 1:
                self.breaks.append(
                    f"{where}: writer {link.writer} seq {link.seq} is followed by seq {seq}"
                )
            elif link.hash != prev:
                self.breaks.append(f"{where}: the next line of its writer does not chain to it")
        self.newer[link.writer] = (link.seq, link.prev_hash)
        return values


def page(
    svc: Service, caller: Caller, q: AuditQuery, before: str | None, size: int = PAGE_SIZE
) -> dict[str, Any]:
    """One page of the timeline, newest first: the `size` newest lines the caller may see
    that match `q`, older than the `before` cursor (a line's place: its file's id and
    byte offset, which rotation does not change). Reads the log backwards from there and
    stops when the page is full or after SCAN_LIMIT lines, never the whole log; checks the
    hash chain of exactly the lines it read (`_Segment`). `next`: the cursor of the next
    page (None at the oldest line)."""
    size = max(1, min(size, MAX_PAGE_SIZE))
    scope = scope_of(svc, caller)
    filters = q.filters()
    viewer = _Viewer(svc, caller, scope)
    segment = _Segment()
    rows: list[dict[str, Any]] = []
    after: str | None = None  # the cursor after the page's last line read
    full = False
    with open_snapshot(svc.lg.config.audit) as snapshot:
        files = [item for item in snapshot.files if item.size > 0 and item.file_id]
        slot, end = len(files) - 1, None
        if before:
            m = _CURSOR.fullmatch(before)
            slots = [i for i, f in enumerate(files) if m and f.file_id == m.group(1)]
            if not m or not slots or int(m.group(2)) > files[slots[0]].size:
                # a cursor of the right form naming no line of this log: that page is not
                # found (404), as the schema cannot say which cursors exist (malformed: 400)
                raise ApiError(404, "that page is no longer in the audit log; start again")
            slot, end = slots[0], int(m.group(2))
        while slot >= 0 and not full:
            item = files[slot]
            start = item.size if end is None else end
            for offset, raw in _backwards(item, start):
                after = f"{item.file_id}.{offset}"
                values = segment.check(f"{item.name}@{offset}", raw)
                if values is not None:
                    try:
                        record = to_record(values, item.name, 0)
                    except ValueError:
                        record = None
                    if record is not None and filters.keeps(record):
                        row = viewer.view(record)
                        if row is not None:
                            rows.append(row)
                if len(rows) >= size or segment.lines >= SCAN_LIMIT:
                    full = True
                    break
            slot, end = slot - 1, None
    more = full and not (slot < 0 and after is not None and after.endswith(".0"))
    chain: dict[str, Any] = {"ok": not segment.breaks, "lines": segment.lines}
    if scope == "all":
        chain["breaks"] = segment.breaks[:20]
    return {
        "scope": scope,
        "records": rows,
        "scanned": segment.lines,
        "next": after if more else None,
        "size": size,
        "chain": chain,
        **counts(svc, caller, rows),
    }


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


@router.get("/audit/page", operation_id="pageAudit", responses=responses(400, 404))
async def page_audit(
    request: Request,
    caller: CallerDep,
    q: FiltersDep,
    before: Annotated[str | None, Query(max_length=64, pattern=f"^{_CURSOR.pattern}$")] = None,
    size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = PAGE_SIZE,
) -> dict:
    """One page of the lines you may see, newest first, older than the `before` cursor
    (`next` of the page before): the console's audit page. Reads only what the page needs
    and checks the hash chain of the lines it read (`chain`); the charts' counts are over
    the page's lines."""
    return page(get_service(request), caller, q, before, size)
