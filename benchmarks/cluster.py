"""TPC-DS through the governed session on a loopback standalone cluster vs local mode
(issue 13): the same Delta tables, policies, user and query texts, one interleaved run.

Two worker processes each hold one governed session (a Python process holds one
SparkContext): `local[2]`, and a standalone cluster on 127.0.0.1 (one Master, two Workers
with one core each, from the pyspark wheel: `governance/runtime/local_cluster.py`). This process
alternates each query between them, round by round (L C, C L, ...), and compares answers
(checksums): a governed answer that differs between the engines fails the run. It prints
medians per query, the total cluster/local ratio, and stops every process it started.

On one 2-core machine the cluster cannot be faster: it adds task serialization, executor
round trips and shuffle over loopback to the same two cores. The figure says what running
on a cluster costs governance-wise (nothing beyond Spark's own: the governed text and plan
are the same) and that the layer works unchanged there.

    python benchmarks/cluster.py [--sf 0.1] [--rounds 3] [--queries 3,7,19,42,52,55,96]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import harness  # noqa: E402

DEFAULT_QUERIES = "3,7,13,19,27,34,42,46,52,55,59,68,73,79,89,96,98"
ENGINES = ("local", "cluster")


def worker(args: argparse.Namespace) -> int:
    """One governed session on `--master`; reads query ids on stdin, answers JSON lines."""
    from benchmarks.spark_metrics import checksum
    from benchmarks.tpcds import spark_queries
    from benchmarks.tpcds_data import prepare_data
    from benchmarks.tpcds_delta import setup_lakegate, tables_of
    from benchmarks.tpcds_policies import BENCH_USER
    from benchmarks.tpcds_views import CATALOG, SCHEMA
    from governance.runtime.spark import build_spark

    conf = {
        "spark.driver.memory": "2g",
        "spark.executor.memory": "1g",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.warehouse.dir": str(Path(args.dir) / f"warehouse-{args.name}"),
    }
    spark = build_spark(args.master, conf, app_name=f"lakegate-bench-cluster-{args.name}")
    wanted = harness.parse_ids(args.queries)
    queries = {n: q for n, q in spark_queries() if wanted is None or n in wanted}
    data = Path(args.dir)
    paths, _ = prepare_data(spark, data, args.sf, 8, True, tables_of(list(queries.values())))
    lg = setup_lakegate(spark, data / args.name, paths)
    session = lg.session(BENCH_USER)
    session.sql(f"USE {CATALOG}.{SCHEMA}")
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    _say({"ready": True, "master": args.master, "executors": executors})
    for line in sys.stdin:
        n = int(line)
        t0 = time.perf_counter()
        try:
            rows = session.sql(queries[n]).collect()
        except Exception as e:  # reported to the coordinator, which fails the run
            _say({"q": n, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            continue
        _say({"q": n, "s": time.perf_counter() - t0, "rows": len(rows), "sum": checksum(rows)})
    lg.close()
    spark.stop()
    return 0


def _say(obj: dict[str, Any]) -> None:
    print("@@" + json.dumps(obj), flush=True)


class Engine:
    """A worker process and its pipe."""

    def __init__(self, name: str, master: str, args: argparse.Namespace, log: Path) -> None:
        self.name = name
        cmd = [sys.executable, __file__, "--worker", name, "--master", master]
        cmd += ["--dir", args.dir, "--sf", str(args.sf), "--queries", args.queries]
        self.log = log
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=ROOT,
                start_new_session=True,
            )

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        tail = self.log.read_text()[-3000:]
        raise RuntimeError(f"{self.name} worker exited ({self.proc.wait()}):\n{tail}")

    def run(self, n: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return self.answer()

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", default=DEFAULT_QUERIES, help="query numbers, e.g. 3,7,10-20")
    ap.add_argument("--dir", help="working directory (default: a temporary one, removed)")
    ap.add_argument("--json", metavar="OUT", help="write the figures as JSON to OUT")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.name = args.worker
        return worker(args)
    from governance.runtime.local_cluster import standalone_cluster

    with ExitStack() as stack:
        if args.dir is None:
            args.dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="lakegate-cl-"))
        root = Path(args.dir).resolve()
        (root / "standalone").mkdir(parents=True, exist_ok=True)
        args.dir = str(root)
        t0 = time.perf_counter()
        local = Engine("local", "local[2]", args, root / "local.log")
        stack.callback(local.stop)
        ready = local.answer()  # writes the Delta tables; the cluster worker reuses them
        print(f"local worker ready in {time.perf_counter() - t0:.0f} s: {ready}", flush=True)
        url = stack.enter_context(standalone_cluster(root / "standalone"))
        t0 = time.perf_counter()
        cluster = Engine("cluster", url, args, root / "cluster.log")
        stack.callback(cluster.stop)
        ready = cluster.answer()
        print(f"cluster worker ready in {time.perf_counter() - t0:.0f} s: {ready}", flush=True)
        if ready.get("executors") != 2:
            raise RuntimeError(f"the cluster session has {ready.get('executors')} executors")
        status = _compare({"local": local, "cluster": cluster}, args)
    return status


def _compare(engines: dict[str, Engine], args: argparse.Namespace) -> int:
    ids = sorted(harness.parse_ids(args.queries) or [])
    for n in ids[:2]:  # warm-up, untimed: JIT, Delta log caches, policy SQL
        for e in engines.values():
            e.run(n)
    totals = {name: 0.0 for name in ENGINES}
    failed: list[str] = []
    per_query: list[dict[str, Any]] = []
    print(f"{'query':>5} {'local s':>9} {'cluster s':>9} {'ratio':>6}  rows")
    for n in ids:
        times: dict[str, list[float]] = {name: [] for name in ENGINES}
        sums: dict[str, set[str]] = {name: set() for name in ENGINES}
        rows = 0
        for order in harness.rotations(ENGINES, args.rounds):
            for name in order:
                got = engines[name].run(n)
                if "error" in got:
                    failed.append(f"q{n} {name}: {got['error']}")
                    break
                times[name].append(got["s"])
                sums[name].add(str(got["sum"]))
                rows = got["rows"]
        if not all(times.values()):
            continue
        if sums["local"] != sums["cluster"]:
            failed.append(f"q{n}: answers differ between local and cluster")
        med = {name: statistics.median(times[name]) for name in ENGINES}
        for name in ENGINES:
            totals[name] += med[name]
        ratio = med["cluster"] / med["local"]
        per_query.append({"q": n, **med, "ratio": ratio, "rows": rows})
        print(f"{n:>5} {med['local']:>9.3f} {med['cluster']:>9.3f} {ratio:>6.2f}  {rows}")
    ratio = totals["cluster"] / totals["local"] if totals["local"] else float("nan")
    print(
        f"TOTAL local {totals['local']:.2f} s, cluster {totals['cluster']:.2f} s, "
        f"cluster/local {ratio:.2f} over {len(ids)} queries at sf {args.sf}"
    )
    for f in failed:
        print(f"FAILED {f}", file=sys.stderr)
    if args.json:
        figures = {"sf": args.sf, "rounds": args.rounds, "queries": per_query, "failed": failed}
        figures.update(totals=totals, ratio=ratio)
        harness.write_json(args.json, figures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(harness.main("cluster", main))
