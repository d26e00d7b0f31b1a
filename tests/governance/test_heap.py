"""A server's heap after start-up (governance/runtime/heap.py): what start-up left alive is frozen
out of every collection, and the collector's pauses are timed into `/metrics`.

Each rule runs in a process of its own: a freeze cannot be undone for the objects it froze,
and this test process must not keep its fixtures' objects forever.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_settling_freezes_what_start_up_left_alive_and_nothing_made_after() -> None:
    out = _run(
        "import gc\n"
        "from governance.runtime.heap import settle_heap\n"
        "loaded = [[n] for n in range(5000)]\n"
        "frozen = settle_heap()\n"
        "later = [[n] for n in range(10)]\n"
        "walked = {id(o) for o in gc.get_objects()}\n"
        "print(frozen == gc.get_freeze_count(), frozen >= 5000,\n"
        "      any(id(o) in walked for o in loaded), all(id(o) in walked for o in later))\n"
    )
    assert out == "True True False True"


def test_settling_keeps_pythons_collection_thresholds() -> None:
    """Larger thresholds free larger batches of garbage per collection: longer pauses."""
    out = _run(
        "import gc\n"
        "before = gc.get_threshold()\n"
        "from governance.runtime.heap import settle_heap\n"
        "settle_heap()\n"
        "print(gc.get_threshold() == before == (700, 10, 10))\n"
    )
    assert out == "True"


def test_a_settled_process_times_each_full_collection_into_metrics() -> None:
    out = _run(
        "import gc\n"
        "from prometheus_client import REGISTRY\n"
        "from governance.runtime.heap import settle_heap\n"
        "frozen = settle_heap()\n"
        "settle_heap()\n"  # a second call adds no second timer
        "full2 = {'generation': '2'}\n"
        "full = REGISTRY.get_sample_value('lakegate_gc_pause_seconds_count', full2)\n"
        "gc.collect()\n"
        "gc.collect()\n"
        "after = REGISTRY.get_sample_value('lakegate_gc_pause_seconds_count', full2)\n"
        "shown = REGISTRY.get_sample_value('lakegate_gc_frozen_objects')\n"
        "print(after - full, shown == gc.get_freeze_count() >= frozen)\n"
    )
    assert out == "2.0 True"
