"""Where Spark's analysis of the governed text goes (issue 14 item 3).

The governed text reads each table as `delta.`<location>`` inside a view body; A reads temp
views of DataFrames loaded once. This times Spark's analysis alone (`queryExecution.analyzed`)
of the same statement shapes over the same Delta tables, read five ways, interleaved:

  pinned      a temp view of `spark.read.format('delta').load(path)` (A's way: the snapshot
              is the one loaded when the view was made; new commits are never seen)
  catalog     a table registered in Spark's catalog with that LOCATION (raw Spark's usual way)
  path        `delta.`path`` (how C, A' and B read)
  path_stale  `delta.`path`` with `spark.databricks.delta.stalenessLimit` = 1 h (Delta may
              answer from its cached snapshot and refresh it in the background)
  view        `delta.`path`` inside a view body like C's (explicit columns, a row filter)

for one reference, three references of one table and three different tables; the
per-reference increment says whether Delta re-resolves (and refreshes) the table for every
reference in one analysis.

    python benchmarks/analysis.py [--delta DIR] [--rounds 7] [--reps 15] [--json OUT]

`--delta DIR` uses the TPC-DS Delta tables a `tpcds_delta.py --keep` run left in DIR
(store_sales, item, date_dim); without it, three synthetic tables of the same widths.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

VARIANTS = ("pinned", "catalog", "path", "path_stale", "view")
TABLES = ("store_sales", "item", "date_dim")
WIDTHS = {"store_sales": 23, "item": 22, "date_dim": 28}  # TPC-DS column counts
STALE = "spark.databricks.delta.stalenessLimit"


def synthetic(spark: Any, root: Path) -> dict[str, str]:
    """Three Delta tables as wide as TPC-DS's, a few commits each (analysis reads the log,
    not the data)."""
    paths = {}
    for t, width in WIDTHS.items():
        path = str(root / t)
        cols = ", ".join(f"id + {i} AS {t[:2]}_c{i}" for i in range(width))
        for _ in range(3):
            spark.sql(f"SELECT {cols} FROM range(1000)").write.format("delta").mode("append").save(
                path
            )
        paths[t] = path
    return paths


def source(variant: str, table: str, path: str, columns: list[str]) -> str:
    """How the variant reads one table, as a FROM item."""
    if variant == "pinned":
        return f"lg_pinned_{table}"
    if variant == "catalog":
        return f"lg_analysis.{table}"
    rel = f"delta.`{path}`"
    if variant == "view":
        return f"(SELECT {', '.join(columns)} FROM {rel} WHERE {columns[0]} IS NOT NULL)"
    return rel


def shapes(variant: str, paths: dict[str, str], cols: dict[str, list[str]]) -> dict[str, str]:
    """The three statement shapes for one variant."""
    s = {t: source(variant, t, paths[t], cols[t]) for t in paths}
    a, b, c = TABLES
    ka, kb = cols[a][0], cols[b][0]
    return {
        "1 ref": f"SELECT {ka} FROM {s[a]} x",
        "3 refs, one table": (
            f"SELECT x.{ka} FROM {s[a]} x JOIN {s[a]} y ON x.{ka} = y.{ka} "
            f"JOIN {s[a]} z ON x.{ka} = z.{ka}"
        ),
        "3 tables": (
            f"SELECT x.{ka} FROM {s[a]} x JOIN {s[b]} y ON x.{ka} = y.{kb} "
            f"JOIN {s[c]} z ON x.{ka} = z.{cols[c][0]}"
        ),
    }


def scenario(args: argparse.Namespace) -> int:
    from governance.runtime.spark import build_spark

    spark = build_spark(args.master, {"spark.ui.enabled": "false"}, app_name="lakegate-analysis")
    tmp = tempfile.TemporaryDirectory(prefix="lakegate-analysis-")
    try:
        if args.delta:
            paths = {t: str(Path(args.delta) / t) for t in TABLES}
        else:
            paths = synthetic(spark, Path(tmp.name))
        spark.sql("CREATE DATABASE IF NOT EXISTS lg_analysis")
        cols: dict[str, list[str]] = {}
        for t, p in paths.items():
            df = spark.read.format("delta").load(p)
            df.createOrReplaceTempView(f"lg_pinned_{t}")
            cols[t] = df.columns
            spark.sql(f"DROP TABLE IF EXISTS lg_analysis.{t}")
            spark.sql(f"CREATE TABLE lg_analysis.{t} USING delta LOCATION '{p}'")
        texts = {v: shapes(v, paths, cols) for v in VARIANTS}

        def analyse(variant: str, sql: str) -> float:
            if variant == "path_stale":
                spark.conf.set(STALE, "1h")
            try:
                ms, _ = harness.timed_ms(lambda: spark.sql(sql)._jdf.queryExecution().analyzed())
            finally:
                spark.conf.unset(STALE)
            return ms

        for v in VARIANTS:  # warm-up: JIT, Delta log cache
            for sql in texts[v].values():
                for _ in range(3):
                    analyse(v, sql)
        times: dict[tuple[str, str], list[float]] = {}
        for order in harness.rotations(VARIANTS, args.rounds):
            for v in order:
                for shape, sql in texts[v].items():
                    times.setdefault((v, shape), []).extend(
                        analyse(v, sql) for _ in range(args.reps)
                    )
        med = {k: statistics.median(xs) for k, xs in times.items()}
        print(
            f"Spark analysis only, ms (median of {args.rounds} interleaved rounds x "
            f"{args.reps}); tables: {'TPC-DS ' + args.delta if args.delta else 'synthetic'}"
        )
        names = list(texts["path"])
        print(f"  {'variant':<11} " + " ".join(f"{n:>18}" for n in names) + "  per extra ref")
        out: dict[str, Any] = {"rounds": args.rounds, "reps": args.reps, "ms": {}}
        for v in VARIANTS:
            row = [med[(v, n)] for n in names]
            per_ref = (row[1] - row[0]) / 2
            out["ms"][v] = dict(zip(names, row, strict=True)) | {"per_extra_ref": per_ref}
            print(f"  {v:<11} " + " ".join(f"{x:>18.2f}" for x in row) + f"  {per_ref:>13.2f}")
        base = med[("pinned", "3 tables")]
        for v in VARIANTS[1:]:
            r = med[(v, "3 tables")] / base
            out["ms"][v]["ratio_3_tables_vs_pinned"] = r
            print(f"  3 tables, {v} / pinned: {r:.2f}")
        if args.json:
            harness.write_json(args.json, out)
        for t in paths:
            spark.sql(f"DROP TABLE IF EXISTS lg_analysis.{t}")
        return 0
    finally:
        spark.stop()
        tmp.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delta", help="a directory holding TPC-DS Delta tables (see above)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    return harness.main("analysis", lambda: scenario(args))


if __name__ == "__main__":
    sys.exit(main())
