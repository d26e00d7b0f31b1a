"""Audit writer throughput and per-statement latency.

Run from the repository root:  ``.venv/bin/python benchmarks/audit.py [--seconds 2] [--fsync]``

Each statement is one ``AuditLog.write`` of one batch (one line per table touched) that returns
only after the batch is flushed to the OS. Reports lines/s for one writer and for 2, 4 and 8
writers as threads (one process) and as processes, plus the latency ``write`` adds to a
statement (p50/p99 in µs). Targets: >= 20,000 lines/s for one process, < 1 ms per statement.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

# This file is named audit.py: make sure ``import audit`` finds the package, not this script.
_REPO = str(Path(__file__).resolve().parents[1])
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = _REPO
elif _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from audit import AuditEvent, AuditLog, statement_hash  # noqa: E402
from benchmarks import harness  # noqa: E402

STATEMENT_HASH = statement_hash("SELECT id, region, email FROM main.sales.orders")


def statement(i: int, tables: int) -> list[AuditEvent]:
    """One governed statement's events, shaped like real ones (lists, masks, policies)."""
    return [
        AuditEvent(
            allowed=i % 10 != 0,
            user=f"user{i % 50}",
            auth="TOKEN",
            cmd="select",
            src=f"main.sales.table{(i + t) % 20}",
            succeeded=True,
            query_id=f"q{i}",
            stmt_hash=STATEMENT_HASH,
            columns=("id", "region", "email"),
            masked=(("email", "hash"),),
            row_filters=("emea-only",),
            policies=("analysts-read", "emea-only", "hide-pii"),
            reason=None if i % 10 else "no select on main.sales.customers",
            duration_ms=812,
        )
        for t in range(tables)
    ]


def run_writer(
    directory: str, seconds: float, tables: int, fsync: bool, max_bytes: int
) -> tuple[int, float, list[int]]:
    """Write statements for ``seconds``: (lines, elapsed s, per-write latencies in ns)."""
    lines, elapsed, latencies, _ = run_writer_cpu(directory, seconds, tables, fsync, max_bytes)
    return lines, elapsed, latencies


def run_writer_cpu(
    directory: str, seconds: float, tables: int, fsync: bool, max_bytes: int
) -> tuple[int, float, list[int], float]:
    """As :func:`run_writer`, plus the CPU seconds this thread used (load-independent)."""
    latencies: list[int] = []
    lines = 0
    with AuditLog(directory, max_bytes=max_bytes, backup_count=1000, fsync=fsync) as log:
        cpu = time.thread_time()
        start = time.perf_counter()
        deadline = start + seconds
        i = 0
        while time.perf_counter() < deadline:
            events = statement(i, tables)
            before = time.perf_counter_ns()
            log.write(events)
            latencies.append(time.perf_counter_ns() - before)
            lines += len(events)
            i += 1
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu
    return lines, elapsed, latencies, cpu


def _process_main(args: tuple[str, float, int, bool, int], queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    lines, elapsed, latencies = run_writer(*args)
    latencies.sort()
    queue.put((lines, elapsed, latencies[:: max(1, len(latencies) // 20000)]))


def report(label: str, lines: int, wall: float, latencies: list[int]) -> None:
    p50, p99 = (harness.percentile(latencies, q) / 1000 for q in (0.5, 0.99))
    print(
        f"{label:<28} {lines / wall:>12,.0f} lines/s   "
        f"p50 {p50:>8.1f} µs   p99 {p99:>8.1f} µs"
        f"   mean {statistics.fmean(latencies) / 1000:>7.1f} µs"
    )


def bench_threads(root: Path, writers: int, args: argparse.Namespace, tables: int) -> None:
    directory = tempfile.mkdtemp(dir=root)
    results: list[tuple[int, float, list[int]]] = []
    lock = threading.Lock()

    def work() -> None:
        outcome = run_writer(directory, args.seconds, tables, args.fsync, args.max_bytes)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=work) for _ in range(writers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    report(
        f"{writers} writer threads",
        sum(r[0] for r in results),
        wall,
        [x for r in results for x in r[2]],
    )


def bench_processes(root: Path, writers: int, args: argparse.Namespace, tables: int) -> None:
    directory = tempfile.mkdtemp(dir=root)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    spec = (directory, args.seconds, tables, args.fsync, args.max_bytes)
    procs = [context.Process(target=_process_main, args=(spec, queue)) for _ in range(writers)]
    for proc in procs:
        proc.start()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    report(
        f"{writers} writer processes",
        sum(r[0] for r in results),
        max(r[1] for r in results),  # the writers' own loops: process start-up not counted
        [x for r in results for x in r[2]],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--fsync", action="store_true", help="fsync every batch")
    parser.add_argument("--max-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--dir", help="where to write (default: a temporary directory)")
    parser.add_argument("--verify", action="store_true", help="also time audit verify")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"audit benchmark: {args.seconds}s per run, fsync={args.fsync}, dir={root}")
        print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for tables in (1, 3):
            directory = tempfile.mkdtemp(dir=root)
            lines, elapsed, latencies, cpu = run_writer_cpu(
                directory, args.seconds, tables, args.fsync, args.max_bytes
            )
            report(f"1 writer, {tables} line(s)/stmt", lines, elapsed, latencies)
            print(
                f"  per CPU-second of the writer: {lines / cpu:,.0f} lines/s "
                f"({cpu / max(1, len(latencies)) * 1e6:.1f} µs CPU per statement, "
                "event construction included)"
            )
            if args.verify and tables == 1:
                from audit.verify import verify

                start = time.perf_counter()
                result = verify(directory)
                took = time.perf_counter() - start
                print(f"  verify: {result.lines:,} lines in {took:.2f}s, ok={result.ok}")
        for writers in (2, 4, 8):
            bench_threads(root, writers, args, tables=1)
        for writers in (2, 4, 8):
            bench_processes(root, writers, args, tables=1)
    return 0


if __name__ == "__main__":
    sys.exit(harness.main("audit", main))
