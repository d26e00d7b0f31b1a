"""The report's Spark-lines section (issue 26): the same TPC-DS queries and Connect
comparison on the default line and on the other one, side by side."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks import harness
from benchmarks.report_kit import Add, fmt


def _ratios(queries: list[dict[str, Any]]) -> dict[str, float | None]:
    """Totals and per-query ratios over `queries` (those every mode measured)."""
    ok = [q for q in queries if q.get("a_med") and q.get("floor_med") and q.get("c_med")]
    if not ok:
        return {}
    ta = sum(q["a_med"] for q in ok)
    tc = sum(q["c_med"] for q in ok)
    tf = sum(q["floor_med"] for q in ok)
    ca = [q["c_med"] / q["a_med"] for q in ok]
    return {
        "n": len(ok),
        "c_over_a": tc / ta,
        "c_over_floor": tc / tf,
        "median": statistics.median(ca),
        "p90": harness.percentile(ca, 0.9),
    }


def _row(label: str, tpcds: dict[str, Any], ids: set[Any] | None) -> str:
    env = tpcds.get("env") or {}
    cfg = tpcds.get("config") or {}
    queries = [q for q in tpcds.get("queries", []) if ids is None or q["id"] in ids]
    r = _ratios(queries)
    return (
        f"| {label} | {env.get('spark', '-')} / Delta {env.get('delta_spark', '-')} | "
        f"{cfg.get('sf', '-')} | {cfg.get('rounds', '-')} | {r.get('n', '-')} | "
        f"{fmt(r.get('c_over_a'))} | {fmt(r.get('c_over_floor'))} | {fmt(r.get('median'))} | "
        f"{fmt(r.get('p90'))} |"
    )


def lines_section(results: dict[str, Any], add: Add) -> None:
    """Both lines' TPC-DS ratios over the same queries (Connect figures are in the Connect
    section, per line)."""
    other = results.get("other_line")
    if not other:
        return
    add("## Both Spark lines\n")
    mine, theirs = results.get("tpcds") or {}, other.get("tpcds") or {}
    if not theirs:
        add(
            f"Only the Connect steps ran on Spark {other.get('line')} (see the Connect "
            "section); no TPC-DS figures for that line in this run.\n"
        )
        return
    ids = {q["id"] for q in theirs.get("queries", [])}
    add(
        f"The TPC-DS step ran again on Spark {other.get('line')} (its own virtual "
        f"environment, `{other.get('python')}`), over the same Delta tables and policies, "
        f"after the default line's run, one line at a time; {len(ids)} queries. The default "
        "line's row is computed over the same queries (from its own run), so the two rows "
        "compare the same work.\n"
    )
    add(
        "| line | Spark / Delta | sf | rounds | queries | total C/A | total C/A' | "
        "median C/A | p90 C/A |"
    )
    add("|---|---|---|---|---|---|---|---|---|")
    add(_row("default", mine, ids))
    add(_row(str(other.get("line")), theirs, None))
    add("")
