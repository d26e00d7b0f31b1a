"""The garbage collector's policy for a long-running server (`lakegate serve`, `lakegate
connect`): what start-up loaded is frozen, so a full collection walks only what serving made.

A full (generation 2) collection stops every thread for as long as it takes to walk every
tracked object. After start-up `lakegate serve` holds about 234,000 of them (the modules,
classes and functions of sqlglot, PySpark and the web stack, the catalog, the policies), none
of which will ever be garbage, and its start-up collection took 264 ms (2026-11-27, 2 loaded
cores); planning statements makes enough cyclic garbage (sqlglot trees link each node to its
parent) that a full collection comes every second or so of planning, each a pause every
statement in flight paid (benchmarks/rewrite.py: 100-300 ms).

`gc.freeze()` moves what is alive to a generation the collector never walks. Reference
counting still frees a frozen object nothing refers to; only a frozen cycle that becomes
garbage is never freed, so the freeze is done once, after a collection, before the first
statement, when nothing a cache may later drop is alive yet (a policy set replaced by a
reload, if its objects form cycles, stays: one set, once).

The collector's thresholds stay Python's: raising them makes each collection free larger
batches of garbage at once (gen0 at 50,000: pauses of 165-266 ms, measured the same way).

Pauses are observable in production: `lakegate_gc_pause_seconds` by generation and
`lakegate_gc_frozen_objects` (governance/metrics.py, served at `/metrics`).
"""

from __future__ import annotations

import gc
import threading
import time

from governance.metrics import GC_FROZEN, GC_PAUSE_SECONDS

_installed = False
_lock = threading.Lock()
_started: dict[int, float] = {}


def settle_heap() -> int:
    """Collect once, freeze what is alive (start-up's objects) and start timing the
    collector's pauses; returns the number of objects frozen. Call once per server process,
    after start-up and before the first statement."""
    global _installed
    with _lock:
        if not _installed:
            gc.callbacks.append(_timed)
            _installed = True
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    GC_FROZEN.set(frozen)
    return frozen


def _timed(phase: str, info: dict[str, int]) -> None:
    """A gc callback: each collection's pause, by generation (the collector holds the GIL,
    so start and stop of one collection are never interleaved with another's)."""
    generation = info["generation"]
    if phase == "start":
        _started[generation] = time.perf_counter()
    elif generation in _started:
        GC_PAUSE_SECONDS.labels(str(generation)).observe(
            time.perf_counter() - _started.pop(generation)
        )
