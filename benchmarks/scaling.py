"""Rewrite latency against query size (scenario): the governed planner timed directly
(parse, decide, rewrite, generate; no Spark), as benchmarks/rewrite.py does, on synthetic
queries of growing size: the number of tables referenced (a chain of joins over the TPC-DS
tables, self-joins past 24) and the nesting depth (derived tables inside derived tables),
with the TPC-DS policies in force. A size the planner fails on fails the run.

    python benchmarks/scaling.py [--json OUT] [--reps 20] [--tables 1 2 4] [--depths 1 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

TABLE_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
DEPTHS = (1, 2, 4, 8, 16, 32, 64)


def _first_columns() -> list[tuple[str, str]]:
    from benchmarks.tpcds import TABLES, tpcds_tables

    return [(t.name, t.columns[0].name) for t in tpcds_tables("/lake") if t.name in TABLES]


def join_query(k: int, tables: list[tuple[str, str]]) -> str:
    """A query over `k` table references: a chain of joins (tables repeat past 24)."""
    parts = []
    name0, col0 = tables[0]
    parts.append(f"SELECT t0.{col0}, count(*) AS n FROM {name0} AS t0")
    for i in range(1, k):
        name, col = tables[i % len(tables)]
        parts.append(
            f"JOIN {name} AS t{i} ON t{i}.{col} = t{i - 1}.{tables[(i - 1) % len(tables)][1]}"
        )
    parts.append(f"WHERE t0.{col0} > 0 GROUP BY t0.{col0}")
    return "\n".join(parts)


def nested_query(depth: int) -> str:
    """One table under `depth` levels of derived tables, each with its own filter."""
    sql = "SELECT ss_item_sk AS c, ss_quantity AS v FROM store_sales WHERE ss_quantity > 0"
    for i in range(1, depth + 1):
        sql = f"SELECT c, v + {i} AS v FROM ({sql}) AS n{i} WHERE c > {i}"
    return sql


def rewrite_scaling(
    table_sizes: tuple[int, ...] = TABLE_SIZES,
    depths: tuple[int, ...] = DEPTHS,
    reps: int = 20,
    progress: bool = False,
) -> dict[str, Any]:
    """Planner latency (ms) against tables referenced and nesting depth."""
    from benchmarks.rewrite import planner_timer, setup

    tables = _first_columns()
    out: dict[str, Any] = {"reps": reps, "tables": [], "depth": []}
    with tempfile.TemporaryDirectory() as tmp:
        plan = planner_timer(*setup(Path(tmp)))

        def series(kind: str, sizes: tuple[int, ...], make: Any) -> None:
            for n in sizes:
                sql = make(n)
                row: dict[str, Any] = {"size": n, "chars": len(sql), "cold_ms": plan(sql)}
                times = [plan(sql) for _ in range(reps)]
                row.update(
                    p50_ms=harness.percentile(times, 0.5),
                    max_ms=max(times),
                    p90_ms=harness.percentile(times, 0.9),
                )
                out[kind].append(row)
                if progress:
                    print(
                        f"  {kind:>6} {n:>3}: p50 {row['p50_ms']:.2f} ms, max {row['max_ms']:.2f}",
                        flush=True,
                    )

        series("tables", table_sizes, lambda k: join_query(k, tables))
        series("depth", depths, nested_query)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--tables", type=int, nargs="+", default=list(TABLE_SIZES))
    ap.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS))
    args = ap.parse_args(argv)
    print(f"rewrite latency vs query size ({args.reps} warm reps per size; no Spark)", flush=True)
    r = rewrite_scaling(tuple(args.tables), tuple(args.depths), args.reps, progress=True)
    if args.json:
        harness.write_json(args.json, r)
    return 0


if __name__ == "__main__":
    sys.exit(harness.main("scaling", main))
