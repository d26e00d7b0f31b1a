"""The numbers of ``lakegate audit report``: one dictionary, computed only through
:func:`audit.query.query`, the named questions (:mod:`audit.questions`) and
:func:`audit.verify.verify`, so the report can never disagree with ``audit query`` or
``audit question`` about the same log (the HTML is drawn from it by :mod:`audit.report_html`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from audit import questions
from audit.format import AuditRecord, format_iso_z
from audit.proofs import TreeReport
from audit.query import Filters, query, table_matches
from audit.verify import verify

#: ``(table, column) -> tags`` of a column; the command line takes it from the policies.
TagLookup = Callable[[str, str], frozenset[str]]
#: Lines the engine writes for its own reads, not a user's access (audit/README.md).
ENGINE_LINES = frozenset({"policyRead", "tagPropagate"})
TOP_READERS = 5
_HOURLY_UP_TO = timedelta(days=3)


@dataclass(frozen=True)
class ReportScope:
    """What the report covers: ``since`` inclusive, ``until`` exclusive, ``table`` as in
    ``audit query --table`` (full name or trailing parts)."""

    since: datetime | None = None
    until: datetime | None = None
    table: str | None = None

    def filters(self) -> Filters:
        return Filters(table=self.table, since=self.since, until=self.until)


def statement_key(record: AuditRecord) -> str:
    """A statement is its ``queryId`` (one line per table, intent and outcome lines); a line
    without one is a statement of its own."""
    return record.query_id or f"event:{record.event_id}"


def bucket_of(ts: datetime, hourly: bool) -> str:
    """The time bucket a line is counted in: ``YYYY-MM-DDTHH:00Z`` or ``YYYY-MM-DD``."""
    text = format_iso_z(ts)
    return f"{text[:13]}:00Z" if hourly else text[:10]


def touched(record: AuditRecord, table: str | None) -> list[str]:
    """The tables a line counts for (``src`` and ``dst``; with a table filter, the ones it
    names)."""
    names = dict.fromkeys(n for n in (record.src, record.dst) if n)
    return [n for n in names if table is None or table_matches(n, table)]


def _access(records: list[AuditRecord], scope: ReportScope) -> dict[str, Any]:
    lines = [r for r in records if r.cmd not in ENGINE_LINES and touched(r, scope.table)]
    first = scope.since or (lines[0].ts if lines else None)
    last = scope.until or (lines[-1].ts if lines else None)
    hourly = first is None or last is None or last - first <= _HOURLY_UP_TO
    by_table: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    by_user: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    denied: dict[str, set[str]] = defaultdict(set)
    users_of: dict[str, set[str]] = defaultdict(set)
    for r in lines:
        bucket, key = bucket_of(r.ts, hourly), statement_key(r)
        by_user[r.user][bucket].add(key)
        for name in touched(r, scope.table):
            by_table[name][bucket].add(key)
            users_of[name].add(r.user)
            if not r.allowed:
                denied[name].add(key)
    buckets = sorted({b for series in (*by_table.values(), *by_user.values()) for b in series})

    def counts(series: dict[str, dict[str, set[str]]]) -> dict[str, dict[str, int]]:
        return {name: {b: len(ids) for b, ids in sorted(s.items())} for name, s in series.items()}

    def totals(series: dict[str, dict[str, set[str]]]) -> dict[str, int]:
        return {name: len(set().union(*s.values())) for name, s in sorted(series.items())}

    table_totals = totals(by_table)
    return {
        "bucket": "hour" if hourly else "day",
        "buckets": buckets,
        "byTable": dict(sorted(counts(by_table).items())),
        "byUser": dict(sorted(counts(by_user).items())),
        "tables": [
            {
                "table": name,
                "statements": count,
                "denied": len(denied[name]),
                "users": len(users_of[name]),
            }
            for name, count in table_totals.items()
        ],
        "users": [{"user": name, "statements": n} for name, n in totals(by_user).items()],
    }


def _candidates(records: list[AuditRecord], scope: ReportScope) -> list[tuple[str, str]]:
    """``(table, column)`` of every column an allowed select read (or saw masked)."""
    seen: dict[tuple[str, str], None] = {}
    for r in records:
        if r.cmd != "select" or not r.allowed or r.src is None:
            continue
        if scope.table is not None and not table_matches(r.src, scope.table):
            continue
        for column in (*r.columns, *(c for c, _ in r.masked)):
            seen.setdefault((r.src, column.lower()), None)
    return sorted(seen)


def _tagged(
    records: list[AuditRecord],
    in_range: list[AuditRecord],
    directory: Path,
    scope: ReportScope,
    tags: TagLookup | None,
) -> list[dict[str, Any]]:
    masked_ever = {(r.src, c.lower()) for r in records if r.src for c, _ in r.masked}
    out: list[dict[str, Any]] = []
    for table, column in _candidates(records, scope):
        found = tags(table, column) if tags else frozenset()
        if tags is None and (table, column) in masked_ever:
            found = frozenset({"(masked)"})
        if not found:
            continue
        _, rows = questions.who_read_column(
            directory, table, column, scope.since, scope.until, records=in_range
        )
        rows = [row for row in rows if row[1] == table]
        by_mask: dict[str, int] = defaultdict(int)
        readers: dict[str, int] = defaultdict(int)
        for user, _src, _column, mask, statements, _first, _last in rows:
            by_mask[str(mask)] += int(statements)  # type: ignore[call-overload]
            readers[str(user)] += int(statements)  # type: ignore[call-overload]
        top = sorted(readers.items(), key=lambda item: (-item[1], item[0]))[:TOP_READERS]
        out.append(
            {
                "table": table,
                "column": column,
                "tags": sorted(found),
                "clear": by_mask.pop("clear", 0),
                "masked": sum(by_mask.values()),
                "byMask": dict(sorted(by_mask.items())),
                "topReaders": [{"user": u, "statements": n} for u, n in top],
                "rows": rows,
            }
        )
    return out


def _integrity(directory: Path, tree: TreeReport | None) -> dict[str, Any]:
    chain = verify(directory)
    return {
        "chain": {
            "ok": chain.ok,
            "files": len(chain.files),
            "lines": chain.lines,
            "writers": len(chain.writers),
            "breaks": [str(finding) for finding in chain.breaks],
            "notices": len(chain.truncated) + len(chain.anchors),
        },
        "tree": None
        if tree is None
        else {
            "ok": tree.ok,
            "size": tree.size,
            "checked": tree.checked,
            "rotatedAway": tree.rotated_away,
            "unsignedTail": tree.unsigned_tail,
            "witness": tree.witness,
            "undelivered": tree.undelivered,
            "breaks": [str(finding) for finding in tree.breaks],
        },
    }


def report_data(
    directory: Path,
    scope: ReportScope,
    *,
    tags: TagLookup | None = None,
    tree: TreeReport | None = None,
    generated: datetime | None = None,
) -> dict[str, Any]:
    """Everything the report shows, as JSON-ready data (embedded in the page as is).

    ``tags`` names each column's tags (None: every column masked at least once counts as
    tagged, since the log itself shows no tags); ``tree`` is the Merkle tree check when
    checkpoints are configured."""
    # one pass over the files; every count below filters these lines as `audit query` and
    # the questions filter the files (Filters.keeps), so the answers are theirs
    result = query(directory, filters=Filters(since=scope.since, until=scope.until))
    in_range = result.records
    records = [r for r in in_range if scope.filters().keeps(r)]
    denial_columns, denial_rows = questions.denials(
        directory, scope.table, scope.since, scope.until, records=in_range
    )
    return {
        "directory": str(directory),
        "generated": format_iso_z(generated) if generated else None,
        "scope": {
            "since": format_iso_z(scope.since) if scope.since else None,
            "until": format_iso_z(scope.until) if scope.until else None,
            "table": scope.table,
        },
        "lines": len(records),
        "skipped": result.skipped,
        "tagSource": "policies" if tags else "masked in the log",
        "access": _access(records, scope),
        "denials": {"columns": denial_columns, "rows": denial_rows},
        "tagged": _tagged(records, in_range, directory, scope, tags),
        "integrity": _integrity(directory, tree),
    }
