"""The audit writer: events in, tamper-evident lines out, fail closed.

``AuditLog.write`` returns only after the batch is in the file (flushed to the OS, optionally
fsync'ed); if that is impossible it raises :class:`AuditWriteError` and the caller must refuse
the access. Each ``AuditLog`` is one writer with its own hash chain.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import mmap
import os
import secrets
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import field as dataclass_field
from dataclasses import make_dataclass
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from types import TracebackType
from typing import Any

from audit.checkpoint import CheckpointError, CheckpointSettings
from audit.escape import NULL_TOKEN, escape_value
from audit.format import (
    FIELDS,
    HASH_SEPARATOR,
    LAYOUTS,
    LINE_FIELDS,
    LOGGER_NAME,
    REQUIRED,
    Field,
    chain_hash,
    parse_complete,
)
from audit.handler import (
    LOG_NAME,
    AuditFormatter,
    LockedRotatingFileHandler,
    file_id,
    log_files,
)
from audit.tree import CheckpointTimer, TreeKeeper

WRITERS_DIR = ".writers"
_forks = [0]  # bumped in every forked child: cheaper than os.getpid() on each write


def _count_fork() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_count_fork)
_FILENAME = os.path.basename(__file__)
_MODULE = os.path.splitext(_FILENAME)[0]
_START = time.time()


class AuditWriteError(Exception):
    """The audit record could not be written; the access it describes must be refused."""


def statement_hash(text: str) -> str:
    """``sha256:<hex>`` of the statement text (the text itself is never logged)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_writer_id() -> str:
    """``<hostname>:<pid>:<8 hex>``: unique per process and per ``AuditLog`` instance."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def event_default(f: Field) -> object:
    """What an event holds for a field it was not given."""
    return f.kind.empty if f.default is None else f.default


def _fill(event: Any) -> None:
    """Filled at construction, not at write time, so the caller knows the id and time it
    logged; sequences frozen into the tuples the line renders."""
    if event.ts is None:
        event.ts = datetime.now(UTC)
    if event.event_id is None:
        event.event_id = uuid.uuid4().hex
    for f in EVENT_FIELDS:
        setattr(event, f.attr, f.kind.freeze(getattr(event, f.attr)))


#: The fields an event carries itself (the rest: the ``ugi`` row's inputs, the chain's).
EVENT_FIELDS = tuple(f for f in FIELDS if f.origin == "event" and f.attr and not f.render)
_REQUIRED_FIELDS = [(f.attr, f.kind.py_type) for f in EVENT_FIELDS if f.default is REQUIRED]
#: One access decision about one table (a statement touching N tables is N events): one
#: attribute per row of ``audit.format.FIELDS`` that the event supplies, after the acting
#: user and how they (and a service acting for them, ``via``) authenticated.
AuditEvent = make_dataclass(
    "AuditEvent",
    [
        *_REQUIRED_FIELDS[:1],
        ("user", "str"),
        *_REQUIRED_FIELDS[1:],
        ("auth", "str", dataclass_field(default="SIMPLE")),
        ("via", "str | None", dataclass_field(default=None)),
        ("via_auth", "str", dataclass_field(default="TOKEN")),
        *[
            (f.attr, f.kind.py_type, dataclass_field(default=event_default(f)))
            for f in EVENT_FIELDS
            if f.default is not REQUIRED
        ],
    ],
    namespace={
        "__module__": __name__,
        "__post_init__": _fill,
        "__doc__": "One access decision about one table, as the writer renders it.",
    },
)


def _renderer(generation: int) -> Callable[[Any, dict[str, str]], str]:
    """The writer of one layout's fields (those of extensions up to ``generation``), made
    from ``audit.format.FIELDS`` once, as one f-string the way ``dataclasses`` makes an
    ``__init__``: the table decides every key and how its value is written; generating the
    code only keeps the writer's hot path as fast as the hand-written line it replaced."""
    env: dict[str, object] = {}
    parts = []
    for i, f in enumerate(LINE_FIELDS):
        if f.extension > generation or f.key == "hash":
            continue
        if not f.key.isidentifier() or not (f.attr or "_").isidentifier():
            raise ValueError(f"audit field {f.key!r}: key and attribute must be identifiers")
        if f.origin == "chain":
            value = f"chain[{f.key!r}]"
        elif f.render is not None:
            env[f"render{i}"], value = f.render, f"render{i}(event)"
        else:
            env[f"write{i}"], value = f.kind.write, f"write{i}(event.{f.attr})"
        parts.append(f"{f.key}={{{value}}}")
    source = 'def render(event, chain):\n    return f"' + "\\t".join(parts) + '"\n'
    exec(compile(source, f"<audit line v{generation}>", "exec"), env)
    return env["render"]  # type: ignore[return-value]


_RENDERERS = tuple(_renderer(generation) for generation in range(len(LAYOUTS)))
_EXTENSIONS = tuple(
    (f.extension, attrgetter(f.attr), f.kind.empty) for f in EVENT_FIELDS if f.extension
)


def _generation(event: Any) -> int:
    """The latest extension with a field set: its keys, and all earlier ones, are written."""
    latest = 0
    for generation, value, empty in _EXTENSIONS:
        if generation > latest and value(event) != empty:
            latest = generation
    return latest


def render_unhashed(
    event: Any, prefix: str, writer_field: str, seq: int, prev_hash: str | None
) -> str:
    """The line up to (excluding) ``\\thash=``: the part the chain hash covers, written
    field by field as ``audit.format.FIELDS`` says."""
    assert event.ts is not None
    chain = {"writer": writer_field, "seq": str(seq), "prevHash": prev_hash or NULL_TOKEN}
    return prefix + _RENDERERS[_generation(event)](event, chain)


def render_line(
    event: AuditEvent, prefix: str, writer_field: str, seq: int, prev_hash: str | None
) -> tuple[str, str]:
    """``(complete line without newline, its hash)``."""
    unhashed = render_unhashed(event, prefix, writer_field, seq, prev_hash)
    digest = chain_hash(prev_hash, unhashed)
    return f"{unhashed}{HASH_SEPARATOR}{digest}", digest


class _BatchRecord(logging.LogRecord):
    """A ``LogRecord`` built without stack inspection or path parsing (it is on the hot path).

    It carries every standard attribute, so any handler or formatter can still process it.
    """

    def __init__(self, message: str, pid: int) -> None:
        now = time.time()
        self.name = LOGGER_NAME
        self.msg = message
        self.args = ()
        self.levelname = "INFO"
        self.levelno = logging.INFO
        self.pathname = __file__
        self.filename = _FILENAME
        self.module = _MODULE
        self.exc_info = None
        self.exc_text = None
        self.stack_info = None
        self.lineno = 0
        self.funcName = "write"
        self.created = now
        self.msecs = int((now - int(now)) * 1000) + 0.0
        self.relativeCreated = (now - _START) * 1000
        self.thread = threading.get_ident()
        self.threadName = threading.current_thread().name
        mp = sys.modules.get("multiprocessing")
        self.processName = mp.current_process().name if mp is not None else "MainProcess"
        self.process = pid
        self.taskName = None  # set by Python >= 3.12 records; keeps such formatters working


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        text = f"{exc.strerror}{where}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def find_chain_tip(directory: Path, writer_field: str) -> tuple[int, str | None, str | None]:
    """Last intact ``(seq, hash, file id)`` of a writer in the retained files (or zeros).

    Run it under the write lock, so no rotation renames the files while it looks.
    """
    needle = f"\twriter={writer_field}\tseq=".encode("ascii")
    for path in reversed(log_files(directory)):
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                continue
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                end = len(data)
                while (hit := data.rfind(needle, 0, end)) >= 0:
                    start = data.rfind(b"\n", 0, hit) + 1
                    stop = data.find(b"\n", hit)
                    line = data[start : stop if stop >= 0 else len(data)]
                    parsed = parse_complete(line.decode("ascii", "replace"))
                    if parsed is not None and parsed[1].hash_ok:
                        return parsed[1].seq, parsed[1].hash, file_id(path)
                    end = start
    return 0, None, None


class AuditLog:
    """One writer appending to ``<directory>/audit.log`` through ``logging``.

    Thread-safe (one lock per instance) and multi-process-safe (``flock`` in the handler).
    With the default writer id each instance starts a fresh chain; an explicit ``writer_id``
    continues its chain from the log (and may be live in only one place at a time).
    """

    def __init__(
        self,
        directory: str | Path,
        max_bytes: int = 64 * 1024 * 1024,
        backup_count: int = 20,
        writer_id: str | None = None,
        *,
        fsync: bool = False,
        checkpoints: CheckpointSettings | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0 (0 disables rotation)")
        if max_bytes > 0 and backup_count < 1:
            raise ValueError("backup_count must be >= 1 when rotating (0 would delete the log)")
        if writer_id is not None and not writer_id:
            raise ValueError("writer_id must not be empty")
        self.directory = Path(directory)
        self.path = self.directory / LOG_NAME
        self._explicit = writer_id is not None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._fork_generation = _forks[0]
        self._closed = False
        self._writer_lock_fd = -1
        self._formatter = AuditFormatter()
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._handler = LockedRotatingFileHandler(
                self.path, max_bytes, backup_count, fsync=fsync
            )
        except OSError as exc:
            raise AuditWriteError(f"cannot open audit log {self.path}: {_describe(exc)}") from exc
        self._handler.setFormatter(self._formatter)
        self._timer: CheckpointTimer | None = None
        if checkpoints is not None:
            try:
                self._handler.tree = TreeKeeper(self.directory, checkpoints, fsync=fsync)
            except (OSError, ValueError, CheckpointError) as exc:
                self._handler.close()
                raise AuditWriteError(f"cannot keep the audit tree: {_describe(exc)}") from exc
        self.writer_id = writer_id if writer_id is not None else default_writer_id()
        self._writer_field = escape_value(self.writer_id)
        self._seq = 0
        self._prev: str | None = None
        try:
            if self._explicit:
                self._claim_writer_id()
                self._seq, self._prev, self._handler.last_file_id = self._handler.run_locked(
                    lambda: find_chain_tip(self.directory, self._writer_field)
                )
        except BaseException as exc:
            self._handler.close()
            if self._handler.tree is not None:
                self._handler.tree.close()
            self._release_writer_id()
            if isinstance(exc, OSError):
                raise AuditWriteError(
                    f"cannot resume audit writer {self.writer_id!r}: {_describe(exc)}"
                ) from exc
            raise
        self._logger = logging.getLogger(LOGGER_NAME)
        self._logger.propagate = False
        if self._logger.level == logging.NOTSET:
            self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self._handler)
        if checkpoints is not None:
            self._timer = CheckpointTimer(checkpoints.every_seconds, self._handler.tree_tick)

    @property
    def fsync(self) -> bool:
        return self._handler.fsync

    def _claim_writer_id(self) -> None:
        """An explicit id may be live once: two chains under one id would look forged."""
        folder = self.directory / WRITERS_DIR
        digest = hashlib.sha256(self.writer_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(folder / f"{digest}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise AuditWriteError(f"cannot claim audit writer id: {_describe(exc)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise AuditWriteError(
                f"audit writer id {self.writer_id!r} is already in use by another AuditLog"
            ) from exc
        self._writer_lock_fd = fd

    def _release_writer_id(self) -> None:
        if self._writer_lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._writer_lock_fd)
            self._writer_lock_fd = -1

    def _after_fork(self) -> None:
        """A forked child must not continue its parent's chain (two chains, one id)."""
        self._lock = threading.Lock()  # the parent's may have been held at fork time
        self._pid = os.getpid()
        self._fork_generation = _forks[0]
        if self._explicit:
            self._closed = True
            raise AuditWriteError(
                f"audit writer id {self.writer_id!r} was inherited by a forked process; "
                "open a new AuditLog in the child"
            )
        self._handler.reopen_after_fork()
        self._handler.last_file_id = None
        self.writer_id = default_writer_id()
        self._writer_field = escape_value(self.writer_id)
        self._seq, self._prev = 0, None

    def write(self, events: Sequence[AuditEvent]) -> None:
        """Append one batch (one statement) in one locked write; raise if it is not stored."""
        batch = list(events)
        if not batch:
            return
        if self._fork_generation != _forks[0]:
            self._after_fork()
        with self._lock:
            if self._closed:
                raise AuditWriteError(f"audit log {self.path} is closed")
            seq, prev = self._seq, self._prev
            lines: list[str] = []
            try:
                for event in batch:
                    seq += 1
                    assert event.ts is not None
                    prefix = self._formatter.line_prefix(event.ts)
                    line, prev = render_line(event, prefix, self._writer_field, seq, prev)
                    lines.append(line)
            except Exception as exc:
                raise AuditWriteError(f"cannot format audit event: {_describe(exc)}") from exc
            record = _BatchRecord("\n".join(lines), self._pid)
            record.audit_sink = self._handler
            record.audit_writer = self._writer_field
            record.audit_first_seq = self._seq + 1
            record.audit_lines = lines
            record.audit_payload = ("\n".join(lines) + "\n").encode("ascii")
            try:
                self._logger.handle(record)
            except Exception as exc:
                # Another handler on the logger (a mirror) failed. That only matters if our
                # file did not get the batch; otherwise the record is stored and access may go on.
                if not getattr(record, "audit_committed", False):
                    record.audit_error = exc
            finally:
                if getattr(record, "audit_committed", False):
                    self._seq, self._prev = seq, prev
            error: BaseException | None = getattr(record, "audit_error", None)
            if error is not None:
                raise AuditWriteError(
                    f"audit log write failed ({self.path}): {_describe(error)}"
                ) from error
            if not getattr(record, "audit_committed", False):
                raise AuditWriteError(
                    f"audit record not written: logger {LOGGER_NAME!r} is disabled or filtered"
                )

    def close(self) -> None:
        """Detach and close the handler; later writes raise :class:`AuditWriteError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._timer is not None:
                self._timer.stop()
                try:  # a clean shutdown leaves no line unsigned
                    self._handler.tree_tick(final=True)
                except Exception as exc:
                    logging.getLogger("lakegate.errors").error(
                        "audit checkpoint at close failed: %s", _describe(exc)
                    )
            self._logger.removeHandler(self._handler)
            self._handler.close()
            if self._handler.tree is not None:
                self._handler.tree.close()
            self._release_writer_id()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
