"""The analyst's side of benchmarks/connect.py: stock Spark Connect clients in their own
process, timing the same queries through the gateway and on plain Spark Connect.

Run by connect.py as a subprocess (the spec as JSON on stdin, the figures as JSON on
stdout): an analyst's client never shares a Python interpreter (and its GIL) with the
gateway, so neither may the benchmark's, or the client's Arrow decoding would be charged
to the gateway's threads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness


def first_row(session: Any, sql: str) -> Any:
    """The first row as it streams in; the iterator is closed at once (releasing the
    operation on the server) rather than at interpreter exit."""
    rows = session.sql(sql).toLocalIterator()
    try:
        return next(rows)
    finally:
        rows.close()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Every query of `spec` in both modes, interleaved (one rotation per round), after one
    untimed run of each; each query's wall time to its last row (`collect`) and the time
    to the first row of the small query."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    modes = list(spec["urls"])  # gateway, plain (and whatever else a probe compares)
    sessions = {m: RemoteSession.builder.remote(url).create() for m, url in spec["urls"].items()}
    try:
        for name, path in spec.get("plain_views", {}).items():
            sessions["plain"].read.format("delta").load(path).createOrReplaceTempView(name)
        queries: dict[str, dict[str, str]] = spec["queries"]
        small: dict[str, str] = spec["first_row"]
        times: dict[str, dict[str, list[float]]] = {q: {m: [] for m in modes} for q in queries}
        first: dict[str, list[float]] = {m: [] for m in modes}
        rows: dict[str, dict[str, int]] = {q: {} for q in queries}
        answers: dict[str, dict[str, list[str]]] = {q: {} for q in queries}
        for mode in modes:  # warm-up: JIT, plan caches, Delta logs, first session set-up
            first_row(sessions[mode], small[mode])
            for q, texts in queries.items():
                out = sessions[mode].sql(texts[mode]).collect()
                rows[q][mode] = len(out)
                answers[q][mode] = sorted(repr(tuple(r)) for r in out)
        for order in harness.rotations(modes, spec["rounds"]):
            for mode in order:
                s = sessions[mode]
                for q, texts in queries.items():
                    ms, out = harness.timed_ms(lambda s=s, t=texts[mode]: s.sql(t).collect())
                    if len(out) != rows[q][mode]:
                        raise harness.ScenarioFailed(f"{mode} {q}: the row count changed")
                    times[q][mode].append(ms)
                ms, _ = harness.timed_ms(lambda s=s, t=small[mode]: first_row(s, t))
                first[mode].append(ms)
    finally:
        for s in sessions.values():
            s.stop()
    return {
        "query": {q: {m: harness.summary(v) for m, v in t.items()} for q, t in times.items()},
        "first_row": {m: harness.summary(v) for m, v in first.items()},
        "rows": rows,
        # the floor writes the gateway's policies in by hand: its answer must be the same
        "floor_same_answer": {
            q: a["floor"] == a["gateway"] for q, a in answers.items() if "floor" in a
        },
    }


def main() -> int:
    spec = json.loads(sys.stdin.read())
    return harness.main("connect client", lambda: print(json.dumps(run(spec))))


if __name__ == "__main__":
    sys.exit(main())
