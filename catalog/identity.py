"""A Delta table's identity: its own id (`metaData.id`) and newest version, read without a JVM
(issue 25, item 3).

A place is not a table: DROP and CREATE of the same name reuse the managed location with
versions restarting at 0, and a pipeline can delete a directory and write a new table there
behind the catalog's back. Every per-table cache (tags, pinned sources, plans, the
verifier's view analyses, discovery's Delta log answers) is therefore keyed by this identity
as well as by the registration.

Cost: one listing of `_delta_log` per call, which is what reading the version already cost;
the id is read once per log generation, from the JSON of the oldest commit still listed (or
with delta-rs when only a checkpoint is left), and cached under that entry's name and file
stat (inode, size, mtime): a directory deleted and written again has a new oldest entry, so
its id is read again. Never a Spark job.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from catalog.locations import normalise_location

_ENTRY = re.compile(r"^(\d{20})\.(?:json|checkpoint\..+)$")  # commits and checkpoints
MAX_IDS = 50_000


@dataclass(frozen=True, slots=True)
class DeltaIdentity:
    """Which Delta table is at a location, and at which version; `table_id` None: none."""

    table_id: str | None
    version: int | None


NONE = DeltaIdentity(None, None)
_ids: dict[tuple, str | None] = {}
_lock = threading.Lock()


class IdentityUnreadable(Exception):
    """A Delta log is there but its table id cannot be read."""


def delta_identity(location: str) -> DeltaIdentity:
    """The identity of the Delta table at `location` (NONE: no log there, or an object store
    this process does not read); IdentityUnreadable when the log holds no readable id."""
    root = normalise_location(location)
    if "://" in root:
        return NONE
    log = os.path.join(root, "_delta_log")  # a string: a Path per call cost more than the listing
    try:
        entries = [(int(m.group(1)), e) for e in os.scandir(log) if (m := _ENTRY.match(e.name))]
    except OSError:
        return NONE
    if not entries:
        return NONE
    latest = max(v for v, _ in entries)
    first_version = min(v for v, _ in entries)
    firsts = sorted((e for v, e in entries if v == first_version), key=lambda e: e.name)
    oldest = next((e for e in firsts if e.name.endswith(".json")), firsts[0])
    try:
        st = oldest.stat()
    except OSError as e:
        raise IdentityUnreadable(f"{type(e).__name__} on the oldest log entry") from None
    key = (log, oldest.name, st.st_ino, st.st_size, st.st_mtime_ns)
    table_id = _ids.get(key)
    if table_id is None:
        table_id = _read_id(Path(oldest.path), root, latest)
        with _lock:
            if len(_ids) >= MAX_IDS:
                _ids.clear()
            _ids[key] = table_id
    return DeltaIdentity(table_id, latest)


def _read_id(entry: Path, root: str, latest: int) -> str:
    """`metaData.id` from a commit's JSON (version 0 always holds it), else from delta-rs."""
    if entry.name.endswith(".json"):
        try:
            with open(entry, encoding="utf-8") as fh:
                for line in fh:
                    action = json.loads(line) if line.strip() else {}
                    meta = action.get("metaData") if isinstance(action, dict) else None
                    if isinstance(meta, dict) and isinstance(meta.get("id"), str):
                        return meta["id"]
        except (OSError, ValueError) as e:
            raise IdentityUnreadable(f"{type(e).__name__} reading {entry.name}") from None
    try:
        from deltalake import DeltaTable

        table_id = DeltaTable(root, version=latest).metadata().id
    except Exception as e:  # any failure to read the log: the caller fails closed
        raise IdentityUnreadable(f"{type(e).__name__} reading the table's metadata") from None
    if not isinstance(table_id, str) or not table_id:
        raise IdentityUnreadable("the table's metadata has no id")
    return table_id


_columns: dict[tuple, tuple[str, ...]] = {}


def columns_at(location: str, version: int) -> tuple[str, ...] | None:
    """The column names of the Delta table at `location` as of `version`, read with
    delta-rs (no JVM); None when that version cannot be read here (Spark then reads it, or
    fails, itself)."""
    from deltalake import DeltaTable

    root = normalise_location(location)
    if "://" in root:
        return None
    try:
        key = (root, delta_identity(root).table_id, version)
        hit = _columns.get(key)
        if hit is not None:
            return hit
        table = DeltaTable(root, version=version)
        names = tuple(f.name for f in table.schema().fields)
    except Exception:  # unreadable here: no narrowing, Spark decides
        return None
    with _lock:
        if len(_columns) >= MAX_IDS:
            _columns.clear()
        _columns[key] = names
    return names
