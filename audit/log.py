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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from audit.checkpoint import CheckpointError, CheckpointSettings
from audit.escape import escape_list, escape_pairs, escape_value
from audit.format import (
    HASH_SEPARATOR,
    LOGGER_NAME,
    chain_hash,
    format_ip,
    format_iso_z,
    format_ugi,
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


@dataclass
class AuditEvent:
    """One access decision about one table (a statement touching N tables is N events)."""

    allowed: bool
    user: str
    cmd: str
    src: str | None = None
    dst: str | None = None
    auth: str = "SIMPLE"
    via: str | None = None
    via_auth: str = "TOKEN"
    ip: str = "127.0.0.1"
    proto: str = "spark"
    caller_context: str | None = None
    succeeded: bool = False
    query_id: str | None = None
    stmt_hash: str | None = None
    columns: Sequence[str] = ()
    masked: Sequence[tuple[str, str]] = ()
    row_filters: Sequence[str] = ()
    policies: Sequence[str] = ()
    reason: str | None = None
    duration_ms: int | None = None
    #: which policy set decided (``sha256:<hex>`` or ``git:<commit>``); extension key
    policy_version: str | None = None
    #: ``intent`` (before a statement with an effect runs), ``outcome`` (after it), or None
    #: for a record that is both at once (reads, refusals); extension key
    phase: str | None = None
    #: the Delta version of `src` that was read, on `cmd=policyRead` lines of a mapping table
    #: read at plan time; extension key, written only when set
    read_version: int | None = None
    ts: datetime | None = None
    event_id: str | None = None

    def __post_init__(self) -> None:
        # Filled here, not at write time, so the caller knows the id and time it logged.
        if self.ts is None:
            self.ts = datetime.now(UTC)
        if self.event_id is None:
            self.event_id = uuid.uuid4().hex
        self.columns = tuple(self.columns)
        self.masked = tuple((column, mask) for column, mask in self.masked)
        self.row_filters = tuple(self.row_filters)
        self.policies = tuple(self.policies)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _extension(event: AuditEvent) -> str:
    """The extension keys, only when one is set: such a line is exactly a v1 line otherwise."""
    if event.policy_version is None and event.phase is None and event.read_version is None:
        return ""
    version, phase = escape_value(event.policy_version), escape_value(event.phase)
    if event.read_version is None:
        return f"\tpolicyVersion={version}\tphase={phase}"
    return f"\tpolicyVersion={version}\tphase={phase}\treadVersion={int(event.read_version)}"


def render_unhashed(
    event: AuditEvent, prefix: str, writer_field: str, seq: int, prev_hash: str | None
) -> str:
    """The line up to (excluding) ``\\thash=``: the part the chain hash covers."""
    assert event.ts is not None
    duration = "null" if event.duration_ms is None else str(int(event.duration_ms))
    return (
        f"{prefix}allowed={_bool(event.allowed)}"
        f"\tugi={format_ugi(event.user, event.auth, event.via, event.via_auth)}"
        f"\tip={format_ip(event.ip)}"
        f"\tcmd={escape_value(event.cmd)}"
        f"\tsrc={escape_value(event.src)}"
        f"\tdst={escape_value(event.dst)}"
        "\tperm=null"
        f"\tproto={escape_value(event.proto)}"
        f"\tcallerContext={escape_value(event.caller_context)}"
        f"\tsucceeded={_bool(event.succeeded)}"
        f"\teventId={escape_value(event.event_id)}"
        f"\tts={format_iso_z(event.ts)}"
        f"\tqueryId={escape_value(event.query_id)}"
        f"\tstmtHash={escape_value(event.stmt_hash)}"
        f"\tcolumns={escape_list(tuple(event.columns))}"
        f"\tmasked={escape_pairs(tuple(event.masked))}"
        f"\trowFilters={escape_list(tuple(event.row_filters))}"
        f"\tpolicies={escape_list(tuple(event.policies))}"
        f"\treason={escape_value(event.reason)}"
        f"\tdurationMs={duration}"
        f"{_extension(event)}"
        f"\twriter={writer_field}"
        f"\tseq={seq}"
        f"\tprevHash={prev_hash or 'null'}"
    )


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
