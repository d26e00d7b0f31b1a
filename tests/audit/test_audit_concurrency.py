"""Many writers, one directory: no interleaving, no loss, every chain intact; hard kills."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from audit.format import parse_complete
from audit.handler import log_files
from audit.verify import verify

REPO = Path(__file__).resolve().parents[2]
KEEP_ALL = 10_000  # backup_count large enough that rotation deletes nothing in these tests


def logged_event_ids(directory: Path) -> list[str]:
    ids = []
    for path in log_files(directory):
        for line in path.read_bytes().decode("ascii").split("\n"):
            parsed = parse_complete(line)
            if parsed is not None:
                ids.append(parsed[0]["eventId"])
    return ids


def line_count(directory: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in log_files(directory))


def batch(worker: int, i: int) -> list[AuditEvent]:
    size = 1 + (worker + i) % 3  # statements touching 1..3 tables
    query = f"q-{worker}-{i}"
    return [
        AuditEvent(
            allowed=(i % 4 != 0),
            user=f"user{worker}",
            cmd="select",
            src=f"main.s.t{k}",
            query_id=query,
            reason="tab\there, newline\nthere, é",
        )
        for k in range(size)
    ]


def test_threads_with_shared_and_own_writers(tmp_path: Path) -> None:
    shared = AuditLog(tmp_path, max_bytes=48 * 1024, backup_count=KEEP_ALL)
    owned = [AuditLog(tmp_path, max_bytes=48 * 1024, backup_count=KEEP_ALL) for _ in range(3)]
    logs = [shared] * 5 + owned
    written: list[list[str]] = [[] for _ in logs]
    start = threading.Barrier(len(logs))

    def run(worker: int) -> None:
        start.wait()
        for i in range(150):
            events = batch(worker, i)
            logs[worker].write(events)
            written[worker].extend(e.event_id for e in events if e.event_id)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(len(logs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for log in {id(log): log for log in logs}.values():
        log.close()

    expected = sorted(i for ids in written for i in ids)
    assert line_count(tmp_path) == len(expected)
    assert sorted(logged_event_ids(tmp_path)) == expected
    report = verify(tmp_path)
    assert report.ok and not report.truncated and not report.anchors, report.summary()
    assert len(report.writers) == 4
    assert len(log_files(tmp_path)) > 5, "rotation happened while threads raced"


def _process_worker(directory: str, worker: int, batches: int) -> None:
    with AuditLog(directory, max_bytes=32 * 1024, backup_count=KEEP_ALL) as log:
        for i in range(batches):
            log.write(batch(worker, i))


def test_processes_rotating_one_directory(tmp_path: Path) -> None:
    workers, batches = 4, 200
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(target=_process_worker, args=(str(tmp_path), w, batches))
        for w in range(workers)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    expected = sum(len(batch(w, i)) for w in range(workers) for i in range(batches))
    assert line_count(tmp_path) == expected
    assert len(set(logged_event_ids(tmp_path))) == expected
    report = verify(tmp_path)
    assert report.ok and not report.truncated and not report.anchors, report.summary()
    assert sorted(s.last_seq for s in report.writers.values()) == sorted(
        sum(len(batch(w, i)) for i in range(batches)) for w in range(workers)
    )
    assert len(log_files(tmp_path)) > 10


KILLABLE_WRITER = textwrap.dedent(
    """
    import os, sys
    from audit import AuditEvent, AuditLog
    directory, acks, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ack = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    log = AuditLog(directory, max_bytes=64 * 1024, backup_count=10_000)
    print("ready", flush=True)
    i = 0
    while True:
        events = [
            AuditEvent(allowed=True, user=f"u{worker}", cmd="select", src=f"main.s.t{k}",
                       reason="x" * (k * 300))
            for k in range(1 + i % 3)
        ]
        log.write(events)  # returned: these events are acknowledged to the caller
        os.write(ack, ("".join(e.event_id + "\\n" for e in events)).encode())
        i += 1
    """
)


def test_hard_kill_mid_load_loses_only_unacknowledged_events(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    acks = tmp_path / "acks"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", KILLABLE_WRITER, str(directory), str(acks), str(w)],
            stdout=subprocess.PIPE,
            env=env,
        )
        for w in range(3)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(0.4)
    procs[0].send_signal(signal.SIGKILL)  # the others keep writing after this one died
    time.sleep(0.3)
    for proc in procs[1:]:
        proc.send_signal(signal.SIGKILL)
    for proc in procs:
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL

    report = verify(directory)
    assert report.ok, report.summary()
    assert len(report.truncated) <= len(procs)
    assert all("killed" in str(t) for t in report.truncated)
    acknowledged = set(acks.read_text().split())
    logged = set(logged_event_ids(directory))
    assert acknowledged, "the writers made progress before being killed"
    assert acknowledged <= logged, "an acknowledged event is missing from the log"
    assert len(logged) - len(acknowledged) <= len(procs) * 3, "at most the in-flight batches"

    # A new writer after the crash seals any torn tail and the log still verifies.
    with AuditLog(directory, max_bytes=64 * 1024, backup_count=10_000) as log:
        log.write([AuditEvent(allowed=True, user="after", cmd="show")])
    report = verify(directory)
    assert report.ok, report.summary()
    assert report.writers[log.writer_id].lines == 1
