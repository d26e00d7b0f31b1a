"""The questions an auditor asks most, answered from the log in one call each.

Each answer is ``(column names, rows)``, oldest first where time matters; the same questions
as SQL over ``system.access.audit`` are in audit/README.md ("Named questions") and the tests
hold both to the same answers. A statement touching a table writes one line per table (and
writes intent and outcome lines), so statements are counted by distinct ``queryId``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from audit.format import AuditRecord, format_iso_z
from audit.query import Filters, query

Answer = tuple[list[str], list[list[object]]]
#: Commands that read nothing and change nothing (no intent/outcome pair).
READ_ONLY = frozenset({"select", "describe", "show", "use"})


def _ts(value: datetime) -> str:
    return format_iso_z(value)


def _records(
    directory: Path, filters: Filters, records: Sequence[AuditRecord] | None = None
) -> list[AuditRecord]:
    """What ``audit query`` with ``filters`` returns; from ``records`` (lines already read
    by :func:`query`, e.g. once for a whole report) when given, else from the files."""
    if records is None:
        return query(directory, filters=filters).records
    return [record for record in records if filters.keeps(record)]


def who_read_column(
    directory: Path,
    table: str,
    column: str,
    since: datetime | None = None,
    until: datetime | None = None,
    records: Sequence[AuditRecord] | None = None,
) -> Answer:
    """Who read column ``column`` of ``table``, how (clear or which mask), how many
    statements, first and last time: allowed, completed ``select`` lines only."""
    wanted = column.lower()
    filters = Filters(table=table, column=column, cmd="select", since=since, until=until)
    seen: dict[tuple[str, str, str], list] = {}
    for r in _records(directory, filters, records):
        if not (r.allowed and r.succeeded) or r.src is None:
            continue
        mask = next((m or "" for c, m in r.masked if c.lower() == wanted), None) or "clear"
        key = (r.user, r.src, mask)
        entry = seen.setdefault(key, [set(), r.ts, r.ts])
        entry[0].add(r.query_id)
        entry[2] = r.ts
    rows: list[list[object]] = [
        [user, src, column, mask, len(ids), _ts(first), _ts(last)]
        for (user, src, mask), (ids, first, last) in sorted(seen.items())
    ]
    return ["user", "table", "column", "mask", "statements", "first", "last"], rows


def masked_for(
    directory: Path, user: str, since: datetime | None = None, until: datetime | None = None
) -> Answer:
    """Which columns ``user`` saw masked, with which mask, in how many statements."""
    seen: dict[tuple[str, str, str], list] = {}
    for r in _records(directory, Filters(user=user, since=since, until=until)):
        if not r.allowed or r.src is None:
            continue
        for column, mask in r.masked:
            entry = seen.setdefault((r.src, column, mask or ""), [set(), r.ts])
            entry[0].add(r.query_id)
            entry[1] = r.ts
    rows: list[list[object]] = [
        [user, src, column, mask, len(ids), _ts(last)]
        for (src, column, mask), (ids, last) in sorted(seen.items())
    ]
    return ["user", "table", "column", "mask", "statements", "last"], rows


def denials(
    directory: Path,
    table: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    records: Sequence[AuditRecord] | None = None,
) -> Answer:
    """Denied and refused accesses by table and reason: how many, by whom, last time."""
    seen: dict[tuple[str, str, str], list] = {}
    wanted = Filters(table=table, denied=True, since=since, until=until)
    for r in _records(directory, wanted, records):
        entry = seen.setdefault((r.src or "", r.cmd, r.reason or ""), [0, set(), r.ts])
        entry[0] += 1
        entry[1].add(r.user)
        entry[2] = r.ts
    rows: list[list[object]] = [
        [src or None, cmd, reason or None, count, ",".join(sorted(users)), _ts(last)]
        for (src, cmd, reason), (count, users, last) in sorted(
            seen.items(), key=lambda item: (item[0][0], -item[1][0], item[0][1], item[0][2])
        )
    ]
    return ["table", "cmd", "reason", "denials", "users", "last"], rows


def decided_by(directory: Path, event_or_query: str) -> Answer:
    """Which policy version (and, for policies from git, which commit) decided a line, given
    its ``eventId`` or its statement's ``queryId``, and the ids of the deciding policies."""
    rows: list[list[object]] = []
    for r in query(directory).records:
        if event_or_query not in (r.event_id, r.query_id):
            continue
        version = r.policy_version
        commit = version[4:] if version and version.startswith("git:") else None
        rows.append(
            [r.event_id, r.query_id, _ts(r.ts), r.user, r.cmd, r.src, r.phase, version, commit,
             ",".join(r.policies) or None]
        )  # fmt: skip
    columns = ["eventId", "queryId", "ts", "user", "cmd", "table", "phase", "policyVersion",
               "gitCommit", "policies"]  # fmt: skip
    return columns, rows


@dataclass
class _Write:
    first: AuditRecord
    intent: AuditRecord | None = None
    outcome: AuditRecord | None = None


def writes(
    directory: Path,
    table: str,
    since: datetime | None = None,
    until: datetime | None = None,
    landing: Callable[[AuditRecord], str] | None = None,
) -> Answer:
    """Every statement that changed (or tried to change) ``table``, by time then query id:
    its intent and its
    outcome (``succeeded``, ``failed``, ``recovered: ...``, ``denied`` or ``pending``, with
    whether a pending write landed when ``landing`` can tell)."""
    statements: dict[tuple[str | None, str, str | None, str | None], _Write] = {}
    for r in _records(directory, Filters(table=table, since=since, until=until)):
        if r.cmd in READ_ONLY or r.cmd == "policyRead":
            continue
        item = statements.setdefault((r.query_id, r.cmd, r.src, r.dst), _Write(r))
        if r.phase == "intent":
            item.intent = r
        else:
            item.outcome = r
    rows: list[list[object]] = []
    ordered = sorted(statements.items(), key=lambda kv: (kv[1].first.ts, kv[0][0] or ""))
    for (query_id, cmd, src, dst), item in ordered:
        done = item.outcome
        if done is None:
            state = "pending" + (f" ({landing(item.first)})" if landing else "")
        elif not done.allowed:
            state = "denied"
        elif done.phase == "recovered":
            state = f"recovered: {'succeeded' if done.succeeded else 'failed'}"
        else:
            state = "succeeded" if done.succeeded else "failed"
        rows.append(
            [query_id, item.first.user, cmd, src, dst,
             _ts(item.intent.ts) if item.intent else None, state,
             _ts(done.ts) if done else None, done.reason if done else None]
        )  # fmt: skip
    columns = ["queryId", "user", "cmd", "src", "dst", "intent", "outcome", "outcomeAt",
               "reason"]  # fmt: skip
    return columns, rows
