"""A Delta table's version, history and row count, read from `_delta_log/*.json` in Python.

Discovery must not need a JVM: the commit files are newline-delimited JSON, so the version is
the highest commit number, the history is each commit's `commitInfo`, and the row count is
the sum of `numRecords` over the files still live after replaying add/remove actions. Results
are cached per (log directory, latest version), so a repeated request costs one directory
listing. What is not cheap (a log that was checkpointed and cleaned, or whose stats are
missing) is reported as unknown rather than guessed.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from catalog.catalog import normalise_location

_COMMIT = re.compile(r"^(\d{20})\.json$")
MAX_REPLAY_BYTES = 64 * 1024 * 1024  # beyond this the row count is "unknown", not slow


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
_cache: dict[tuple[str, int, int, int], DeltaLog] = {}
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
        versions = sorted(int(m.group(1)) for e in os.scandir(d)
                          if (m := _COMMIT.match(e.name)))
    except OSError:
        return EMPTY
    if not versions:
        return EMPTY
    key = (str(d), versions[0], versions[-1], len(versions))  # cleanup changes the first
    hit = _cache.get(key)
    if hit is not None:
        return hit
    result = _replay(d, versions)
    with _lock:
        if len(_cache) > 50_000:
            _cache.clear()
        _cache[key] = result
    return result


def _replay(d: Path, versions: list[int]) -> DeltaLog:
    complete = versions[0] == 0 and versions == list(range(versions[-1] + 1))
    total = 0
    live: dict[str, int | None] = {}
    commits: list[Commit] = []
    count_ok = complete
    for v in versions:
        path = d / f"{v:020d}.json"
        try:
            size = path.stat().st_size
            total += size
            if total > MAX_REPLAY_BYTES:
                count_ok = False
            text = path.read_text(encoding="utf-8")
            mtime_ms = int(path.stat().st_mtime * 1000)
        except OSError:
            count_ok = False
            continue
        info: dict = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                action = json.loads(line)
            except ValueError:
                count_ok = False
                continue
            if "commitInfo" in action:
                info = action["commitInfo"] or {}
            elif count_ok and "add" in action:
                add = action["add"] or {}
                live[add.get("path", "")] = _num_records(add.get("stats"))
            elif count_ok and "remove" in action:
                live.pop((action["remove"] or {}).get("path", ""), None)
        ts = info.get("inCommitTimestamp") or info.get("timestamp") or mtime_ms
        user = info.get("userName") or info.get("userId")
        commits.append(Commit(v, int(ts) if isinstance(ts, int | float) else mtime_ms,
                              info.get("operation"), str(user) if user else None))
    rows: int | None = None
    if count_ok and all(n is not None for n in live.values()):
        rows = sum(n for n in live.values() if n is not None)
    commits.reverse()
    return DeltaLog(versions[-1], tuple(commits), rows, complete)


def _num_records(stats: object) -> int | None:
    if not isinstance(stats, str):
        return None
    try:
        n = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, int) else None
