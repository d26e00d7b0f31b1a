"""Benchmark report: parsers for the benchmarks' printed figures and benchmarks/REPORT.md
(issue 7), every target printed as met or not met. Used by benchmarks/run_all.py; the charts
are drawn by benchmarks/plots.py, the headline by report_headline.py, TPC-DS by
report_tpcds.py and every other section by report_sections.py."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HERE = Path(__file__).resolve().parent

from benchmarks import plots  # noqa: E402
from benchmarks.report_headline import headline_section  # noqa: E402
from benchmarks.report_kit import Add, Img  # noqa: E402
from benchmarks.report_lines import lines_section  # noqa: E402
from benchmarks.report_load import load_section  # noqa: E402
from benchmarks.report_load_kill import load_kill_section  # noqa: E402
from benchmarks.report_sections import (  # noqa: E402
    analysis_section,
    api_section,
    audit_section,
    caveats_section,
    cli_section,
    cluster_section,
    connect_section,
    decisions_section,
    intro_section,
    mapping_section,
    rewrite_section,
    steps_section,
)
from benchmarks.report_tpcds import tpcds_section  # noqa: E402


def diagnose_cross_joins(query_ids: list[int]) -> dict[int, int]:
    """How many CROSS JOINs the governed rewrite adds to each query (no Spark).

    sqlglot regenerates a comma join as `CROSS JOIN`; Spark then plans a Cross join, which
    its dynamic partition pruning does not consider (it takes inner, semi and outer joins).
    """
    from benchmarks.rewrite import setup
    from benchmarks.tpcds import spark_queries
    from benchmarks.tpcds_policies import BENCH_USER
    from governance.planning.dispatch import Planner
    from governance.rewrite.dynamic_views import PolicySql
    from governance.sql.resolve import Namespace

    queries = dict(spark_queries())
    out: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        catalog, enforcer = setup(Path(tmp))
        ps = PolicySql(enforcer)
        for n in query_ids:
            if n not in queries:
                continue
            sql = queries[n]
            planned = Planner(
                catalog=catalog,
                enforcer=enforcer,
                policy_sql=ps,
                user=BENCH_USER,
                namespace=Namespace("tpcds", "sf1"),
            ).plan(sql)
            out[n] = planned.sql.upper().count("CROSS JOIN") - sql.upper().count("CROSS JOIN")
    return out


# --------------------------------------------------------------------------- parsers

_DECISION = re.compile(
    r"^\s*(?P<lines>\d+) lines, (?P<groups>\d+) groups: build (?P<build_s>[\d.]+) s; "
    r"identity (?P<identity_us>[\d.]+) us/user; table decision p50 (?P<p50_us>[\d.]+) us, "
    r"p99 (?P<p99_us>[\d.]+) us; casbin enforce\(\) p50 (?P<casbin_ms>[\d.]+) ms "
    r"\((?P<speedup>[\d.]+)x slower\); table-level disagreements with casbin: "
    r"(?P<disagree>\d+)/(?P<sample>\d+)"
)


def parse_decisions(text: str) -> list[dict[str, float]]:
    """benchmarks/decisions.py prints one line per policy size."""
    rows = []
    for line in text.splitlines():
        m = _DECISION.match(line)
        if m:
            rows.append({k: float(v) for k, v in m.groupdict().items()})
    return rows


_AUDIT = re.compile(
    r"^(?P<label>\d+ writer[^\d]*?(?:, (?P<per>\d+) line\(s\)/stmt)?)\s+"
    r"(?P<rate>[\d,]+) lines/s\s+p50\s+(?P<p50>[\d.]+) µs\s+p99\s+(?P<p99>[\d.]+) µs"
)


def parse_audit(text: str) -> dict[str, Any]:
    """benchmarks/audit.py: one line per writer set-up (1 writer; N threads; N processes)."""
    rows: list[dict[str, Any]] = []
    cpu: list[float] = []
    for line in text.splitlines():
        m = _AUDIT.match(line.strip())
        if m:
            label = m.group("label").strip()
            n = int(label.split()[0])
            kind = (
                "threads" if "thread" in label else "processes" if "process" in label else "single"
            )
            rows.append(
                {
                    "label": label,
                    "writers": n,
                    "kind": kind,
                    "lines_per_stmt": int(m.group("per") or 1),
                    "lines_per_s": float(m.group("rate").replace(",", "")),
                    "p50_us": float(m.group("p50")),
                    "p99_us": float(m.group("p99")),
                }
            )
        c = re.search(r"per CPU-second of the writer: ([\d,]+) lines/s", line)
        if c:
            cpu.append(float(c.group(1).replace(",", "")))
    return {"rows": rows, "cpu_lines_per_s": cpu}


_API = re.compile(
    r"^(?P<case>\S.*?)\s+(?P<requests>\d+) req\s+(?P<rps>[\d.]+) req/s\s+p50\s+(?P<p50>[\d.]+) ms"
    r"\s+p99\s+(?P<p99>[\d.]+) ms(?:\s+max\s+(?P<max>[\d.]+) ms)?(?:\s+errors\s+(?P<errors>\d+))?"
)


def parse_api(text: str) -> list[dict[str, Any]]:
    """benchmarks/api.py: one line per request kind (req, req/s, p50, p99, max, errors)."""
    rows = []
    for line in text.splitlines():
        m = _API.match(line.strip())
        if m:
            d = m.groupdict()
            rows.append(
                {
                    "case": d["case"].strip(),
                    "requests": int(d["requests"]),
                    "rps": float(d["rps"]),
                    "p50_ms": float(d["p50"]),
                    "p99_ms": float(d["p99"]),
                    "max_ms": float(d["max"]) if d["max"] else None,
                    "errors": int(d["errors"]) if d["errors"] else 0,
                }
            )
    return rows


# --------------------------------------------------------------------------- report


def _headline(results: dict[str, Any], add: Add, img: Img) -> None:
    headline_section(results, add)


def _lines(results: dict[str, Any], add: Add, img: Img) -> None:
    lines_section(results, add)


#: The report's sections, in order.
SECTIONS = (
    intro_section,
    _headline,
    steps_section,
    tpcds_section,
    _lines,
    rewrite_section,
    decisions_section,
    audit_section,
    api_section,
    mapping_section,
    connect_section,
    load_section,
    load_kill_section,
    cluster_section,
    analysis_section,
    cli_section,
    caveats_section,
)


def _charts(results: dict[str, Any], charts_dir: Path) -> dict[str, Path | None]:
    """Draw each chart; one that fails is left out (and said on stderr), not the report."""
    tpcds = results.get("tpcds") or {}
    charts: dict[str, Path | None] = {}
    for name, fn, data in (
        ("tpcds_ratios", plots.chart_tpcds, tpcds),
        ("rewrite_scaling", plots.chart_rewrite_scaling, results.get("scaling") or {}),
        ("decision_scaling", plots.chart_decisions, results.get("decisions") or []),
        ("audit_scaling", plots.chart_audit, results.get("audit") or {}),
        ("load", plots.chart_load, results.get("load") or {}),
    ):
        try:
            charts[name] = fn(data, charts_dir / f"{name}.png")
        except Exception as e:
            print(f"chart {name} failed: {e}", file=sys.stderr)
            charts[name] = None
    return charts


def write_report(results: dict[str, Any], out_md: Path, charts_dir: Path) -> Path:
    """Write REPORT.md (and the charts it shows) from everything run_all collected."""
    charts_dir.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(charts_dir, out_md.parent)
    charts = _charts(results, charts_dir)

    def img(name: str, alt: str) -> str:
        return (
            f"![{alt}]({rel}/{name}.png)\n"
            if charts.get(name)
            else f"_(no {alt} chart: no data)_\n"
        )

    lines: list[str] = []
    for section in SECTIONS:
        section(results, lines.append, img)
    lines.append(
        "Every figure above, machine-readable: `python benchmarks/run_all.py --results-json "
        "FILE`; each benchmark also runs alone (the commands in the table above).\n"
    )
    out_md.write_text("\n".join(lines))
    return out_md
