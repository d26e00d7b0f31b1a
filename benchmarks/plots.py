"""PNG charts for benchmarks/REPORT.md: TPC-DS per-query ratios, rewrite latency against
query size, decision latency against policy count, audit throughput against writers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.tpcds_summary import TARGET_C_OVER_A


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_tpcds(tpcds: dict[str, Any], out: Path) -> Path | None:
    qs = [q for q in tpcds.get("queries", []) if q.get("c_over_a") and q.get("c_over_b")]
    if not qs:
        return None
    plt = _plt()
    labels = [f"q{q['id']}" for q in qs]
    x = range(len(qs))
    w = 0.42
    fig, ax = plt.subplots(figsize=(max(10, len(qs) * 0.22), 4.8))
    ax.bar(
        [i - w / 2 for i in x],
        [q["c_over_a"] for q in qs],
        w,
        label="C/A (governed / raw)",
        color="#4C72B0",
    )
    ax.bar(
        [i + w / 2 for i in x],
        [q["c_over_b"] for q in qs],
        w,
        label="C/B (governed / dynamic views)",
        color="#DD8452",
    )
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(
        TARGET_C_OVER_A,
        color="#4C72B0",
        ls="--",
        lw=0.8,
        label=f"C/A total target {TARGET_C_OVER_A}",
    )
    ax.axhline(1.25, color="#C44E52", ls="--", lw=0.8, label="per-query C/B limit 1.25")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("ratio of median times")
    s = tpcds.get("summary", {})
    ax.set_title(
        f"TPC-DS on Delta, sf={tpcds.get('config', {}).get('sf')}: per-query ratios "
        f"(total C/A {s.get('c_over_a', 0):.3f}, C/B {s.get('c_over_b', 0):.3f})"
    )
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def chart_rewrite_scaling(scaling: dict[str, Any], out: Path) -> Path | None:
    if not scaling or not (scaling.get("tables") or scaling.get("depth")):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, kind, xlabel in (
        (axes[0], "tables", "tables referenced (join chain)"),
        (axes[1], "depth", "nesting depth (derived tables)"),
    ):
        rows = [r for r in scaling.get(kind, []) if "p50_ms" in r]
        if rows:
            xs = [r["size"] for r in rows]
            ax.plot(xs, [r["p50_ms"] for r in rows], "o-", label="p50")
            ax.plot(xs, [r["max_ms"] for r in rows], "s--", label="max")
            ax.plot(xs, [r["cold_ms"] for r in rows], "^:", label="cold (first plan)")
        ax.axhline(5, color="grey", ls=":", lw=0.8)
        ax.axhline(25, color="#C44E52", ls=":", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("rewrite latency (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Rewrite latency vs query size (parse, decide, rewrite, generate; no Spark)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def chart_decisions(rows: list[dict[str, float]], out: Path) -> Path | None:
    if not rows:
        return None
    plt = _plt()
    rows = sorted(rows, key=lambda r: r["lines"])
    xs = [r["lines"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(xs, [r["p50_us"] for r in rows], "o-", label="table decision p50 (index)")
    ax.plot(xs, [r["p99_us"] for r in rows], "s--", label="table decision p99 (index)")
    ax.plot(xs, [r["casbin_ms"] * 1000 for r in rows], "^:", label="casbin enforce() p50")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("policy lines (1,000 groups)")
    ax.set_ylabel("latency (µs, log)")
    ax.set_title("Decision latency vs policy count")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def chart_audit(audit: dict[str, Any], out: Path) -> Path | None:
    rows = [r for r in audit.get("rows", []) if r["lines_per_stmt"] == 1]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    single = [r for r in rows if r["kind"] == "single"]
    for kind, style in (("threads", "o-"), ("processes", "s--")):
        pts = sorted(single + [r for r in rows if r["kind"] == kind], key=lambda r: r["writers"])
        if len(pts) > (1 if single else 0):
            ax.plot(
                [r["writers"] for r in pts],
                [r["lines_per_s"] for r in pts],
                style,
                label=f"writers as {kind}",
            )
    ax.axhline(20000, color="#C44E52", ls=":", lw=0.8, label="target 20,000 lines/s")
    ax.set_xlabel("concurrent writers")
    ax.set_ylabel("audit lines/s (flushed per statement)")
    ax.set_title("Audit throughput vs writer count")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def chart_load(load: dict[str, Any], out: Path) -> Path | None:
    """Throughput and p99 per N, gateway and REST against plain Spark Connect
    (benchmarks/load.py), the other Spark line's too when it ran."""
    rows = load.get("rows") or []
    if not rows:
        return None
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    lines = [(load, "")]
    other = load.get("other_line") or {}
    if other.get("rows"):
        lines.append((other, f" ({other.get('line', 'other line')})"))
    for k, (one, suffix) in enumerate(lines):
        for side, style in (("gateway", "o-"), ("plain", "s--"), ("rest", "^:")):
            pts = sorted((r for r in one["rows"] if r["side"] == side), key=lambda r: r["n"])
            if not pts:
                continue
            ns = [r["n"] for r in pts]
            kw = {"label": side + suffix, "alpha": 1.0 if k == 0 else 0.55}
            left.plot(ns, [r["throughput"] for r in pts], style, **kw)
            right.plot(ns, [(r["p99"] or 0) / 1000 for r in pts], style, **kw)
    for ax, title, unit in (
        (left, "throughput", "statements/s"),
        (right, "p99 latency", "seconds"),
    ):
        ax.set_xlabel("concurrent clients (N)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Gateway and REST vs plain Spark Connect under load ({load.get('line', '')})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
