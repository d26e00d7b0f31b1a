"""Governed write throughput with parallel writers (issue 39): `--writers` users each append
to a table of their own through one embedded Lakegate (one process, one SparkSession), for
`--seconds`, in two modes run alternately (ABAB, `--rounds`):

- `tagged`: as Lakegate runs writes, each command's commit tag in a clone of the session
  (governance/verify/guard.py `commands_with`);
- `one-at-a-time`: the same, with the process-wide lock the tag used to need put back around
  each write (governance/execute/run.py before issue 39's fix), for the before figure.

Prints writes/s and p50/p99 per mode, and the cost of the clone alone. Every commit's tag is
checked against the statement that made it (a wrong or missing tag fails the run).

    python benchmarks/write_concurrency.py [--writers 4] [--seconds 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness

USERS = ("w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7")


def _policies(n: int) -> str:
    grants = "\n".join(
        f'  - {{id: {u}-all, principals: [{u}], privileges: [select, modify], on: "b.s.t{i}"}}'
        for i, u in enumerate(USERS[:n])
    )
    return (
        textwrap.dedent(
            """
        groups:
          admins: [admin]
        grants:
          - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
        """
        )
        + grants
        + "\n"
    )


def _tags(location: str) -> list[str | None]:
    where = Path(location.removeprefix("file:")) / "_delta_log"
    out = []
    for log in sorted(where.glob("*.json"), key=lambda p: int(p.stem)):
        for line in log.read_text().splitlines():
            if '"commitInfo"' in line:
                out.append(json.loads(line)["commitInfo"].get("userMetadata"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    n = min(args.writers, len(USERS))

    import governance.session.governed as governed
    from audit.landing import TAG_PREFIX
    from governance.runtime.spark import build_spark
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    spark = build_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    root = Path(tempfile.mkdtemp(prefix="lakegate-writes-"))
    (root / "src").mkdir()
    (root / "src" / "policies.yaml").write_text(_policies(n))
    lg = Lakegate.open(write_config(root / "lake", policies=root / "src"), spark=spark)
    admin = lg.session("admin")
    for stmt in ["CREATE CATALOG b", "CREATE SCHEMA b.s"]:
        admin.sql(stmt)
    for i in range(n):
        admin.sql(f"CREATE TABLE b.s.t{i} (id INT, who STRING)")
    tagged = governed.tagged_commits
    lock = threading.Lock()

    @contextlib.contextmanager
    def one_at_a_time(query_id: str) -> Iterator[None]:
        with lock, tagged(query_id):
            yield

    def run(mode: str) -> dict[str, Any]:
        governed.tagged_commits = tagged if mode == "tagged" else one_at_a_time
        stop = time.time() + args.seconds
        times: list[float] = []
        ids: dict[int, list[str]] = {i: [] for i in range(n)}
        before = {i: len(_tags(lg.catalog.table("b", "s", f"t{i}").location)) for i in range(n)}
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            s = lg.session(USERS[i])
            k = 0
            try:
                while time.time() < stop:
                    k += 1
                    text = f"INSERT INTO b.s.t{i} VALUES ({k}, '{USERS[i]}')"
                    ms, _ = harness.timed_ms(lambda t=text: s.sql(t))
                    times.append(ms)
                    ids[i].append(s.last_query_id)
            except BaseException as e:
                errors.append(e)

        started = time.perf_counter()
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        governed.tagged_commits = tagged
        if errors:
            raise harness.ScenarioFailed(f"a writer failed: {errors[0]!r}")
        for i in range(n):
            got = _tags(lg.catalog.table("b", "s", f"t{i}").location)[before[i] :]
            if got != [f"{TAG_PREFIX}{q}" for q in ids[i]]:
                raise harness.ScenarioFailed(f"table t{i}: a commit lacks its own query's tag")
        return {"writes": len(times), "wall_s": wall, **harness.summary(times)}

    run("tagged")  # warm: JIT, Delta caches
    js = spark._jsparkSession
    clone_ms = [
        harness.timed_ms(lambda: js.cloneSession().conf().set("k", "v"))[0] for _ in range(50)
    ]
    results: dict[str, list[dict[str, Any]]] = {"tagged": [], "one-at-a-time": []}
    for rotation in harness.rotations(["one-at-a-time", "tagged"], args.rounds):
        for mode in rotation:
            results[mode].append(run(mode))
            print(f"  {mode}: {results[mode][-1]['writes']} writes", flush=True)
    info = harness.machine_info()
    print(
        f"governed INSERTs, {n} writers in parallel, one process, local[2], "
        f"{args.seconds:.0f} s per run, {args.rounds} round(s) ABAB; "
        f"load average at the end {info['load_avg'][0]:.1f} on {info['cpus']} cores"
    )
    for mode, runs in results.items():
        writes = sum(r["writes"] for r in runs)
        wall = sum(r["wall_s"] for r in runs)
        p50 = sorted(r["p50"] for r in runs)[len(runs) // 2]
        p99 = max(r["p99"] for r in runs)
        print(f"{mode:>14}: {writes / wall:.2f} writes/s ({writes} in {wall:.0f} s), "
              f"p50 {p50:.0f} ms, p99 {p99:.0f} ms")  # fmt: skip
    print(f"session clone + one setting: p50 {harness.percentile(clone_ms, 0.5):.1f} ms")
    lg.close()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(harness.main("write_concurrency", main))
