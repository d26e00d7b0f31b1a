"""Search the audit log (all retained files, oldest first) without Spark.

For interactive questions on one host: who touched a table, what was denied, in a time range.
Large-scale analysis goes through the ``system.access.audit`` table (``audit.spark_table``).
"""

from __future__ import annotations

import csv
import io
import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from audit.format import (
    FIELD_FILTERS,
    AuditRecord,
    format_iso_z,
    parse_complete,
    to_record,
    to_utc,
)
from audit.handler import open_snapshot


def parse_time(text: str) -> datetime:
    """ISO-8601 date or date-time; a time without zone is UTC (the log's zone)."""
    try:
        return to_utc(datetime.fromisoformat(text.strip()))
    except ValueError as exc:
        raise ValueError(f"not an ISO-8601 time: {text!r}") from exc


@dataclass
class QueryResult:
    """Matching records (oldest first) and how many lines were read or could not be parsed."""

    records: list[AuditRecord]
    scanned: int
    skipped: int


def read_records(directory: str | Path, *, phased: bool = False) -> Iterator[AuditRecord | None]:
    """Every line of every retained file, parsed; ``None`` for lines that are not records.

    Parsing does not check the hash chain (that is ``verify``'s job). ``phased`` skips, before
    parsing, every line without an intent/outcome/recovered phase (a scan of the whole log).
    """
    with open_snapshot(directory) as snapshot:
        for item in snapshot.files:
            for lineno, (raw, _) in enumerate(item.lines(), start=1):
                if phased and (b"\tphase=" not in raw or b"\tphase=null\t" in raw):
                    continue
                parsed = parse_complete(raw.decode("ascii", "replace"))
                if parsed is None:
                    yield None
                    continue
                try:
                    yield to_record(parsed[0], item.name, lineno)
                except ValueError:
                    yield None


def table_matches(name: str | None, wanted: str) -> bool:
    """Case-insensitive match on the full name or its trailing parts (``orders`` matches
    ``main.sales.orders``), as Spark resolves names case-insensitively."""
    if not name:
        return False
    name, wanted = name.lower(), wanted.lower().strip("`")
    return name == wanted or name.endswith("." + wanted)


def _outcome_is(record: AuditRecord, outcome: str) -> bool:
    """``succeeded``: ``succeeded=true``; ``abandoned``: ``phase=abandoned`` (the client
    stopped reading, audit/README.md); ``failed``: every other ``succeeded=false`` line, so an
    auditor asking for failures is not handed streams a client chose to drop."""
    if outcome == "succeeded":
        return record.succeeded
    abandoned = record.phase == "abandoned"
    return abandoned if outcome == "abandoned" else not record.succeeded and not abandoned


class Filters:
    """What ``audit query`` keeps; every set filter must match (``None``: any).

    One keyword per field that ``audit.format.FIELDS`` marks as a filter (``user``, ``cmd``,
    ``column``, ``policy_version``, ``caller_context``: each matched as its row says), and
    those that span fields: ``users``, a set of acting users (``--group``, expanded by the
    caller); ``table``, ``src`` or ``dst``; ``denied``; ``outcome``, one of ``succeeded``,
    ``failed``, ``abandoned`` (see `_outcome_is`); ``since`` (inclusive) and ``until``
    (exclusive).
    """

    __slots__ = ("denied", "fields", "outcome", "since", "table", "until", "users")

    def __init__(
        self,
        *,
        users: frozenset[str] | None = None,
        table: str | None = None,
        denied: bool = False,
        outcome: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        **fields: str | None,
    ) -> None:
        unknown = sorted(set(fields) - set(FIELD_FILTERS))
        if unknown:
            raise TypeError(f"unknown audit filter: {', '.join(unknown)}")
        self.users, self.table, self.denied, self.outcome = users, table, denied, outcome
        self.since, self.until = since, until
        #: (field, wanted) for each field filter that is set
        self.fields = tuple(
            (FIELD_FILTERS[name], wanted) for name, wanted in fields.items() if wanted is not None
        )

    def keeps(self, record: AuditRecord) -> bool:
        for field, wanted in self.fields:
            assert field.filter is not None and field.attr is not None
            if not field.filter.matches(getattr(record, field.attr), wanted):
                return False
        if self.users is not None and record.user not in self.users:
            return False
        if self.denied and record.allowed:
            return False
        if self.outcome is not None and not _outcome_is(record, self.outcome):
            return False
        if self.table is not None and not (
            table_matches(record.src, self.table) or table_matches(record.dst, self.table)
        ):
            return False
        if self.since is not None and record.ts < to_utc(self.since):
            return False
        return self.until is None or record.ts < to_utc(self.until)


def query(
    directory: str | Path,
    *,
    user: str | None = None,
    table: str | None = None,
    cmd: str | None = None,
    denied: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    pending: bool = False,
    filters: Filters | None = None,
) -> QueryResult:
    """Filter records; ``since`` is inclusive, ``until`` exclusive; ``limit`` keeps the newest.

    ``user`` matches the acting user exactly; ``table`` matches ``src`` or ``dst``; the other
    filters come in ``filters`` (:class:`Filters`, which these keywords fill when it is not
    given). ``pending`` keeps only ``phase=intent`` records that no later ``outcome`` (or
    ``recovered``) record of the same query and table closes: effects whose result is not on
    record (a crash, or an outcome that could not be written).
    """
    if filters is None:
        filters = Filters(user=user, table=table, cmd=cmd, denied=denied, since=since, until=until)
    if pending:
        return _pending(directory, limit=limit, filters=filters)
    kept: deque[AuditRecord] = deque(maxlen=limit if limit and limit > 0 else None)
    scanned = skipped = 0
    for record in read_records(directory):
        scanned += 1
        if record is None:
            skipped += 1
            continue
        if filters.keeps(record):
            kept.append(record)
    return QueryResult(list(kept), scanned, skipped)


def _effect_key(record: AuditRecord) -> tuple[str | None, str | None, str | None, str]:
    return record.query_id, record.src, record.dst, record.cmd


def open_intents(records: Iterable[AuditRecord | None]) -> list[AuditRecord]:
    """Intent lines that no ``outcome`` (or ``recovered``) line of the same query, table and
    command closes, oldest first."""
    open_: dict[tuple[str | None, str | None, str | None, str], AuditRecord] = {}
    for record in records:
        if record is None:
            continue
        if record.phase == "intent":
            open_[_effect_key(record)] = record
        elif record.phase in ("outcome", "recovered"):
            open_.pop(_effect_key(record), None)
    return list(open_.values())


def _pending(directory: str | Path, *, limit: int | None, filters: Filters) -> QueryResult:
    """Intents without an outcome, filtered like :func:`query`, oldest first."""
    result = query(directory, filters=filters)
    kept = open_intents(result.records)
    if limit and limit > 0:
        kept = kept[-limit:]
    return QueryResult(kept, result.scanned, result.skipped)


def format_json(records: list[AuditRecord], landed: list[str] | None = None) -> str:
    """A JSON array of objects keyed like the log fields (plus ``landing`` when given)."""
    return json.dumps(_rows(records, landed), indent=2, ensure_ascii=False)


def format_jsonl(records: list[AuditRecord], landed: list[str] | None = None) -> str:
    """One JSON object per line (JSON Lines), keyed like :func:`format_json`."""
    return "\n".join(
        json.dumps(row, ensure_ascii=False, separators=(",", ":")) for row in _rows(records, landed)
    )


def format_csv(records: list[AuditRecord], landed: list[str] | None = None) -> str:
    """CSV with a header of the JSON keys; lists joined with ``,``, masks as ``column:mask``."""
    rows = _rows(records, landed)
    out = io.StringIO()
    keys = list(rows[0]) if rows else list(_EMPTY_KEYS)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(keys)
    for row in rows:
        writer.writerow([_csv_cell(row[key]) for key in keys])
    return out.getvalue().rstrip("\n")


def _rows(records: list[AuditRecord], landed: list[str] | None) -> list[dict[str, object]]:
    rows = [r.to_json() for r in records]
    if landed is not None:
        rows = [row | {"landing": text} for row, text in zip(rows, landed, strict=True)]
    return rows


def _csv_cell(value: object) -> object:
    if isinstance(value, list):
        return ",".join(
            f"{item['column']}:{item['mask']}" if isinstance(item, dict) else str(item)
            for item in value
        )
    return "" if value is None else value


_EMPTY_KEYS = ("ts", "allowed", "user", "cmd", "src", "dst", "columns", "masked", "reason")

#: (title, longest value shown before it is cut with an ellipsis; None: never cut)
_COLUMNS: tuple[tuple[str, int | None], ...] = (
    ("TIME (UTC)", None),
    ("ALLOWED", None),
    ("DONE", None),
    ("USER", None),
    ("CMD", None),
    ("SRC", 60),
    ("DST", 60),
    ("PROTO", None),
    ("COLUMNS", 50),
    ("MASKED", 50),
    ("REASON", 90),
)


def _cell(value: object, width: int | None) -> str:
    text = "-" if value is None or value == "" else str(value)
    text = text.replace("\t", " ").replace("\n", " ")
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def format_table(records: list[AuditRecord], landed: list[str] | None = None) -> str:
    """Fixed-width text table: commands, protocols and users whole; long tables, column
    lists and reasons cut with an ellipsis. ``landed``: for ``--pending``, whether each
    intent's write landed (in place of the reason)."""
    rows = [
        (
            format_iso_z(r.ts).replace("T", " ").rstrip("Z"),
            "yes" if r.allowed else "NO",
            "yes" if r.succeeded else "no",
            r.user,
            r.cmd,
            r.src,
            r.dst,
            r.proto,
            ",".join(r.columns),
            ",".join(f"{c}:{m}" for c, m in r.masked),
            r.reason if landed is None else f"{r.query_id}: {landed[i]}",
        )
        for i, r in enumerate(records)
    ]
    widths = [
        max([len(title)] + [len(_cell(row[i], limit)) for row in rows])
        for i, (title, limit) in enumerate(_COLUMNS)
    ]
    titles = [title for title, _ in _COLUMNS[:-1]] + ["REASON" if landed is None else "LANDING"]
    lines = ["  ".join(title.ljust(widths[i]) for i, title in enumerate(titles)).rstrip()]
    for row in rows:
        cells = (
            _cell(value, limit).ljust(widths[i])
            for i, (value, (_, limit)) in enumerate(zip(row, _COLUMNS, strict=True))
        )
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
