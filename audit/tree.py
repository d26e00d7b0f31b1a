"""The writers' side of the Merkle tree: kept beside the hash chain, checkpointed and signed.

Every complete line of the audit files (oldest file first, each without its newline) is a
leaf, in file order, across rotation. The tree's compact state (its frontier, O(log n)
hashes) is shared by all writers of a directory in ``audit.merkle`` and updated under the
same ``flock`` as the appends, so each batch costs one leaf hash per line, on average one
node hash per line, and one ``pwrite``. Lines the state does not cover yet (a writer killed
between its append and the state update, a writer without checkpoints) are caught up from
the file before the next batch.

Files beside ``audit.log`` (none is trusted by a reader: all is checked against signed roots):

* ``audit.merkle``: size, covered bytes of ``audit.log``, last checkpoint, frontier, checksum;
* ``audit.tiles``: the root of every complete block of 1024 leaves (32 bytes each), so a
  proof needs one block of lines and ~n/1024 stored hashes;
* ``audit.checkpoints``: signed checkpoints (:mod:`audit.checkpoint`), also sent to the witness.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import struct
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from audit.checkpoint import (
    CHECKPOINTS_NAME,
    Checkpoint,
    CheckpointSettings,
    append_line,
    check_origin,
    default_origin,
    load_private_key,
    read_checkpoints,
)
from audit.handler import LOCK_NAME, LOG_NAME, file_id_of_line, log_files
from audit.merkle import Frontier
from audit.witness import publish
from audit.witness_http import check_url
from audit.witness_http import publish as publish_http

STATE_NAME = "audit.merkle"
TILES_NAME = "audit.tiles"
_MAGIC = b"LGMRKL01"
_HEADER = struct.Struct("<8sQQQQdI")  # magic, inode, covered bytes, size, cp size, cp time, n
_CHUNK = 1 << 20
#: A lone writer writes the state at least every this many batches (and at every checkpoint
#: and rotation); lines after it are re-read from audit.log by whoever needs them.
_SAVE_EVERY = 64
_errors = logging.getLogger("lakegate.errors")


def _now_iso() -> str:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def complete_lines(fd: int, start: int, end: int) -> tuple[list[bytes], int]:
    """Lines ending in ``start..end`` of an open file and the offset after the last one."""
    out: list[bytes] = []
    tail = b""
    position = start
    while position < end:
        data = os.pread(fd, min(_CHUNK, end - position), position)
        if not data:
            break
        position += len(data)
        parts = (tail + data).split(b"\n")
        tail = parts.pop()
        out.extend(parts)
    return out, position - len(tail)


class TreeKeeper:
    """The tree state of one audit directory, for a writer holding the directory's lock.

    Every method must run under the exclusive ``flock`` on ``audit.lock``.
    """

    def __init__(self, directory: Path, settings: CheckpointSettings, *, fsync: bool = False):
        self.directory = directory
        self.settings = settings
        self.fsync = fsync
        self.origin = check_origin(settings.origin or default_origin(directory))
        for name, place in (("signing key", settings.key), ("witness", settings.witness)):
            if place is not None and place.resolve().is_relative_to(directory.resolve()):
                raise ValueError(f"the checkpoint {name} must be outside the audit directory")
        if settings.every_lines < 1 or settings.every_seconds <= 0:
            raise ValueError("checkpoints need every_lines >= 1 and every_seconds > 0")
        if settings.witness_url is not None:
            check_url(settings.witness_url)
        if settings.witness_unreachable not in ("refuse", "record"):
            raise ValueError("witness_unreachable must be refuse or record")
        self._key = load_private_key(settings.key)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        self._state_fd = os.open(directory / STATE_NAME, flags, 0o640)
        self._tiles_fd = os.open(directory / TILES_NAME, flags, 0o640)
        self.frontier = Frontier(on_tile=self._tile)
        self.inode = 0
        self.covered = 0  # bytes of audit.log the frontier covers (a line boundary)
        self.cp_size = 0
        self.cp_time = 0.0
        #: (inode, covered) of audit.log when our in-memory state was exact: while the file
        #: still has that size, nobody else appended and the state need not be read back.
        self._cached: tuple[int, int] | None = None
        self._unsaved = 0  # batches appended since the state file was last written
        self._shared = False  # another writer appended since our last batch

    def close(self) -> None:
        for fd in (self._state_fd, self._tiles_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._state_fd = self._tiles_fd = -1

    # -- state -------------------------------------------------------------------------------
    def _tile(self, index: int, digest: bytes) -> None:
        os.pwrite(self._tiles_fd, digest, index * 32)

    def _save(self) -> None:
        body = _HEADER.pack(
            _MAGIC,
            self.inode,
            self.covered,
            self.frontier.size,
            self.cp_size,
            self.cp_time,
            len(self.frontier.nodes),
        ) + b"".join(self.frontier.nodes)
        os.pwrite(self._state_fd, body + hashlib.sha256(body).digest()[:8], 0)
        self._cached = (self.inode, self.covered)
        self._unsaved = 0

    def _load(self) -> bool:
        data = os.pread(self._state_fd, _HEADER.size + 64 * 32 + 8, 0)
        if len(data) < _HEADER.size:
            return False
        magic, inode, covered, size, cp_size, cp_time, count = _HEADER.unpack_from(data)
        end = _HEADER.size + 32 * count
        if magic != _MAGIC or len(data) < end + 8:
            return False
        if hashlib.sha256(data[:end]).digest()[:8] != data[end : end + 8]:
            return False
        nodes = [data[i : i + 32] for i in range(_HEADER.size, end, 32)]
        try:
            self.frontier = Frontier(size, nodes, on_tile=self._tile)
        except ValueError:
            return False
        self.inode, self.covered, self.cp_size, self.cp_time = inode, covered, cp_size, cp_time
        self._cached = (inode, covered)
        return True

    # -- keeping up with the file ------------------------------------------------------------
    def sync(self, fd: int, inode: int, size: int) -> None:
        """Bring the tree up to the complete lines of ``audit.log`` (open as ``fd``)."""
        if self._cached == (inode, size):
            return
        self._shared = True
        if not self._load() or self.inode != inode or self.covered > size:
            self._rebuild(fd, inode, size)
            return
        if self.covered < size:
            lines, self.covered = complete_lines(fd, self.covered, size)
            for line in lines:
                self.frontier.append_line(line)
            self._save()

    def _rebuild(self, fd: int, inode: int, size: int) -> None:
        """Recompute the state from the newest retained file that has a start checkpoint
        (or, when no checkpoint names any file, from the oldest file at size 0, signing the
        start of each: a log that existed before checkpoints were configured): the state was
        lost, or a writer without checkpoints rotated."""
        starts = {
            cp.file: cp
            for _, cp in read_checkpoints(self.directory / CHECKPOINTS_NAME)
            if cp is not None and cp.file is not None and cp.origin == self.origin
        }
        files = log_files(self.directory)[:-1]  # rotated files; audit.log is read through fd
        ids: list[str | None] = []
        for path in files:
            with open(path, "rb") as handle:
                ids.append(file_id_of_line(handle.readline().rstrip(b"\n")))
        first = complete_lines(fd, 0, min(size, 1 << 16))[0][:1]
        ids.append(file_id_of_line(first[0]) if first else None)
        begin = max((i for i, fid in enumerate(ids) if fid in starts), default=0)
        start = starts.get(ids[begin]) if ids else None
        if start is not None:
            nodes = [bytes.fromhex(node) for node in start.frontier]
            self.frontier = Frontier(start.size, nodes, on_tile=self._tile)
        else:
            self.frontier = Frontier(on_tile=self._tile)
        self.inode, self.covered = inode, 0
        upgrade = not starts  # the first tree writer of an existing log signs every file
        for index in range(begin, len(ids)):
            if upgrade and ids[index] is not None:
                # Later, a file no tree writer began stays unsigned: verify reports it as
                # replaced rather than this writer vouching for it.
                self.file_started(ids[index])  # type: ignore[arg-type]
            if index < len(files):
                with open(files[index], "rb") as handle:
                    lines, _ = complete_lines(handle.fileno(), 0, os.fstat(handle.fileno()).st_size)
            else:
                lines, self.covered = complete_lines(fd, 0, size)
            for line in lines:
                self.frontier.append_line(line)
        self._save()

    def file_started(self, file_id: str) -> None:
        """A new audit file begins at the current size: a checkpoint that names it and
        carries the frontier, so the tree can be continued once older files are gone."""
        self.checkpoint(file_id)

    def appended(self, lines: list[str], inode: int, end: int) -> None:
        """Our batch is in the file (``end`` = the file's size after it)."""
        if self.inode != inode:  # the batch opened a new file (rotation or genesis)
            self.inode, self.covered = inode, 0
        for line in lines:
            self.frontier.append_line(line.encode("ascii"))
        self.covered = end
        settings = self.settings
        pending = self.frontier.size - self.cp_size
        if pending >= settings.every_lines or (
            pending > 0 and time.time() - self.cp_time >= settings.every_seconds
        ):
            self.checkpoint()
        elif self._shared or self._unsaved >= _SAVE_EVERY:
            self._save()
            self._shared = False
        else:  # a lone writer: the file itself is the journal the next reader catches up from
            self._unsaved += 1
            self._cached = (self.inode, self.covered)

    def due(self, *, now: bool = False) -> bool:
        """Lines are unsigned and have waited ``every_seconds`` (any unsigned line: ``now``)."""
        pending = self.frontier.size > self.cp_size
        return pending and (now or time.time() - self.cp_time >= self.settings.every_seconds)

    def checkpoint(self, file_id: str | None = None) -> Checkpoint:
        """Sign the current size and root; store it here and at the witness."""
        checkpoint = Checkpoint(
            origin=self.origin,
            size=self.frontier.size,
            root=self.frontier.root().hex(),
            time=_now_iso(),
            file=file_id,
            frontier=[node.hex() for node in self.frontier.nodes] if file_id else [],
        ).signed(self._key)
        line = checkpoint.to_json()
        append_line(self.directory / CHECKPOINTS_NAME, line, fsync=self.fsync)
        if self.settings.witness is not None:
            publish(self.settings.witness, self.origin, line, checkpoint.size, fsync=self.fsync)
        publish_http(
            self.directory, self.settings, self.origin, line, checkpoint.size, fsync=self.fsync
        )
        self.cp_size, self.cp_time = self.frontier.size, time.time()
        self._save()
        return checkpoint


class CheckpointTimer:
    """Writes a checkpoint when lines have waited ``every_seconds`` with no write to do it."""

    def __init__(self, every_seconds: float, tick: object) -> None:
        self._stop = threading.Event()
        self._tick = tick
        self._every = every_seconds
        self._thread = threading.Thread(target=self._run, name="audit-checkpoints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._tick()  # type: ignore[operator]
            except Exception as exc:  # the next write retries and fails closed if it must
                _errors.error("audit checkpoint failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def force_checkpoint(directory: Path, settings: CheckpointSettings) -> Checkpoint:
    """Bring the tree up to date and sign a checkpoint now (``lakegate audit checkpoint``)."""
    lock_fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    keeper = TreeKeeper(directory, settings)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            log_fd = os.open(directory / LOG_NAME, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return keeper.checkpoint()  # nothing logged yet: the empty tree
        try:
            info = os.fstat(log_fd)
            keeper.sync(log_fd, info.st_ino, info.st_size)
            return keeper.checkpoint()
        finally:
            os.close(log_fd)
    finally:
        keeper.close()
        os.close(lock_fd)
