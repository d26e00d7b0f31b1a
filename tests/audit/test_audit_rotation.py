"""Size rotation keeps a bounded number of files and never breaks a chain; writer ids."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog, AuditWriteError
from audit.format import parse_complete
from audit.handler import log_files
from audit.verify import verify


def event(i: int) -> AuditEvent:
    return AuditEvent(allowed=True, user=f"user{i % 7}", cmd="select", src=f"main.s.t{i % 11}")


def chain_of(directory: Path) -> list[tuple[str, int]]:
    """(writer, seq) of every line, oldest file first."""
    out = []
    for path in log_files(directory):
        for line in path.read_text("ascii").splitlines():
            parsed = parse_complete(line)
            assert parsed is not None
            out.append((parsed[1].writer, parsed[1].seq))
    return out


def test_rotation_bounds_files_and_chain_spans_them(tmp_path: Path) -> None:
    with AuditLog(tmp_path, max_bytes=4096, backup_count=3) as log:
        for i in range(150):
            log.write([event(i), event(i + 1)])
        writer = log.writer_id
    files = log_files(tmp_path)
    assert [f.name for f in files] == ["audit.log.3", "audit.log.2", "audit.log.1", "audit.log"]
    assert all(f.stat().st_size <= 4096 for f in files)
    seqs = [seq for _, seq in chain_of(tmp_path)]
    assert seqs == list(range(seqs[0], 301)), "consecutive across file boundaries"
    report = verify(tmp_path)
    assert report.ok, report.summary()
    assert [(a.writer, a.file, a.line) for a in report.anchors] == [(writer, "audit.log.3", 1)]
    assert report.writers[writer].last_seq == 300


def test_batch_larger_than_max_bytes_gets_its_own_file(tmp_path: Path) -> None:
    with AuditLog(tmp_path, max_bytes=500, backup_count=10) as log:
        for i in range(4):
            log.write([event(i), event(i)])
    assert [len(p.read_text().splitlines()) for p in log_files(tmp_path)] == [2, 2, 2, 2]
    assert verify(tmp_path).ok


def test_no_rotation_when_max_bytes_is_zero(tmp_path: Path) -> None:
    with AuditLog(tmp_path, max_bytes=0, backup_count=0) as log:
        for i in range(50):
            log.write([event(i)])
    assert [p.name for p in log_files(tmp_path)] == ["audit.log"]


def test_rotation_requires_a_backup(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="backup_count"):
        AuditLog(tmp_path, max_bytes=100, backup_count=0)


def test_explicit_writer_id_resumes_its_chain(tmp_path: Path) -> None:
    with AuditLog(tmp_path, max_bytes=3000, backup_count=20, writer_id="rest-server") as log:
        for i in range(10):
            log.write([event(i)])
    with AuditLog(tmp_path, writer_id="other") as other:
        other.write([event(0)])
    with AuditLog(tmp_path, max_bytes=3000, backup_count=20, writer_id="rest-server") as log:
        log.write([event(99)])
    chain = [seq for writer, seq in chain_of(tmp_path) if writer == "rest-server"]
    assert chain == list(range(1, 12))
    assert verify(tmp_path).ok


def test_explicit_writer_id_is_exclusive(tmp_path: Path) -> None:
    with (
        AuditLog(tmp_path, writer_id="svc"),
        pytest.raises(AuditWriteError, match="already in use"),
    ):
        AuditLog(tmp_path, writer_id="svc")
    AuditLog(tmp_path, writer_id="svc").close()  # free again once closed


def _write_in_child(log: AuditLog, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        log.write([event(1)])
        queue.put(("ok", log.writer_id))
    except AuditWriteError as exc:
        queue.put(("error", str(exc)))


@pytest.mark.parametrize("explicit", [False, True])
def test_forked_child_never_continues_the_parents_chain(tmp_path: Path, explicit: bool) -> None:
    log = AuditLog(tmp_path, writer_id="parent" if explicit else None)
    log.write([event(0)])
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_write_in_child, args=(log, queue))
    child.start()
    outcome, detail = queue.get(timeout=30)
    child.join(30)
    log.write([event(2)])
    log.close()
    if explicit:
        assert outcome == "error" and "forked" in detail
    else:
        assert outcome == "ok" and detail != log.writer_id and f":{child.pid}:" in detail
    report = verify(tmp_path)
    assert report.ok, report.summary()
    assert report.writers[log.writer_id].last_seq == 2
    assert os.getpid() != child.pid
