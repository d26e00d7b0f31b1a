"""Multi-process-safe, size-rotating ``logging`` handler and locked snapshots for readers.

Every append and every rotation happens while holding an exclusive ``flock`` on
``<dir>/audit.lock``, so lines from several processes never interleave and a rotation done by
one process can neither lose nor duplicate another's lines: before writing, a process checks
that its open file is still ``<dir>/audit.log`` and reopens it if someone rotated meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import logging.handlers
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol, TypeVar

from audit.format import LOGGER_NAME, format_prefix_time, logger_category

LOG_NAME = "audit.log"
LOCK_NAME = "audit.lock"
CROSSINGS_NAME = "audit.crossings"
_ROTATED_RE = re.compile(re.escape(LOG_NAME) + r"\.([1-9][0-9]*)")
_FILE_MODE = 0o600  # owner-only: lines carry names, statements and policy detail
_KEEP_DELETIONS = 100_000
T = TypeVar("T")


class TreeHooks(Protocol):
    """What the handler calls, under its lock, to keep the Merkle tree (``audit.tree``)."""

    def sync(self, fd: int, inode: int, size: int) -> None: ...
    def file_started(self, file_id: str) -> None: ...
    def appended(self, lines: list[str], inode: int, end: int) -> None: ...
    def due(self, *, now: bool = False) -> bool: ...
    def checkpoint(self, file_id: str | None = None) -> object: ...


class AuditFormatter(logging.Formatter):
    """log4j ``%d{ISO8601} %p %c{2}: %m`` with the time in UTC.

    Audit lines are formatted (and hashed) before they reach the handler, because the hash
    covers the prefix; :meth:`line_prefix` is that single definition. A batch record carries
    its finished lines and formats to them unchanged, so any extra handler attached to
    ``lakegate.audit`` (e.g. a syslog mirror) receives exactly the bytes of the file.
    """

    def line_prefix(self, ts: datetime, level: str = "INFO", name: str = LOGGER_NAME) -> str:
        """The text before the message: ``2026-11-22 10:00:00,123 INFO lakegate.audit: ``."""
        return f"{format_prefix_time(ts)} {level} {logger_category(name)}: "

    def format(self, record: logging.LogRecord) -> str:
        lines = getattr(record, "audit_lines", None)
        if lines is not None:
            return "\n".join(lines)
        ts = datetime.fromtimestamp(record.created, UTC)
        return self.line_prefix(ts, record.levelname, record.name) + record.getMessage()


def file_id_of_line(first_line: bytes) -> str:
    """A file's identity: hash of its first line (unique, and it survives renames)."""
    return hashlib.sha256(first_line).hexdigest()[:32]


def read_first_line(fd: int, size: int) -> bytes:
    """The first line of an open file (without its newline), read with ``pread``."""
    chunk = 8192
    data = b""
    while len(data) < size:
        part = os.pread(fd, chunk, len(data))
        if not part:
            break
        data += part
        end = data.find(b"\n")
        if end >= 0:
            return data[:end]
    return data


def file_id(path: str | Path) -> str | None:
    """Identity of an audit file, ``None`` when it is empty or unreadable."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            return file_id_of_line(read_first_line(handle.fileno(), size)) if size else None
    except OSError:
        return None


def _open_append(path: str) -> int:
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    return os.open(path, flags, _FILE_MODE)


class LockedRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Appends one pre-formatted batch per record in one locked write; rotates by size.

    Unlike the stdlib handler it never swallows an error: the exception is attached to the
    record (``audit_error``) so the caller can refuse the access. A batch that fails half-way
    is truncated away, and a line left half-written by a killed process is sealed with a
    newline before anyone appends after it (``verify`` reports it as a truncated line).
    """

    def __init__(
        self, filename: str | Path, max_bytes: int, backup_count: int, *, fsync: bool = False
    ) -> None:
        super().__init__(
            filename, mode="a", maxBytes=max_bytes, backupCount=backup_count, delay=True
        )
        self.fsync = fsync
        self.lock_path = os.path.join(os.path.dirname(self.baseFilename), LOCK_NAME)
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
        self._clean_size = -1  # size of audit.log right after our own last append
        self.crossings_path = os.path.join(os.path.dirname(self.baseFilename), CROSSINGS_NAME)
        self._file_id: str | None = None  # identity of the open audit.log once it has a line
        #: Identity of the file holding this writer's last line (None before its first line).
        self.last_file_id: str | None = None
        #: The Merkle tree and checkpoints (``audit.tree``), when configured.
        self.tree: TreeHooks | None = None
        self.addFilter(self._accept)

    def _accept(self, record: logging.LogRecord) -> bool:
        """Only batches addressed to this handler enter the file (keeps the format intact)."""
        return getattr(record, "audit_sink", None) is self

    def _open(self) -> IO[bytes]:  # type: ignore[override]
        return open(_open_append(self.baseFilename), "ab+", buffering=0)

    def _fd(self) -> int:
        assert self.stream is not None
        return self.stream.fileno()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's exclusive write lock (all processes, all handlers)."""
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def run_locked(self, func: Callable[[], T]) -> T:
        """Run ``func`` under the write lock: no append or rotation can happen meanwhile."""
        with self.lock, self.locked():
            return func()

    def tree_tick(self, *, final: bool = False) -> None:
        """Under the lock: catch the tree up with the file, and sign a checkpoint if lines
        have waited long enough (the checkpoint timer), or if any line is unsigned (``final``,
        on close)."""

        def tick() -> None:
            if self.tree is None or not os.path.exists(self.baseFilename):
                return
            info = self._ensure_current()
            self.tree.sync(self._fd(), info.st_ino, info.st_size)
            if self.tree.due(now=final):
                self.tree.checkpoint()

        self.run_locked(tick)

    def _ensure_current(self) -> os.stat_result:
        """Reopen if another process rotated (or someone removed) ``audit.log``."""
        try:
            on_disk: os.stat_result | None = os.stat(self.baseFilename)
        except FileNotFoundError:
            on_disk = None
        if self.stream is not None:
            mine = os.fstat(self._fd())
            if on_disk is not None and (mine.st_ino, mine.st_dev) == (
                on_disk.st_ino,
                on_disk.st_dev,
            ):
                return mine
            self._close_stream()
        self.stream = self._open()
        return os.fstat(self._fd())

    def _close_stream(self) -> None:
        self._clean_size = -1
        self._file_id = None
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()

    def _seal_torn_tail(self, size: int) -> int:
        """A writer killed mid-line left no newline: end that line so ours start cleanly."""
        if size == self._clean_size:  # nobody appended since our own complete batch
            return size
        if size > 0 and os.pread(self._fd(), 1, size - 1) not in (b"\n", b""):
            self._write_all(b"\n", size)
            return size + 1
        return size

    def shouldRollover(self, record: logging.LogRecord, size: int | None = None) -> bool:
        """Rotate when this batch would push a non-empty file past ``maxBytes``."""
        if self.maxBytes <= 0:
            return False
        payload: bytes = getattr(record, "audit_payload", b"")
        if size is None:
            size = os.fstat(self._fd()).st_size if self.stream is not None else 0
        return size > 0 and size + len(payload) > self.maxBytes

    def doRollover(self) -> None:
        """Shift ``audit.log.i`` to ``.i+1`` (oldest overwritten), ``audit.log`` to ``.1``."""
        self._close_stream()
        self._clean_size = -1
        doomed = self.rotation_filename(f"{self.baseFilename}.{self.backupCount}")
        if os.path.exists(doomed) and (doomed_id := file_id(doomed)) is not None:
            self._append_index(f"D\t{doomed_id}\n")  # before the file is gone, never after
        for index in range(self.backupCount - 1, 0, -1):
            source = self.rotation_filename(f"{self.baseFilename}.{index}")
            target = self.rotation_filename(f"{self.baseFilename}.{index + 1}")
            if os.path.exists(source):
                self.rotate(source, target)
        self.rotate(self.baseFilename, self.rotation_filename(self.baseFilename + ".1"))
        self.stream = self._open()
        if self.fsync:
            _fsync_dir(os.path.dirname(self.baseFilename))
        with contextlib.suppress(OSError):  # stale notes are harmless, just kept longer
            self._prune_crossings()

    def _write_all(self, data: bytes, start_size: int) -> None:
        """Write everything or nothing: on failure cut the file back to ``start_size``."""
        fd = self._fd()
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                count = os.write(fd, view[written:])
                if count <= 0:
                    raise OSError(errno.EIO, "short write to audit log", self.baseFilename)
                written += count
        except BaseException:
            # Whatever reached the file (even bytes a failing call wrote) is cut away again.
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_size > start_size:
                    os.ftruncate(fd, start_size)
            raise

    def _current_file_id(self, size: int, payload: bytes) -> str:
        """Identity of ``audit.log``; for an empty file, that of the line we are about to add."""
        if size == 0:
            return file_id_of_line(payload[: payload.find(b"\n")])
        if self._file_id is None:
            self._file_id = file_id_of_line(read_first_line(self._fd(), size))
        return self._file_id

    def _record_crossing(self, record: logging.LogRecord, previous: str, current: str) -> None:
        """Note that this writer's chain goes on in another file than its last line's.

        ``verify`` uses these notes to tell a chain whose previous line was rotated away
        (its file is gone, deleted by rotation) from one whose previous line was deleted.
        """
        writer: str = record.audit_writer  # type: ignore[attr-defined]
        seq: int = record.audit_first_seq  # type: ignore[attr-defined]
        self._append_index(f"C\t{writer}\t{seq}\t{previous}\t{current}\n")

    def _append_index(self, text: str) -> None:
        line = text.encode("ascii")
        fd = os.open(self.crossings_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _FILE_MODE)
        try:
            if os.write(fd, line) != len(line):
                raise OSError(errno.EIO, "short write", self.crossings_path)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _prune_crossings(self) -> None:
        """Forget notes no retained line needs any more (best effort, under the lock)."""
        retained = {
            fid
            for path in log_files(os.path.dirname(self.baseFilename))
            if (fid := file_id(path)) is not None
        }
        try:
            with open(self.crossings_path, "rb") as handle:
                lines = handle.read().decode("ascii", "replace").splitlines()
        except FileNotFoundError:
            return
        # A crossing note is needed while the line it describes is retained. A deletion note
        # may be needed whenever a writer idle since then comes back, so those are kept (the
        # newest _KEEP_DELETIONS of them: ~3 MB, one per file rotation ever deleted).
        notes = [line for line in lines if line.startswith("C\t")]
        kept = [line for line in notes if line.rsplit("\t", 1)[-1] in retained]
        kept += [line for line in lines if line.startswith("D\t")][-_KEEP_DELETIONS:]
        if len(kept) == len(lines):
            return
        temporary = self.crossings_path + ".tmp"
        with open(temporary, "w", encoding="ascii") as handle:
            handle.write("".join(line + "\n" for line in kept))
            if self.fsync:
                os.fsync(handle.fileno())
        os.replace(temporary, self.crossings_path)

    def emit(self, record: logging.LogRecord) -> None:
        payload: bytes = record.audit_payload  # type: ignore[attr-defined]
        try:
            with self.locked():
                info = self._ensure_current()
                size, inode = self._seal_torn_tail(info.st_size), info.st_ino
                if self.tree is not None:
                    self.tree.sync(self._fd(), inode, size)
                if self.shouldRollover(record, size):
                    self.doRollover()
                    size, inode = 0, os.fstat(self._fd()).st_ino
                current = self._current_file_id(size, payload)
                if self.tree is not None and size == 0:
                    self.tree.file_started(current)
                if self.last_file_id is not None and self.last_file_id != current:
                    self._record_crossing(record, self.last_file_id, current)
                self._clean_size = -1
                self._write_all(payload, size)
                self._clean_size = size + len(payload)
                self.last_file_id = current
                record.audit_committed = True  # type: ignore[attr-defined]
                if self.fsync:
                    os.fsync(self._fd())
                if self.tree is not None:
                    lines: list[str] = record.audit_lines  # type: ignore[attr-defined]
                    self.tree.appended(lines, inode, self._clean_size)
        except Exception as exc:  # surfaced by AuditLog.write, never swallowed
            record.audit_error = exc  # type: ignore[attr-defined]

    def handleError(self, record: logging.LogRecord) -> None:
        """Never print-and-continue: the caller must see the failure (fail closed)."""
        raise

    def reopen_after_fork(self) -> None:
        """A forked child shares its parent's lock description; take a lock of its own."""
        self._close_stream()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)

    def close(self) -> None:
        with self.lock:
            self._close_stream()
            if self._lock_fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._lock_fd)
                self._lock_fd = -1
            logging.Handler.close(self)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def log_files(directory: str | Path) -> list[Path]:
    """Audit files oldest first: ``audit.log.N`` … ``audit.log.1``, ``audit.log``."""
    base = Path(directory)
    numbered: list[tuple[int, Path]] = []
    if base.is_dir():
        for entry in base.iterdir():
            match = _ROTATED_RE.fullmatch(entry.name)
            if match:
                numbered.append((int(match.group(1)), entry))
    files = [path for _, path in sorted(numbered, reverse=True)]
    current = base / LOG_NAME
    if current.exists():
        files.append(current)
    return files


def rotation_gaps(files: list[Path]) -> list[str]:
    """Names of rotated files missing from the numbering ``1..N`` (a deleted file)."""
    numbers = {int(m.group(1)) for f in files if (m := _ROTATED_RE.fullmatch(f.name))}
    if not numbers:
        return []
    return [f"{LOG_NAME}.{n}" for n in range(1, max(numbers)) if n not in numbers]


@dataclass
class SnapshotFile:
    """One audit file opened under the lock, read only up to the size it had then."""

    name: str
    path: Path
    handle: IO[bytes]
    size: int
    file_id: str | None = None

    def lines(self) -> Iterator[tuple[bytes, bool]]:
        """``(line without newline, had newline)`` pairs up to the snapshot size."""
        remaining = self.size
        self.handle.seek(0)
        for raw in self.handle:
            if remaining <= 0:
                break
            if len(raw) > remaining:
                raw = raw[:remaining]
            remaining -= len(raw)
            if raw.endswith(b"\n"):
                yield raw[:-1], True
            else:
                yield raw, False


@dataclass(frozen=True)
class Crossing:
    """A writer's chain went on at ``seq`` in file ``file_id`` from file ``previous_id``."""

    previous_id: str
    file_id: str


@dataclass
class CrossingIndex:
    """``audit.crossings``: file crossings of chains, and files rotation deleted.

    Lines are ``C<TAB>writer<TAB>seq<TAB>previous file id<TAB>file id`` (the writer escaped as
    in the log) and ``D<TAB>file id``; a file id is the first 32 hex of the SHA-256 of the
    file's first line.
    """

    notes: dict[tuple[str, int], Crossing]
    rotated_away: set[str]


@dataclass
class Snapshot:
    """A consistent view of all audit files (taken while no writer was mid-append)."""

    directory: Path
    files: list[SnapshotFile]
    locked: bool
    gaps: list[str]
    #: ``None`` when the index file does not exist.
    crossings: CrossingIndex | None = None


def read_crossings(path: Path) -> CrossingIndex | None:
    """Parse the crossings index; unknown lines are ignored."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    index = CrossingIndex({}, set())
    for line in data.decode("ascii", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 5 and parts[0] == "C" and parts[2].isdigit():
            index.notes[(parts[1], int(parts[2]))] = Crossing(parts[3], parts[4])
        elif len(parts) == 2 and parts[0] == "D":
            index.rotated_away.add(parts[1])
    return index


@contextlib.contextmanager
def open_snapshot(directory: str | Path) -> Iterator[Snapshot]:
    """Open every audit file under a shared lock so rotation cannot shift them under us.

    Readers hold the lock only while opening files (not while reading), so a long verify or
    query never stalls writers. Without permission to lock (a read-only copy) the snapshot is
    taken unlocked and ``locked`` is ``False``.
    """
    base = Path(directory)
    lock_fd = -1
    with contextlib.suppress(OSError):
        lock_fd = os.open(base / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    opened: list[SnapshotFile] = []
    try:
        if lock_fd >= 0:
            fcntl.flock(lock_fd, fcntl.LOCK_SH)
        try:
            paths = log_files(base)
            for path in paths:
                try:
                    handle = open(path, "rb")  # noqa: SIM115 (closed below)
                except FileNotFoundError:
                    continue
                size = os.fstat(handle.fileno()).st_size
                first = file_id_of_line(read_first_line(handle.fileno(), size)) if size else None
                opened.append(SnapshotFile(path.name, path, handle, size, first))
            crossings = read_crossings(base / CROSSINGS_NAME)
        finally:
            if lock_fd >= 0:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        yield Snapshot(base, opened, lock_fd >= 0, rotation_gaps(paths), crossings)
    finally:
        for item in opened:
            item.handle.close()
        if lock_fd >= 0:
            os.close(lock_fd)
