"""The report's Spark-lines section (issue 26): the same TPC-DS queries and Connect
comparison on the default line and on the other one, side by side."""

from __future__ import annotations

from typing import Any

from benchmarks.report_kit import Add, fmt


def _row(label: str, part: dict[str, Any]) -> str:
    t = part.get("tpcds") or {}
    s = t.get("summary") or {}
    env = t.get("env") or {}
    cfg = t.get("config") or {}
    return (
        f"| {label} | {env.get('spark', '-')} / Delta {env.get('delta_spark', '-')} | "
        f"{cfg.get('sf', '-')} | {cfg.get('rounds', '-')} | "
        f"{s.get('queries_measured', '-')} | {fmt(s.get('c_over_a'))} | "
        f"{fmt(s.get('c_over_floor'))} | {fmt(s.get('median_query_c_over_a'))} | "
        f"{fmt(s.get('p90_query_c_over_a'))} | {fmt(s.get('c_over_b'))} |"
    )


def lines_section(results: dict[str, Any], add: Add) -> None:
    """Both lines' TPC-DS ratios in one table (Connect figures are in the Connect section,
    per line)."""
    other = results.get("other_line")
    if not other:
        return
    add("## Both Spark lines\n")
    add(
        f"The TPC-DS step ran again on Spark {other.get('line')} (its own virtual "
        f"environment, `{other.get('python')}`), over the same Delta tables, queries and "
        "policies, after the default line's run: the same machine, one line at a time.\n"
    )
    add(
        "| line | Spark / Delta | sf | rounds | queries | total C/A | total C/A' | "
        "median C/A | p90 C/A | total C/B |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|")
    add(_row("default", results))
    add(_row(str(other.get("line")), other))
    add("")
