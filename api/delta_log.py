"""A Delta table's version, history and row count, read by delta-rs (`deltalake`), no JVM.

delta-rs reads the log as a Delta reader does, checkpoints included, so the row count stays
known after a checkpoint and log cleanup. The row count is the sum of `numRecords` over the
live files, less the rows their deletion vectors remove. Results are cached per (log
directory, the table's own id, listed log files), so a repeated request costs a directory
listing or two, and a table dropped and created again at the same place (versions
restarting at 0) never answers with the old table's history or row count. What is not
known or not cheap (a file without stats; deletion vectors over more than MAX_DV_ROWS rows;
a log delta-rs cannot read) is reported as unknown rather than guessed.

Object-store locations (`s3://`, `abfss://`, ...) are not read: that would need credentials
the catalog does not hold, so they report no log, as before.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from catalog.catalog import normalise_location
from catalog.identity import IdentityUnreadable, delta_identity

_ENTRY = re.compile(r"^(\d{20})\.(?:json|checkpoint\..+)$")  # commits and checkpoints
MAX_DV_ROWS = 50_000_000  # rows under deletion vectors beyond which the count is "unknown"


@dataclass(frozen=True, slots=True)
class Commit:
    version: int
    timestamp_ms: int | None
    operation: str | None
    user: str | None


@dataclass(frozen=True, slots=True)
class DeltaLog:
    version: int | None  # None: no readable log
    commits: tuple[Commit, ...]  # newest first, as many as are still in the log
    row_count: int | None
    history_complete: bool  # every commit since version 0 is still there

    @property
    def last_commit_ms(self) -> int | None:
        return self.commits[0].timestamp_ms if self.commits else None


EMPTY = DeltaLog(None, (), None, False)
_cache: dict[tuple[str, str | None, int, int, int], DeltaLog] = {}
_lock = threading.Lock()


def log_dir(location: str) -> Path | None:
    loc = normalise_location(location)
    if "://" in loc:
        return None  # object stores are not read here
    return Path(loc) / "_delta_log"


def read_log(location: str) -> DeltaLog:
    d = log_dir(location)
    if d is None:
        return EMPTY
    try:
        versions = sorted({int(m.group(1)) for e in os.scandir(d) if (m := _ENTRY.match(e.name))})
    except OSError:
        return EMPTY
    if not versions:
        return EMPTY
    try:  # the table's own id: one dropped and created again here is another table
        table_id = delta_identity(location).table_id
    except IdentityUnreadable:
        return DeltaLog(versions[-1], (), None, False)
    # cleanup changes the first version; a table replaced at this place, the id
    key = (str(d), table_id, versions[0], versions[-1], len(versions))
    hit = _cache.get(key)
    if hit is not None:
        return hit
    result = _read(d, versions[-1])
    with _lock:
        if len(_cache) > 50_000:
            _cache.clear()
        _cache[key] = result
    return result


def _read(d: Path, latest: int) -> DeltaLog:
    """The table as of the listed version, so the result matches its cache key."""
    try:
        table = DeltaTable(str(d.parent), version=latest)
        commits = tuple(_commit(d, info) for info in table.history())
        rows = _row_count(table)
    except (DeltaError, OSError, ValueError):
        return DeltaLog(latest, (), None, False)  # the listing still tells the version
    complete = bool(commits) and commits[-1].version == 0 and len(commits) == latest + 1
    return DeltaLog(latest, commits, rows, complete)


def _commit(d: Path, info: dict[str, Any]) -> Commit:
    version = int(info["version"])
    ts = info.get("inCommitTimestamp") or info.get("timestamp")
    if not isinstance(ts, int | float):
        try:  # no time in commitInfo: the commit file's own
            ts = (d / f"{version:020d}.json").stat().st_mtime * 1000
        except OSError:
            ts = None
    user = info.get("userName") or info.get("userId")
    return Commit(
        version, None if ts is None else int(ts), info.get("operation"), str(user) if user else None
    )


def _row_count(table: DeltaTable) -> int | None:
    counts = table.get_add_actions().column("num_records").to_pylist()
    if any(n is None for n in counts):
        return None  # a file without stats: unknown, not an undercount
    rows = sum(counts)
    if "deletionVectors" in (table.protocol().reader_features or []):
        if rows > MAX_DV_ROWS:
            return None
        rows -= _deleted_rows(table)
    return rows


def _deleted_rows(table: DeltaTable) -> int:
    """Rows the deletion vectors remove: the False entries of each file's keep mask (counted
    by pyarrow, imported only for tables that have deletion vectors)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    deleted = 0
    for batch in pa.RecordBatchReader.from_stream(table.deletion_vectors()):
        keep = pc.list_flatten(batch.column("selection_vector"))
        deleted += len(keep) - (pc.sum(keep).as_py() or 0)
    return deleted
