"""Fail closed: when the record cannot be stored, write() raises and nothing half-written stays."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

import audit.handler
from audit import AuditEvent, AuditLog, AuditWriteError
from audit.verify import verify


def event(user: str = "alice") -> AuditEvent:
    return AuditEvent(allowed=True, user=user, cmd="select", src="main.sales.orders")


def assert_one_line(message: str) -> None:
    assert message and "\n" not in message


def test_log_file_replaced_by_a_directory(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([event()])
        (tmp_path / "audit.log").unlink()
        (tmp_path / "audit.log").mkdir()
        with pytest.raises(AuditWriteError) as info:
            log.write([event()])
    assert_one_line(str(info.value))
    assert "audit.log" in str(info.value)


def test_disk_full(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with AuditLog(tmp_path) as log:
        (tmp_path / "audit.log").symlink_to("/dev/full")
        with pytest.raises(AuditWriteError, match="No space left on device") as info:
            log.write([event()])
    assert_one_line(str(info.value))


def _make_read_only(path: Path) -> Callable[[], None]:
    """chmod for normal users; root ignores modes, so use the immutable attribute instead."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o500 if path.is_dir() else 0o400)
        return lambda: path.chmod(mode)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], check=False).returncode:
        pytest.skip("running as root without a usable chattr")
    return lambda: subprocess.run([chattr, "-i", str(path)], check=True)


def test_permission_denied(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([event()])
        undo = _make_read_only(tmp_path / "audit.log")
        try:
            with pytest.raises(AuditWriteError) as info:
                log.write([event()])
        finally:
            undo()
    assert_one_line(str(info.value))
    assert verify(tmp_path).lines == 1


def test_directory_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(AuditWriteError, match="cannot open audit log") as info:
        AuditLog(tmp_path / "file" / "audit")
    assert_one_line(str(info.value))


def test_failed_rotation_refuses_then_recovers(tmp_path: Path) -> None:
    with AuditLog(tmp_path, max_bytes=300, backup_count=1) as log:
        log.write([event("u1")])
        (tmp_path / "audit.log.1").mkdir()  # rotation target is unusable
        with pytest.raises(AuditWriteError):
            log.write([event("u2")])
        (tmp_path / "audit.log.1").rmdir()
        log.write([event("u3")])  # same seq the failed batch would have used
    report = verify(tmp_path)
    assert report.ok, report.summary()
    assert report.lines == 2


@pytest.mark.parametrize("raise_after_partial", [False, True])
def test_partial_write_is_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raise_after_partial: bool
) -> None:
    """A write that fails half-way (e.g. disk full mid-batch) leaves no partial line behind."""
    real_write = os.write
    calls: list[int] = []

    def half_then_fail(fd: int, data: bytes | memoryview) -> int:
        if len(data) < 100:
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            count = real_write(fd, bytes(data[: len(data) // 2]))
            if not raise_after_partial:
                return count  # a short write; the next call fails
        raise OSError(errno.ENOSPC, "No space left on device")

    with AuditLog(tmp_path) as log:
        log.write([event("before")])
        size = (tmp_path / "audit.log").stat().st_size
        monkeypatch.setattr(audit.handler.os, "write", half_then_fail)
        with pytest.raises(AuditWriteError, match="No space left"):
            log.write([event("lost"), event("lost")])
        monkeypatch.undo()
        assert (tmp_path / "audit.log").stat().st_size == size
        log.write([event("after")])
    report = verify(tmp_path)
    assert report.ok and not report.truncated, report.summary()
    assert report.lines == 2


def test_disabled_logger_is_a_failure_not_a_silent_drop(tmp_path: Path) -> None:
    logger = logging.getLogger("lakegate.audit")
    with AuditLog(tmp_path) as log:
        logger.disabled = True
        try:
            with pytest.raises(AuditWriteError, match="disabled or filtered"):
                log.write([event()])
        finally:
            logger.disabled = False
        log.write([event()])
    assert verify(tmp_path).lines == 1


def test_closed_log_refuses(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.close()
    log.close()  # idempotent
    with pytest.raises(AuditWriteError, match="closed"):
        log.write([event()])


def test_foreign_records_never_reach_the_audit_file(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        logging.getLogger("lakegate.audit").warning("not an audit record")
        log.write([event()])
    assert "not an audit record" not in (tmp_path / "audit.log").read_text()
    assert verify(tmp_path).ok


def test_lock_file_unusable(tmp_path: Path) -> None:
    (tmp_path / "audit.lock").mkdir()
    with pytest.raises(AuditWriteError, match="cannot open audit log"):
        AuditLog(tmp_path)
    shutil.rmtree(tmp_path / "audit.lock")
    AuditLog(tmp_path).close()


def test_mirror_handler_gets_the_exact_lines(tmp_path: Path) -> None:
    """Operators may mirror the audit stream (e.g. to syslog) through standard logging."""
    seen: list[str] = []

    class Mirror(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    mirror = Mirror()
    logger = logging.getLogger("lakegate.audit")
    with AuditLog(tmp_path) as log:
        mirror.setFormatter(audit.handler.AuditFormatter())
        logger.addHandler(mirror)
        try:
            log.write([event("a"), event("b")])
        finally:
            logger.removeHandler(mirror)
    assert seen == [(tmp_path / "audit.log").read_text().rstrip("\n")]
