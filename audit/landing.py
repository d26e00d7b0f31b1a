"""Did an intent without an outcome take effect? Ask the table's Delta log.

The governed session tags every Delta commit a statement makes with the statement's query id
(``userMetadata`` of the commit, ``lakegate:queryId=<id>``; ``COMMIT_TAG_CONF`` for SQL, the
``userMetadata`` writer option for DataFrame writes). An intent whose outcome is missing (the
process died between the two) is then resolved from the table's ``_delta_log``: a commit
with its tag means the write landed, none means it did not. A restarted server records the
answer as the missing outcome with ``phase=recovered``.

No Spark: commit files are JSON lines (Delta protocol), read newest first and only back to
shortly before the intent.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

from audit.format import AuditRecord
from audit.log import EVENT_FIELDS, AuditEvent, AuditLog, event_default
from audit.query import open_intents, read_records

COMMIT_TAG_CONF = "spark.databricks.delta.commitInfo.userMetadata"
TAG_PREFIX = "lakegate:queryId="
#: Commands whose effect is a Delta commit on ``dst`` (or ``src`` when ``dst`` is null).
COMMITTING_CMDS = frozenset({"insert", "update", "delete", "merge", "create", "alter"})
#: How far before the intent a commit may be timestamped (clock skew between hosts).
_SKEW = timedelta(minutes=5)
WRITERS_DIR = ".writers"

#: ``locate(table name) -> table location`` (a path or ``file:`` URI), None when unknown.
Locate = Callable[[str], str | None]


def commit_tag(query_id: str) -> str:
    return f"{TAG_PREFIX}{query_id}"


@dataclass(frozen=True)
class Landing:
    """``landed`` (a commit of the query is in the table's log, or the catalog holds what a
    catalog-only statement made), ``not landed`` (none is, back to before the intent),
    ``set aside`` (its commit is in a crash leftover moved out of a new table's way,
    ``<location>.orphan-*``, never registered), ``dropped`` (its table was dropped since,
    its Delta log with it: whether it landed cannot be told, and nothing of it is left in a
    registered table; governance/session/recovery.py) or ``unknown`` (nothing to ask);
    ``detail`` says what the evidence is when it is not the table's own log."""

    state: str
    table: str | None = None
    version: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        if self.detail and self.state != "unknown":
            return f"{self.state}: {self.detail}"
        if self.state == "landed":
            return f"landed: {self.table} version {self.version}"
        if self.state == "not landed":
            return f"not landed: no commit of it in {self.table}"
        return f"unknown: {self.detail}"


#: ``judge(intent) -> Landing``: a landing with more to ask than the Delta log (the catalog).
Judge = Callable[[AuditRecord], Landing]


def local_path(location: str) -> Path | None:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else location)
    return None


def find_commit(table_dir: Path, query_id: str, not_before_ms: int | None) -> int | None:
    """The version of the commit tagged with ``query_id``, newest first, stopping at commits
    older than ``not_before_ms`` (epoch ms); None when there is none."""
    tag = commit_tag(query_id)
    versions = sorted(
        (int(p.stem), p) for p in (table_dir / "_delta_log").glob("*.json") if p.stem.isdigit()
    )
    for version, path in reversed(versions):
        with contextlib.suppress(OSError):
            for line in path.read_text("utf-8").splitlines():
                if '"commitInfo"' not in line:
                    continue
                info = json.loads(line).get("commitInfo") or {}
                if info.get("userMetadata") == tag:
                    return version
                stamp = info.get("timestamp")
                if not_before_ms is not None and isinstance(stamp, int) and stamp < not_before_ms:
                    return None
    return None


def commit_ms(table_dir: Path, version: int) -> int | None:
    """The ``commitInfo`` timestamp (epoch ms) of one commit, None when it has none."""
    with contextlib.suppress(OSError, ValueError):
        for line in (table_dir / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
            if '"commitInfo"' in line:
                stamp = (json.loads(line).get("commitInfo") or {}).get("timestamp")
                return stamp if isinstance(stamp, int) else None
    return None


def earliest_commit_ms(record: AuditRecord) -> int:
    """How far back (epoch ms) a commit of the intent's statement can be."""
    return int((record.ts - _SKEW).timestamp() * 1000)


def landing(record: AuditRecord, locate: Locate | None) -> Landing:
    """Whether the effect an intent line announces reached its table's Delta log."""
    if record.cmd not in COMMITTING_CMDS:
        return Landing("unknown", detail=f"cmd={record.cmd} makes no Delta commit to look for")
    table = record.dst or record.src
    if table is None or record.query_id is None:
        return Landing("unknown", detail="the line names no table or query")
    if locate is None:
        return Landing("unknown", table, detail="no catalog to find the table in")
    location = locate(table)
    where = local_path(location) if location else None
    if where is None or not (where / "_delta_log").is_dir():
        return Landing("unknown", table, detail=f"{table} has no local Delta log")
    version = find_commit(where, record.query_id, earliest_commit_ms(record))
    if version is None:
        return Landing("not landed", table)
    return Landing("landed", table, version)


def _writer_alive(directory: Path, writer: str) -> bool | None:
    """True/False when we can tell whether the writer of a line still runs, None when not
    (another host). Explicit writer ids hold a lock in ``.writers/``; default ids are
    ``host:pid:hex``."""
    digest = hashlib.sha256(writer.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    lock = directory / WRITERS_DIR / f"{digest}.lock"
    if lock.exists():
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops the probe lock
        return False
    parts = writer.split(":")
    if len(parts) == 3 and parts[1].isdigit():
        if parts[0] != socket.gethostname():
            return None
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return None


@dataclass(frozen=True)
class Recovered:
    intent: AuditRecord
    landing: Landing


def dead_intents(directory: Path) -> list[AuditRecord]:
    """Pending intents whose writer is known to be gone (its lock is free, or its process
    no longer exists on this host); intents of live or unknown writers may still finish."""
    pending = open_intents(read_records(directory, phased=True))
    alive: dict[str, bool | None] = {}
    out = []
    for record in pending:
        writer = record.writer
        if writer not in alive:
            alive[writer] = _writer_alive(directory, writer)
        if alive[writer] is False:
            out.append(record)
    return out


def resolve(
    records: list[AuditRecord], locate: Locate | None, judge: Judge | None = None
) -> list[Recovered]:
    ask = judge or (lambda record: landing(record, locate))
    return [Recovered(record, ask(record)) for record in records]


_UGI = re.compile(
    r"(?P<user>.*) \(auth:(?P<auth>[^()]*)\)(?: via (?P<via>.*) \(auth:(?P<va>[^()]*)\))?"
)


#: What a recovered line does not copy from its intent: the line's own id, time and duration.
_NOT_COPIED = frozenset({"event_id", "ts", "duration_ms"})


def recovered_event(intent: AuditRecord, answer: Landing) -> AuditEvent:
    """The outcome a dead writer could not write, as the log's ``phase=recovered`` line:
    the intent's fields (every field an event carries, ``audit.format.FIELDS``; an empty one
    the event's default), ``succeeded`` whether its commit landed, ``reason`` the evidence."""
    ugi = _UGI.fullmatch(intent.ugi)
    copied = {
        f.attr: event_default(f) if (value := getattr(intent, f.attr)) is None else value
        for f in EVENT_FIELDS
        if f.attr and f.attr not in _NOT_COPIED
    }
    return AuditEvent(
        **copied
        | {
            "allowed": True,
            "succeeded": answer.state == "landed",
            "reason": f"recovered after its writer {intent.writer} died: {answer}",
            "phase": "recovered",
        },
        user=intent.user,
        auth=ugi.group("auth") if ugi else "SIMPLE",
        via=ugi.group("via") if ugi else None,
        via_auth=(ugi.group("va") if ugi else None) or "TOKEN",
    )


def recover(log: AuditLog, locate: Locate | None, judge: Judge | None = None) -> list[Recovered]:
    """Write the missing outcomes of dead writers' intents whose landing is known (landed,
    not landed, set aside, dropped); intents that stay ``unknown`` stay pending. Returns every dead
    intent examined. ``judge`` (governance/session/recovery.py) also asks the catalog."""
    examined = resolve(dead_intents(log.directory), locate, judge)
    events = [
        recovered_event(item.intent, item.landing)
        for item in examined
        if item.landing.state != "unknown"
    ]
    if events:
        log.write(events)
    return examined
