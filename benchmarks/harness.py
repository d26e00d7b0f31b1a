"""The benchmark harness every scenario shares: timing, interleaving, percentiles, machine
facts, JSON, and one rule: a scenario whose measurement raises fails the run (issue 11).

A benchmark that swallows its own errors reports figures nobody can trust (the TPC-DS
per-query breakdown recorded a TypeError on every query for months), so `main` turns any
exception into a loud message and a non-zero exit, and nothing here records error strings.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

FAILED = 2  # exit code of a scenario whose measurement raised


class ScenarioFailed(RuntimeError):
    """A measurement did not produce its figure; the run must not go on as if it had."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 1] (what every report figure uses)."""
    if not values:
        raise ScenarioFailed("percentile of no measurements")
    if not 0 <= q <= 1:
        raise ValueError(f"percentile {q} outside [0, 1]")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50, p99, max and mean of one series."""
    return {
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": max(values),
        "mean": statistics.fmean(values),
        "n": float(len(values)),
    }


def rotations(modes: Sequence[str], rounds: int) -> list[list[str]]:
    """Interleaving: round r runs the modes rotated by r (ABC, BCA, CAB, ABC, ...), so JIT,
    caches and background load hit every mode alike."""
    n = len(modes)
    return [list(modes[r % n :]) + list(modes[: r % n]) for r in range(rounds)]


def timed_ms(fn: Callable[[], T]) -> tuple[float, T]:
    """Milliseconds one call takes, with its result."""
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, platform and load: what the figures depend on."""
    info: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        info["cpu_model"] = platform.processor() or "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    info["load_avg"] = os.getloadavg()
    return info


def versions() -> dict[str, str]:
    """Versions of everything measured (a figure without them cannot be compared)."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("pyspark", "delta-spark", "sqlglot", "duckdb", "pycasbin", "matplotlib"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        out["java"] = (java.stderr or java.stdout).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        out["java"] = "?"
    return out


def parse_ids(text: str | None) -> set[int] | None:
    """Query numbers from "1,3,10-20" (None: all)."""
    if not text:
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip().lstrip("q")
        if "-" in part:
            lo, hi = part.split("-")
            out.update(range(int(lo), int(hi) + 1))
        elif part:
            out.add(int(part))
    return out


def write_json(path: str | Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=1, default=str))


def main(name: str, scenario: Callable[[], int | None]) -> int:
    """Run one scenario; if it raises, say so loudly on stderr and exit FAILED."""
    try:
        rc = scenario()
    except Exception as e:  # every failure of a measurement must fail the run
        traceback.print_exc()
        print(
            f"BENCHMARK FAILED: scenario {name}: {type(e).__name__}: {e}".splitlines()[0],
            file=sys.stderr,
            flush=True,
        )
        return FAILED
    return rc or 0
