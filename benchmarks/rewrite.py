"""Rewrite latency over the 99 TPC-DS queries: parse, decide, rewrite, generate; no Spark.

Every table carries row filters and masks (benchmarks/tpcds.py). Prints p50/p99/max per
query execution, cold (first plan of each query) and warm, and, interleaved with it in the
same rounds, sqlglot's own parse + generate of the same text: the floor any sqlglot-based
rewrite pays, so the ratio shows what Lakegate adds on top. Also the warm cost of a
repeated statement through the plan cache (governance/planning/cache.py), hit against miss
(a miss is the warm rewrite plus the cache's key), in µs.
Targets: issue 2, p50 under 5 ms and max under 25 ms; issue 14, p50 at most 1.5 ms and at
most 1.3 x sqlglot's parse + generate; issue 31, the per-query median of rewrite / sqlglot
(each query's median over the rounds) at most 1.3, printed MET / NOT MET and in --json
under `targets` as `over_sqlglot_median_issue_31`.

    python benchmarks/rewrite.py [--rounds N] [--json] [--unsettled]

The process is set up as `lakegate serve` and `lakegate connect` set themselves up: catalog
and policies loaded, then `governance.runtime.heap.settle_heap()`, the servers' own start-up
call (one collection, then `gc.freeze()` of what start-up left alive), before the first statement;
`--unsettled` skips it. The collector's pauses over the warm rounds (gc.callbacks: count,
total and longest per generation), the live objects a full collection walks afterwards, the
objects frozen and the peak RSS are printed and in --json under `gc`: counts are load-proof
where the timings are not.

Where the planner's time over sqlglot's floor went (cProfile over the warm loop, 2026-11-23,
share of planner time before the issue 14 work): the identity/construct check walking every
node in Python (13%), resolve_tables' own walk (12%), check_hidden_columns' three walks even
with nothing hidden (7%), the per-character surrogate scan of the text (6%), the
`delta.`path`` text generated again for every read (6%), columns_named's walk (5%), the
mapping-table bookkeeping recomputed twice per read (3%), copies of the aliases of replaced
tables (3%) and a second pass over the tokens for CROSS (1%). Policy SQL was already parsed
once per policy version and view bodies generated once per user and table version. Each is
now a compiled sqlglot walk over only the node kinds that matter, a skip, a cache or a move.

Issue 31 item 3 (2026-11-27): those walks were still one per step, each costing about a
full traversal whatever it looked for (cProfile of the warm loop: the hint walk 2%, the
comma-join walk 2%, constructs 9%, resolve_tables' Python walk 9%, columns_named 5%, the
words check 4%, two passes over the tokens 3%). The planner now walks the parsed tree once
(governance/sql/walk.py) and each step reads its own node kinds from that record; resolve_tables
orders the tables it gets by their paths, so CTE numbering, read order and the first refusal
are unchanged; the generated SQL is byte-identical on the 99 queries. Planner time went to
0.82-0.89 of before (per-query median; old and new interleaved query by query, three runs
on a machine at load 13-19).

Issue 31 item 3, second pass (2026-11-27, py-spy over the warm loop with the collector off,
shares of planner time): sqlglot's parse 26%, its tokenizer 7% and its generator 24% were
the floor; the rest was Lakegate's. sqlglot's own figure includes a deep copy of the tree
(`.sql()` copies by default: about a third of its time) that the planner never makes, so
the ratio compares a copy-free planner with a baseline that copies. Removed, output
byte-identical on the 99 queries and on 74 of 77 edge cases (old and new planners in two
processes; the other three are the fix below):
Spark's four SELECT transforms (QUALIFY, DISTINCT ON, UNNEST, ANY; `any_to_exists` walks
each SELECT's subtree again) run only when the one walk shows one of their node kinds
(governance/sql/sqlgen.py; a quarter of generation), a tokenizer made per statement (now one
per thread, 2%), a dialect looked up and made per generation (1%), pathlib in the Delta
log listing (1.5%), prometheus `labels()` per cache lookup (0.5-1%), the running bracket
depth computed for every statement (now only past 256 openings). Found on the way: the
tokenizer was made without Spark's dialect, so `'a\\nb'` reached Spark as `'anb'` and `1a`
as `1 AS a`; statements are now tokenized as sqlglot's Spark dialect reads them (the only
output change; a test checks escapes against Spark).

What remains above sqlglot (same profile, after): resolve_tables 5% (each table's path to
the root and its sort key), the one walk 4.6% (sqlglot's compiled walk is 85% of it),
govern 4.5% (the construct checks), replacing reads and the columns named 6%, generate's
own work 11% (a Delta identity per table 2.2%, the words check 2%, view bodies from the
cache 1.7%, projections 2%, the verifier's expectations 1.8%, the splice 0.9%), the
catalog generation read 2% and the token checks 2%. Figures (interleaved, main then this
branch, three runs each, `--rounds 5`, load 6-7 on 2 cores): per-query median 1.40, 1.38,
1.37 before; 1.25, 1.22, 1.21 after (over all queries 1.20-1.25 before, 1.04-1.12 after;
the warm max is a full garbage collection, 40-300 ms, landing on whichever step runs).

The warm max (2026-11-27, gc.callbacks): full collections of 100-300 ms, 5 per run, each
walking about 195,000 live objects: 114,000 from imports, 22,000 from set-up (catalog,
policies, the queries) and 48,000 held by the plan cache's 99 entries, about 490 each, because
each cached view kept its table node and a node's parent links (or, for a node the rewrite
replaced, its identifiers reused in the new tree) reach the whole parsed statement: at the
cache's bound of 2048 entries a server held a million such objects (a full collection of about
1.3 s). The cache now keeps a copy of the table node alone (78 objects per entry; 160,000 at
the bound), and the process freezes what start-up left alive (governance/runtime/heap.py); a full
collection then walks about 15,000 live objects. Raising the collector's thresholds was
measured and rejected: at gen0 50,000 each young collection frees a larger batch of sqlglot
garbage at once (165-266 ms pauses).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlglot

from benchmarks import harness
from benchmarks.tpcds import spark_queries, tpcds_tables
from benchmarks.tpcds_policies import BENCH_USER, tpcds_policy_yaml
from catalog.catalog import Catalog
from catalog.store import SqliteStore
from governance.planning.cache import PlanCache, plan_key
from governance.planning.dispatch import Planner
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_text
from governance.rewrite.dynamic_views import PolicySql
from governance.runtime.heap import settle_heap
from governance.sql.resolve import Namespace

TARGET_P50_MS = 5.0
TARGET_MAX_MS = 25.0
TARGET_P50_MS_14 = 1.5  # issue 14
TARGET_OVER_SQLGLOT = 1.3  # issue 14: rewrite / sqlglot parse + generate
TARGET_MEDIAN_OVER_SQLGLOT = 1.3  # issue 31: the per-query median of rewrite / sqlglot


def sqlglot_ms(sql: str) -> float:
    """Milliseconds for sqlglot alone to parse and regenerate the text (Spark dialect)."""
    return harness.timed_ms(lambda: sqlglot.parse_one(sql, read="spark").sql("spark"))[0]


def setup(root: Path) -> tuple[Catalog, PolicyEnforcer]:
    tables = tpcds_tables(str(root / "warehouse"))
    catalog = Catalog(SqliteStore(root / "catalog.db"), root / "warehouse")
    catalog.create_catalog("tpcds")
    catalog.create_schema("tpcds", "sf1")
    for t in tables:
        catalog.register_table(t)
    ps = load_policy_text({"bench.yaml": tpcds_policy_yaml(tables)})
    return catalog, PolicyEnforcer(ps)


def planner_timer(catalog: Catalog, enforcer: PolicyEnforcer) -> Callable[[str], float]:
    """Milliseconds to plan one statement as the bench user (a fresh planner each time,
    as the session makes one per statement)."""
    policy_sql = PolicySql(enforcer)
    ns = Namespace("tpcds", "sf1")

    def plan(sql: str) -> float:
        return harness.timed_ms(
            lambda: Planner(
                catalog=catalog,
                enforcer=enforcer,
                policy_sql=policy_sql,
                user=BENCH_USER,
                namespace=ns,
            ).plan(sql)
        )[0]

    return plan


def cache_timer(catalog: Catalog, enforcer: PolicyEnforcer) -> Callable[[str], float]:
    """Milliseconds for a repeated statement through the plan cache as the session makes
    it: a fresh planner, the key (one catalog generation read) and the plan (a copy on a
    hit). The first call per statement is the miss that fills the cache."""
    policy_sql = PolicySql(enforcer)
    ns = Namespace("tpcds", "sf1")
    cache = PlanCache()

    def plan(sql: str) -> float:
        def once() -> object:
            planner = Planner(
                catalog=catalog,
                enforcer=enforcer,
                policy_sql=policy_sql,
                user=BENCH_USER,
                namespace=ns,
            )
            key = plan_key(
                sql,
                user=BENCH_USER,
                namespace=ns,
                policy=enforcer,
                policy_version="bench",
                generation=catalog.store.generation(),
                temp_views=None,
                derived={},
            )
            return cache.plan(planner, sql, key)

        return harness.timed_ms(once)[0]

    return plan


class Collections:
    """The collector's pauses while it is installed, by generation (gc.callbacks): count,
    total and longest, in wall-clock ms and in the thread's CPU ms (which the machine's load
    does not stretch: on a loaded machine a 5 ms pause can take 90 ms of wall clock)."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
        self._t0 = (0.0, 0.0)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = (time.perf_counter(), time.thread_time())
        else:
            wall, cpu = time.perf_counter() - self._t0[0], time.thread_time() - self._t0[1]
            self.pauses[info["generation"]].append((wall * 1000, cpu * 1000))

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for g, d in self.pauses.items():
            out[f"gen{g}_n"] = len(d)
            out[f"gen{g}_total_ms"] = sum(w for w, _ in d)
            out[f"gen{g}_max_ms"] = max((w for w, _ in d), default=0.0)
            out[f"gen{g}_total_cpu_ms"] = sum(c for _, c in d)
            out[f"gen{g}_max_cpu_ms"] = max((c for _, c in d), default=0.0)
        return out


def run(rounds: int, settle: bool = True) -> dict:
    queries = spark_queries()
    with tempfile.TemporaryDirectory() as tmp:
        catalog, enforcer = setup(Path(tmp))
        # what `lakegate serve` and `lakegate connect` do once started, before serving
        frozen = settle_heap() if settle else 0
        plan = planner_timer(catalog, enforcer)
        cached = cache_timer(catalog, enforcer)
        cold = [plan(sql) for _, sql in queries]
        misses = [cached(sql) for _, sql in queries]
        warm: dict[int, list[float]] = {n: [] for n, _ in queries}
        glot: dict[int, list[float]] = {n: [] for n, _ in queries}
        hits: dict[int, list[float]] = {n: [] for n, _ in queries}
        timers = {"rewrite": (plan, warm), "sqlglot": (sqlglot_ms, glot), "hit": (cached, hits)}
        collections = Collections()
        gc.callbacks.append(collections)
        for r, order in enumerate(harness.rotations(list(timers), rounds)):
            for n, sql in queries:
                for name in order:
                    fn, into = timers[name]
                    into[n].append(fn(sql))
            print(f"  round {r + 1}/{rounds} done", file=sys.stderr)
        gc.callbacks.remove(collections)
        gc.collect()  # live objects only: what every full collection walks
        tracked = len(gc.get_objects())
        medians = {n: statistics.median(v) for n, v in warm.items()}
        glot_medians = {n: statistics.median(v) for n, v in glot.items()}
        all_warm = [x for v in warm.values() for x in v]
        all_glot = [x for v in glot.values() for x in v]
        all_hits = [x for v in hits.values() for x in v]
    ratios = [medians[n] / glot_medians[n] for n in medians]
    return {
        "queries": len(queries),
        "rounds": rounds,
        "cold_p50_ms": harness.percentile(cold, 0.5),
        "cold_max_ms": max(cold),
        "p50_ms": harness.percentile(all_warm, 0.5),
        "p99_ms": harness.percentile(all_warm, 0.99),
        "max_ms": max(all_warm),
        "sqlglot_p50_ms": harness.percentile(all_glot, 0.5),
        "cache_hit_p50_us": harness.percentile(all_hits, 0.5) * 1000,
        "cache_miss_p50_us": harness.percentile(misses, 0.5) * 1000,
        "over_sqlglot": sum(medians.values()) / sum(glot_medians.values()),
        "over_sqlglot_median": statistics.median(ratios),
        "slowest": sorted(medians.items(), key=lambda kv: -kv[1])[:5],
        "settled": settle,
        "gc": {
            **collections.summary(),
            "tracked_after": tracked,
            "frozen": frozen,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        },
    }


def targets(r: dict) -> dict[str, bool]:
    """Each rewrite target, met or not (reported, never asserted as a timed test)."""
    return {
        "p50_and_max_issue_2": r["p50_ms"] < TARGET_P50_MS and r["max_ms"] < TARGET_MAX_MS,
        "p50_issue_14": r["p50_ms"] <= TARGET_P50_MS_14,
        "over_sqlglot": r["over_sqlglot"] <= TARGET_OVER_SQLGLOT,
        "over_sqlglot_median_issue_31": r["over_sqlglot_median"] <= TARGET_MEDIAN_OVER_SQLGLOT,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--unsettled",
        action="store_true",
        help="skip the servers' start-up heap settling (governance/runtime/heap.py): what a "
        "process that does not freeze its start-up objects pays",
    )
    args = ap.parse_args(argv)
    r = run(args.rounds, settle=not args.unsettled)
    r["targets"] = targets(r)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(
        f"TPC-DS rewrite latency ({r['queries']} queries, {r['rounds']} warm rounds; "
        "parse + decide + rewrite + generate, no Spark)"
    )
    print(f"  warm  p50 {r['p50_ms']:.2f} ms   p99 {r['p99_ms']:.2f} ms   max {r['max_ms']:.2f} ms")
    print(
        f"  cold  p50 {r['cold_p50_ms']:.2f} ms   max {r['cold_max_ms']:.2f} ms "
        "(first plan of each query: policy SQL not yet cached)"
    )
    print("  slowest (median ms): " + ", ".join(f"q{n} {ms:.1f}" for n, ms in r["slowest"]))
    print(
        f"  sqlglot parse + generate alone: p50 {r['sqlglot_p50_ms']:.2f} ms; rewrite / sqlglot "
        f"{r['over_sqlglot']:.2f} over all queries (median per query "
        f"{r['over_sqlglot_median']:.2f})"
    )
    print(
        f"  repeated statement through the plan cache: hit p50 {r['cache_hit_p50_us']:.0f} us, "
        f"miss p50 {r['cache_miss_p50_us']:.0f} us (plan + key; warm, after the cold pass)"
    )
    g = r["gc"]
    print(
        f"  collector over the warm rounds: full (gen 2) {g['gen2_n']:.0f} collections, "
        f"{g['gen2_total_ms']:.0f} ms, longest {g['gen2_max_ms']:.1f} ms (CPU "
        f"{g['gen2_total_cpu_ms']:.0f} ms, longest {g['gen2_max_cpu_ms']:.1f} ms); gen 1 "
        f"{g['gen1_n']:.0f}, longest {g['gen1_max_ms']:.1f} ms; gen 0 {g['gen0_n']:.0f}, longest "
        f"{g['gen0_max_ms']:.1f} ms; {g['tracked_after']} live objects walked, "
        f"{g['frozen']} frozen at start-up "
        f"({'settled as a server' if r['settled'] else 'unsettled'}); "
        f"peak RSS {g['peak_rss_mb']:.0f} MB"
    )
    t = r["targets"]
    for ok, what in (
        (t["p50_and_max_issue_2"], f"p50 < {TARGET_P50_MS} ms and max < {TARGET_MAX_MS} ms"),
        (t["p50_issue_14"], f"p50 <= {TARGET_P50_MS_14} ms"),
        (t["over_sqlglot"], f"<= {TARGET_OVER_SQLGLOT} x sqlglot"),
    ):
        print(f"  target {what}: {'MET' if ok else 'NOT MET'}")
    print(
        f"  target issue 31, per-query median of rewrite / sqlglot "
        f"<= {TARGET_MEDIAN_OVER_SQLGLOT}: {r['over_sqlglot_median']:.2f} "
        f"(over all queries {r['over_sqlglot']:.2f}; rewrite p50 {r['p50_ms']:.2f} ms, "
        f"sqlglot p50 {r['sqlglot_p50_ms']:.2f} ms): "
        f"{'MET' if t['over_sqlglot_median_issue_31'] else 'NOT MET'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(harness.main("rewrite", main))
