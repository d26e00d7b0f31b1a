"""Fairness under load (issue 39 item 3), run by benchmarks/load.py in its own process: one
user's short lookup, first on an idle server, then while another user keeps `count` heavy
queries submitted at once (each in its own session and thread, resubmitted as soon as it
ends or is refused as busy; that user in a process of its own), timed the same way;
figures as JSON on stdout. load.py runs it through the gateway and on plain Spark Connect
(no limits there), so what Spark's own scheduling does to the lookup is told apart from
what the gateway does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness
from benchmarks.load_client import SQL, Recorder, session

# `rows` generated per order row: at 3,000,000 seconds of one core per query on the demo's 8
# orders rows (about 2-3 s unloaded), run as 2 tasks (the table's files); fewer rows, shorter
# tasks: Spark never preempts a running task, so the lookup's wait follows their length.
HEAVY = "SELECT sum(x % 7) AS s FROM {orders} LATERAL VIEW explode(sequence(1, {rows})) t AS x"


def lookups(s: Any, names: dict[str, str], until: float) -> list[float]:
    out, k = [], 0
    while time.time() < until:
        k += 1
        text = SQL["lookup"].format(**names, k=k % 8 + 1)
        ms, _ = harness.timed_ms(lambda t=text: s.sql(t).collect())
        out.append(ms)
        time.sleep(0.05)
    return out


def opened(spec: dict[str, Any]) -> Any:
    """A session of the spec's user; on the plain side, with its temp views."""
    s = session(spec["url"], Recorder())
    for view, path in spec.get("views", {}).items():
        s.read.format("delta").load(path).createOrReplaceTempView(view)
    return s


def heavy_user(spec: dict[str, Any]) -> int:
    """The heavy user's process: `count` sessions, each resubmitting the heavy query as
    soon as it ends or is refused as busy, until a line arrives on stdin. Its own process,
    as the light user's is: the busy refusals' client-side handling (64 threads raising
    pyspark errors) would otherwise slow the timed lookups in the timing process itself."""
    heavy = spec["heavy"]
    text = HEAVY.format(**heavy["names"], rows=int(spec["rows"]))
    sessions = [opened(heavy) for _ in range(spec["count"])]
    alone = []  # the heavy query on the otherwise idle server: its tasks' length, about
    for _ in range(3):
        ms, _ = harness.timed_ms(lambda: sessions[0].sql(text).collect())
        alone.append(ms)
    stop = threading.Event()
    counts = {"done": 0, "busy": 0, "failed": 0}
    lock = threading.Lock()

    def hammer(s: Any) -> None:
        while not stop.is_set():
            try:
                s.sql(text).collect()
                kind = "done"
            except Exception as e:  # busy refusals are the point; others are counted
                kind = "busy" if "busy:" in str(e) else "failed"
                if kind == "busy":
                    time.sleep(0.2)
            with lock:
                counts[kind] += 1

    workers = [threading.Thread(target=hammer, args=(s,), daemon=True) for s in sessions]
    for w in workers:
        w.start()
    print(json.dumps({"alone": alone}), flush=True)
    sys.stdin.readline()
    stop.set()
    for s in sessions:
        s.interruptAll()
    # a stock Spark 4 client may be waiting out a busy answer's retry delay (backing off
    # up to a minute): its thread is a daemon and is not waited for past this
    deadline = time.time() + 20
    for w in workers:
        w.join(timeout=max(0.0, deadline - time.time()))
    print(json.dumps({"heavy": counts}), flush=True)
    return 0


def main() -> int:
    if sys.argv[1] == "--heavy":
        return heavy_user(json.loads(sys.argv[2]))
    spec = json.loads(sys.argv[1])
    light = spec["light"]
    seconds = spec["seconds"]
    ls = opened(light)
    lookups(ls, light["names"], time.time() + 5)  # warm
    idle = lookups(ls, light["names"], time.time() + seconds / 2)
    heavy = subprocess.Popen(
        [sys.executable, __file__, "--heavy", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert heavy.stdin is not None and heavy.stdout is not None
    started = heavy.stdout.readline()
    if not started:
        raise SystemExit(f"the heavy user's process ended first ({heavy.wait()})")
    alone = json.loads(started)["alone"]
    time.sleep(5)  # the heavy user's queries are running and queued
    loaded = lookups(ls, light["names"], time.time() + seconds)
    heavy.stdin.write("stop\n")
    heavy.stdin.flush()
    counts = json.loads(heavy.stdout.readline())["heavy"]
    heavy.wait(timeout=180)
    print(
        json.dumps(
            {
                "count": spec["count"],
                "rows": int(spec["rows"]),
                "heavy_alone": harness.summary(alone),
                "idle": harness.summary(idle),
                "loaded": harness.summary(loaded),
                "heavy": counts,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
