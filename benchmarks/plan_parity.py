"""Plan parity (issue 31): does the governed query (C) plan like the hand-written floor (A')?

C/A' is the governance layer's cost. Beyond planning, verification and audit, the layer could
cost at run time only if the plan Spark makes of the rewritten text differs from the plan of
the floor's text: an extra Project or view boundary that blocks a rule, a filter not pushed,
another join order, a lost subquery or exchange reuse, masks computed earlier or more often,
another number of scans. This compares, per TPC-DS query, C's optimized logical plan and
physical plan (made through the governed session exactly as tpcds_delta.py's C makes them:
`session.sql` as user `bench` after `USE tpcds.sf1`) with A''s (`spark.sql` over the floor
views), with expression ids, view and pin names and file paths normalised away, and reports
the queries whose plans differ: operator counts by kind, scans, exchanges, subqueries, reused
exchanges and subqueries, and the first differing lines.

Physical plans are AQE's initial plans (nothing runs); `--execute` also runs each query once
per side and compares AQE's final plans. A query that fails on either side fails the run.

    python benchmarks/plan_parity.py --data DIR/delta [--queries 44,61] [--execute]
                                     [--time-rounds 3] [--json OUT] [--diff-lines 12]

`--data` holds the Delta tables tpcds_delta.py wrote (read only; the Lakegate catalog,
policies and B's membership table go to a temporary directory). `--time-rounds N` times
the selected queries, C and A' interleaved (C's plan cache cleared before each C run, as in
tpcds_delta.py), and prints medians and C/A'.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.tpcds import spark_queries
from benchmarks.tpcds_delta import setup_lakegate, tables_of
from benchmarks.tpcds_policies import BENCH_USER
from benchmarks.tpcds_views import CATALOG, FLOOR_DB, SCHEMA, qualify, setup_views

# What differs between two runs of the same plan and says nothing about its shape.
_NORMALISE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"#\d+L?"), "#"),  # expression ids
    (re.compile(r"\b(plan_id|id)=\d+"), r"\1=?"),
    (re.compile(r"(subquery|scalar-subquery|exists|list|ReusedSubquery|Subquery)#\d+"), r"\1#"),
    (re.compile(r"(global_temp\.)?__lg_(gv|src)_[0-9a-f]+_\d+"), "<view>"),
    (re.compile(r"global_temp\.[A-Za-z_]\w*"), "<view>"),
    (re.compile(r"\[(file|hdfs|s3a?):[^\]]*\]"), "[<path>]"),
    (re.compile(r"(file|hdfs|s3a?):/[^\s,\]\)]+"), "<path>"),
    (re.compile(r"Location: \w+\(\d+ paths?\)"), "Location: <index>"),
    (re.compile(r"\bReusedExchange \[.*?\], "), "ReusedExchange "),
    (re.compile(r"\[codegen id : \d+\]"), ""),
    (re.compile(r"\*\(\d+\) "), ""),  # whole-stage codegen stage ids
    (re.compile(r"\s+$"), ""),
)
_TREE = re.compile(r"^[\s:|+\-]*")  # tree drawing before a node's name
_NAME = re.compile(r"[A-Za-z][\w]*")


def normalise(plan: str) -> list[str]:
    """A plan's lines without ids, view names or paths."""
    out = []
    for line in plan.splitlines():
        for pat, rep in _NORMALISE:
            line = pat.sub(rep, line)
        if line.strip():
            out.append(line)
    return out


def operators(lines: list[str]) -> Counter[str]:
    """Plan nodes by kind (the first word of each tree line)."""
    kinds: Counter[str] = Counter()
    for line in lines:
        rest = line[len(_TREE.match(line).group(0)) :]  # type: ignore[union-attr]
        m = _NAME.match(rest)
        if m and not rest.startswith("=="):
            kinds[m.group(0)] += 1
    return kinds


def key_counts(ops: Counter[str]) -> dict[str, int]:
    """The counts that change what runs: scans, exchanges, subqueries, reuse."""
    scans = sum(n for k, n in ops.items() if k.startswith(("Relation", "FileScan", "Scan")))
    return {
        "scans": scans,
        "exchanges": ops["Exchange"] + ops["BroadcastExchange"],
        "reused_exchanges": ops["ReusedExchange"],
        "subqueries": ops["Subquery"] + ops["SubqueryBroadcast"],
        "reused_subqueries": ops["ReusedSubquery"],
        "joins": sum(n for k, n in ops.items() if k.endswith("Join")),
        "projects": ops["Project"],
        "filters": ops["Filter"],
    }


def diff(a: list[str], c: list[str], limit: int) -> list[str]:
    """The first `limit` changed lines of A' -> C."""
    lines = [
        ln
        for ln in difflib.unified_diff(a, c, "A'", "C", n=0, lineterm="")
        if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))
    ]
    return lines[:limit]


def compare(a_plan: str, c_plan: str, limit: int) -> dict[str, Any] | None:
    """None when the normalised plans are the same; else their counts and a short diff."""
    a, c = normalise(a_plan), normalise(c_plan)
    if a == c:
        return None
    oa, oc = operators(a), operators(c)
    kinds = sorted(set(oa) | set(oc))
    return {
        "operators": {k: (oa[k], oc[k]) for k in kinds if oa[k] != oc[k]},
        "counts": {"A'": key_counts(oa), "C": key_counts(oc)},
        "diff": diff(a, c, limit),
    }


def plans(df: Any, final: bool) -> dict[str, str]:
    """Analyzed, optimized logical and physical plan text of a DataFrame (AQE's final plan
    when the query ran and `final`)."""
    qe = df._jdf.queryExecution()
    out = {"analyzed": qe.analyzed().toString(), "optimized": qe.optimizedPlan().toString()}
    if final:
        df.collect()
    out["physical"] = qe.executedPlan().toString()
    return out


def check(n: int, side: str, run: Any) -> Any:
    """Run one side of one query; a failure fails the whole run, loudly."""
    try:
        return run()
    except Exception as e:
        raise harness.ScenarioFailed(f"q{n}: {side} failed: {type(e).__name__}: {e}") from e


def phases(spark: Any, session: Any, queries: list[tuple[int, str, str]], reps: int) -> None:
    """Spark's analysis and optimisation alone, C's rewritten text against A''s, interleaved
    (C's analysis is of the text the session runs, parsed as it parses it; its planning and
    verification are not in these figures): medians in ms."""
    from governance.verify.guard import query_frame

    print(f"\nanalysis + optimisation, {reps} reps interleaved, medians in ms")
    print(f"{'query':>6} {'anaA2':>6} {'anaC':>6} {'optA2':>6} {'optC':>6} {'C-A2':>6}")

    def one(frame: Any) -> tuple[float, float]:
        ana, df = harness.timed_ms(frame)
        opt, _ = harness.timed_ms(df._jdf.queryExecution().optimizedPlan)
        return ana, opt

    excess = []
    for n, c_sql, f_sql in queries:
        text = session._planner().plan(c_sql).sql
        got: dict[str, list[tuple[float, float]]] = {"F": [], "C": []}
        for r in range(reps + 1):  # the first of each is a warm-up
            for side in ("F", "C") if r % 2 == 0 else ("C", "F"):
                t = one(lambda: query_frame(spark, text) if side == "C" else spark.sql(f_sql))  # noqa: B023
                if r:
                    got[side].append(t)
        med = {
            side: (statistics.median(a for a, _ in v), statistics.median(o for _, o in v))
            for side, v in got.items()
        }
        d = sum(med["C"]) - sum(med["F"])
        excess.append(d)
        print(
            f"{'q' + str(n):>6} {med['F'][0]:6.1f} {med['C'][0]:6.1f} {med['F'][1]:6.1f} "
            f"{med['C'][1]:6.1f} {d:6.1f}",
            flush=True,
        )
    if excess:
        print(f"median (C - A') analysis + optimisation {statistics.median(excess):.1f} ms")


def time_pairs(spark: Any, session: Any, queries: list[tuple[int, str, str]], rounds: int) -> None:
    """C and A' interleaved (the order alternates each round), medians in seconds."""
    print(f"\ntimed, {rounds} rounds, C and A' interleaved (one untimed run of each first)")
    print(f"{'query':>6} {'A2 s':>7} {'C s':>7} {'C/A2':>6}")

    def run(side: str, c_sql: str, f_sql: str) -> float:
        if side == "C":
            session.lg.plans.clear()
        t0 = time.perf_counter()
        (session.sql(c_sql) if side == "C" else spark.sql(f_sql)).collect()
        return time.perf_counter() - t0

    ratios = []
    for n, c_sql, f_sql in queries:
        run("F", c_sql, f_sql), run("C", c_sql, f_sql)
        times: dict[str, list[float]] = {"F": [], "C": []}
        for r in range(rounds):
            for side in ("F", "C") if r % 2 == 0 else ("C", "F"):
                times[side].append(run(side, c_sql, f_sql))
        f, c = statistics.median(times["F"]), statistics.median(times["C"])
        ratios.append(c / f)
        print(f"{'q' + str(n):>6} {f:7.3f} {c:7.3f} {c / f:6.3f}", flush=True)
    if ratios:
        print(f"median C/A' {statistics.median(ratios):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the Delta tables (tpcds_delta.py's DIR/delta)")
    ap.add_argument("--queries", help="only these query numbers, e.g. 1,3,10-20")
    ap.add_argument("--execute", action="store_true", help="also compare AQE's final plans")
    ap.add_argument("--time-rounds", type=int, default=0, help="time the queries, C vs A'")
    ap.add_argument("--phases", type=int, default=0, help="time analysis and optimisation, C vs A'")
    ap.add_argument("--diff-lines", type=int, default=12)
    ap.add_argument("--show", action="store_true", help="print both full normalised plans")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)

    from governance.runtime.spark import build_spark

    data = Path(args.data).resolve()
    root = Path(tempfile.mkdtemp(prefix="lakegate-parity-"))
    try:
        (root / "delta").mkdir()
        spark = build_spark(
            "local[2]",
            {
                "spark.driver.memory": args.driver_memory,
                "spark.sql.warehouse.dir": str(root / "spark-warehouse"),
                # display only: scans' filter lists are cut at 100 characters, where ids
                # of another width would cut them at another place
                "spark.sql.maxMetadataStringLength": "100000",
            },
            app_name="lakegate-plan-parity",
        )
        wanted = harness.parse_ids(args.queries)
        plain = [(n, q) for n, q in spark_queries() if wanted is None or n in wanted]
        paths = {t: str(data / t) for t in tables_of([q for _, q in plain])}
        lg = setup_lakegate(spark, root, paths)
        session = lg.session(BENCH_USER)
        session.sql(f"USE {CATALOG}.{SCHEMA}")
        setup_views(spark, lg, root, paths)

        results: dict[str, Any] = {}
        differ: dict[str, list[int]] = {"optimized": [], "physical": []}
        analyzed: list[tuple[int, int, int]] = []  # query, A' nodes, C nodes
        for n, sql in plain:
            floor = qualify(sql, FLOOR_DB)
            session.lg.plans.clear()
            c = check(n, "C", lambda: plans(session.sql(sql), args.execute))  # noqa: B023
            a = check(n, "A'", lambda: plans(spark.sql(floor), args.execute))  # noqa: B023
            entry: dict[str, Any] = {}
            # analyzed plans differ by construction (C's views are its own): their size is
            # what the optimiser has to take apart
            na = sum(operators(normalise(a["analyzed"])).values())
            nc = sum(operators(normalise(c["analyzed"])).values())
            analyzed.append((n, na, nc))
            for kind in ("optimized", "physical"):
                d = compare(a[kind], c[kind], args.diff_lines)
                if d is not None:
                    entry[kind] = d
                    differ[kind].append(n)
            results[str(n)] = entry
            for kind in ("analyzed", "optimized", "physical") if args.show else ():
                print(f"--- q{n} {kind} A'\n" + "\n".join(normalise(a[kind])))
                print(f"--- q{n} {kind} C\n" + "\n".join(normalise(c[kind])))
            if entry:
                print(f"q{n}: differs ({', '.join(entry)})")
                for kind, d in entry.items():
                    print(f"  {kind}: operators A'->C {d['operators']}")
                    ca, cc = d["counts"]["A'"], d["counts"]["C"]
                    changed = {k: (ca[k], cc[k]) for k in ca if ca[k] != cc[k]}
                    print(f"  {kind}: counts A'->C {changed or 'same'}")
                    for ln in d["diff"]:
                        print(f"    {ln[:220]}")
            else:
                print(f"q{n}: same (analyzed plan nodes A' {na}, C {nc})", flush=True)
        print(
            f"\n{len(plain)} queries: optimized plans differ in {len(differ['optimized'])} "
            f"{differ['optimized']}; physical in {len(differ['physical'])} {differ['physical']}"
        )
        grew = [(n, a, c) for n, a, c in analyzed if c != a]
        print(f"analyzed plans of another size (query, A' nodes, C nodes): {len(grew)} {grew}")
        pairs = [(n, sql, qualify(sql, FLOOR_DB)) for n, sql in plain]
        if args.phases:
            phases(spark, session, pairs, args.phases)
        if args.time_rounds:
            time_pairs(spark, session, pairs, args.time_rounds)
        if args.json:
            harness.write_json(
                args.json, {"differ": differ, "analyzed_nodes": analyzed, "queries": results}
            )
        lg.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(harness.main("plan_parity", main))
