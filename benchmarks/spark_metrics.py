"""What Spark did for one query: files and partitions read per table from the executed
plan's scan metrics, and an order-independent checksum of the answer (TPC-DS scenario)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from benchmarks.tpcds_views import MEMBERSHIP


def _seq(s: Any) -> list[Any]:
    return [s.apply(i) for i in range(s.size())]


def scan_metrics(df: Any) -> list[dict[str, Any]]:
    """Per file scan of the executed plan: table dir, files read, partitions read.

    Walks the final adaptive plan, query stages and subqueries; reused exchanges and
    subqueries are not walked again (they read nothing).
    """
    root = df._jdf.queryExecution().executedPlan()
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        nid = node.id()
        if nid in seen:
            continue
        seen.add(nid)
        cls = node.getClass().getSimpleName()
        if cls in ("ReusedExchangeExec", "ReusedSubqueryExec"):
            continue
        if cls == "AdaptiveSparkPlanExec":
            stack.append(node.executedPlan())
            continue
        if cls.endswith("QueryStageExec"):
            stack.append(node.plan())
            continue
        if cls == "FileSourceScanExec":
            metrics = node.metrics()

            def m(key: str, metrics: Any = metrics) -> int | None:
                opt = metrics.get(key)
                return int(opt.get().value()) if opt.isDefined() else None

            try:
                path = str(node.relation().location().rootPaths().head().toString())
            except Exception:
                path = "?"
            out.append(
                {
                    "table": Path(path.replace("file:", "")).name,
                    "files": m("numFiles"),
                    "static_files": m("staticFilesNum"),
                    "partitions": m("numPartitions"),
                    "rows": m("numOutputRows"),
                }
            )
        stack.extend(_seq(node.children()))
        stack.extend(_seq(node.subqueries()))
    return out


def files_by_table(scans: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in scans:
        if s["table"] == MEMBERSHIP:
            continue
        out[s["table"]] = out.get(s["table"], 0) + (s["files"] or 0)
    return out


def partitions_by_table(scans: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in scans:
        if s["partitions"] is not None:
            out[s["table"]] = out.get(s["table"], 0) + s["partitions"]
    return out


def checksum(rows: list[Any]) -> str:
    """Order-independent digest of a result; floats to 9 significant digits."""

    def norm(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.9g}"
        return repr(v)

    lines = sorted("|".join(norm(v) for v in r) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
