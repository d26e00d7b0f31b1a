"""The TPC-DS scenario's summary: totals and ratios over the measured queries, the
per-query breakdown's medians, file skipping, and every issue 7 / issue 14 target as met or
not met (figures, never timed tests)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

from benchmarks import harness
from benchmarks.breakdown import PARTS

FLAG_RATIO = 1.25  # a query with C > FLAG_RATIO x B is flagged (issue 7)
TARGET_C_OVER_B = 1.0
TARGET_C_OVER_A = 1.03  # issue 14, at sf 1 over the 99 queries
TARGET_C_OVER_FLOOR = 1.02  # issue 14: the layer alone (C over A', policies on both sides)
TARGET_OVERHEAD_MS = 15.0  # issue 14: median per-statement C - A'
TARGET_VERIFY_MS = 5.0  # issue 14: verification per statement, warm
TARGET_MEDIAN_C_OVER_A = 1.02  # issue 31: per-query median C/A over the 99 queries
TARGET_P90_C_OVER_A = 1.10  # issue 31: per-query p90 C/A
WORST_BY_STEP = 10  # issue 31: the worst queries by C/A, broken down by step
NO_DIFFERENCE_RESAMPLES = 2000  # draws behind the p90 C/A that noise alone gives


def log(msg: str) -> None:
    print(msg, flush=True)


def total(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    if "error" in d:
        return "?"
    return str(sum(v for v in d.values() if isinstance(v, int)))


def files_over(a: dict[str, Any], c: dict[str, Any]) -> bool:
    """Does C read more files than A from any table?"""
    return any(
        isinstance(c.get(t), int) and isinstance(v, int) and c[t] > v for t, v in a.items()
    ) or any(t not in a for t in c if t != "error")


def summarize(queries: list[dict[str, Any]], probes: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [q for q in queries if q["a_med"] and q["b_med"] and q["c_med"] and q["floor_med"]]
    ta = sum(q["a_med"] for q in ok)
    tb = sum(q["b_med"] for q in ok)
    tc = sum(q["c_med"] for q in ok)
    tf = sum(q["floor_med"] for q in ok)
    overhead_ms = [(q["c_med"] - q["floor_med"]) * 1000 for q in ok]
    bugs = [{"id": q["id"], "error": q["errors"]["C"]} for q in queries if "C" in q["errors"]]
    differ = [q["id"] for q in queries if q["b_c_same_answer"] is False]
    flagged = [
        {
            "id": q["id"],
            "c_over_b": q["c_over_b"],
            "a": q["a_med"],
            "b": q["b_med"],
            "c": q["c_med"],
            "recheck_c_over_b": (q.get("recheck") or {}).get("c_over_b"),
            "recheck_rounds": (q.get("recheck") or {}).get("rounds"),
        }
        for q in ok
        if q["flag"]
    ]
    worst = sorted(ok, key=lambda q: -(q["c_over_b"] or 0))[:10]
    ca = [q["c_over_a"] for q in ok]
    p90_ca = _nearest_rank(ca, 0.9)
    worst_a = sorted(ok, key=lambda q: -q["c_over_a"])[:WORST_BY_STEP]
    more_files = [
        q["id"]
        for q in ok
        if q["files"].get("A")
        and q["files"].get("C")
        and files_over(q["files"]["A"], q["files"]["C"])
    ]
    plan = [q["plan_ms"] for q in ok if q.get("plan_ms") is not None]
    bd = [q["breakdown"] for q in ok if q.get("breakdown")]
    breakdown = (
        {
            k: {
                "median": statistics.median([b[k] for b in bd]),
                "total_s": sum(b[k] for b in bd) / 1000,
            }
            for k in PARTS
        }
        if bd
        else {}
    )
    verify_med = breakdown["verify_ms"]["median"] if breakdown else None
    skipping = []
    for p in probes:
        fa, fb, fc = (p["files"].get(m) for m in "ABC")
        pa, pc = p["partitions"].get("A"), p["partitions"].get("C")
        skipping.append(
            {
                "id": p["id"],
                "what": p["what"],
                "files_a": _sum(fa),
                "files_b": _sum(fb),
                "files_c": _sum(fc),
                "partitions_a": _sum(pa),
                "partitions_c": _sum(pc),
                "total_files": None,
                "same": _sum(fa) == _sum(fc) and _sum(pa) == _sum(pc),
                "errors": p["errors"],
            }
        )
    return {
        "queries_measured": len(ok),
        "queries_total": len(queries),
        "total_a_s": ta,
        "total_b_s": tb,
        "total_c_s": tc,
        "total_floor_s": tf,
        "c_over_a": tc / ta if ta else None,
        "c_over_b": tc / tb if tb else None,
        "c_over_floor": tc / tf if tf else None,
        "overhead_ms_median": statistics.median(overhead_ms) if overhead_ms else None,
        "b_over_a": tb / ta if ta else None,
        "median_query_c_over_a": statistics.median([q["c_over_a"] for q in ok]) if ok else None,
        "median_query_c_over_b": statistics.median([q["c_over_b"] for q in ok]) if ok else None,
        "p90_query_c_over_a": p90_ca,
        "p90_c_over_a_without_difference": p90_without_difference(ok),
        "worst_c_over_a": [
            {
                "id": q["id"],
                "a": q["a_med"],
                "floor": q["floor_med"],
                "c": q["c_med"],
                "c_over_a": q["c_over_a"],
                "c_over_floor": q["c_over_floor"],
                "breakdown": q.get("breakdown"),
            }
            for q in worst_a
        ],
        "plan_ms_median": statistics.median(plan) if plan else None,
        "plan_ms_max": max(plan) if plan else None,
        "plan_s_total": sum(plan) / 1000 if plan else None,
        "breakdown": breakdown,
        "overhead_per_query_s": (tc - ta) / len(ok) if ok else None,
        "flagged": flagged,
        "worst": [
            {
                "id": q["id"],
                "c_over_b": q["c_over_b"],
                "c_over_a": q["c_over_a"],
                "a": q["a_med"],
                "b": q["b_med"],
                "c": q["c_med"],
            }
            for q in worst
        ],
        "product_bugs": bugs,
        "answers_differ_b_c": differ,
        "c_reads_more_files": more_files,
        "skipping": skipping,
        "targets": {
            "total_c_over_b": {
                "target": TARGET_C_OVER_B,
                "met": _verdict(tb, lambda: tc / tb <= TARGET_C_OVER_B),
            },
            "total_c_over_a": {
                "target": TARGET_C_OVER_A,
                "met": _verdict(ta, lambda: tc / ta <= TARGET_C_OVER_A),
            },
            "total_c_over_floor": {
                "target": TARGET_C_OVER_FLOOR,
                "met": _verdict(tf, lambda: tc / tf <= TARGET_C_OVER_FLOOR),
            },
            "median_query_c_over_a": {
                "target": TARGET_MEDIAN_C_OVER_A,
                "met": _verdict(ca, lambda: statistics.median(ca) <= TARGET_MEDIAN_C_OVER_A),
            },
            "p90_query_c_over_a": {
                "target": TARGET_P90_C_OVER_A,
                "met": _verdict(p90_ca, lambda: p90_ca <= TARGET_P90_C_OVER_A),
            },
            "overhead_ms_median": {
                "target": TARGET_OVERHEAD_MS,
                "met": _verdict(
                    overhead_ms, lambda: statistics.median(overhead_ms) <= TARGET_OVERHEAD_MS
                ),
            },
            "verify_ms_median": {
                "target": TARGET_VERIFY_MS,
                "met": _verdict(verify_med, lambda: verify_med <= TARGET_VERIFY_MS),
            },
            # a flagged query counts unless re-measuring with more rounds clears it
            "no_query_over_1_25_b": {
                "target": FLAG_RATIO,
                "met": _verdict(
                    ok,
                    lambda: (
                        not [
                            f
                            for f in flagged
                            if f["recheck_c_over_b"] is None or f["recheck_c_over_b"] > FLAG_RATIO
                        ]
                    ),
                ),
            },
            "skipping_kept": {
                "met": _verdict(
                    skipping, lambda: all(p["same"] for p in skipping) and not more_files
                )
            },
        },
    }


def p90_without_difference(queries: list[dict[str, Any]]) -> dict[str, float] | None:
    """The per-query p90 C/A this run would show if C were raw Spark itself: the
    measurement's resolution, against which a p90 target can be read.

    Each query's own raw-Spark rounds (A) are resampled, with replacement, as both sides
    of the ratio of medians; the p90 over the queries is taken per draw (seeded, so a
    report is reproducible). Resampling so few rounds understates the spread, so the
    figure is a lower bound on the noise."""
    rounds = [q["times"]["A"] for q in queries if len(q.get("times", {}).get("A") or []) > 1]
    if not rounds:
        return None
    rng = random.Random(31)
    p90s = sorted(
        harness.percentile(
            [
                statistics.median(rng.choices(a, k=len(a)))
                / statistics.median(rng.choices(a, k=len(a)))
                for a in rounds
            ],
            0.9,
        )
        for _ in range(NO_DIFFERENCE_RESAMPLES)
    )
    return {
        "median": harness.percentile(p90s, 0.5),
        "p5": harness.percentile(p90s, 0.05),
        "p95": harness.percentile(p90s, 0.95),
        "share_over_target": sum(v > TARGET_P90_C_OVER_A for v in p90s) / len(p90s),
        "queries": len(rounds),
    }


def _verdict(measured: Any, met: Callable[[], bool]) -> bool | None:
    """A target's verdict: None ("not measured") when nothing was measured for it, never a
    "met" read off an empty list."""
    if measured is None or not measured:
        return None
    return bool(met())


def _nearest_rank(values: list[float], q: float) -> float | None:
    """The report's percentile (benchmarks/harness.py), None over no values."""
    return harness.percentile(values, q) if values else None


def _word(met: bool | None) -> str:
    return "not measured" if met is None else ("MET" if met else "NOT MET")


def _sum(d: dict[str, Any] | None) -> int | None:
    if not d or "error" in d:
        return None
    return sum(v for v in d.values() if isinstance(v, int))


#: (step, governed part, raw part or "") in pipeline order, for the worst queries' lines
STEPS = (
    ("plan", "plan_ms", ""),
    ("analyze", "analyze_c_ms", "analyze_a_ms"),
    ("verify", "verify_ms", ""),
    ("optimize", "optimize_ms", "optimize_a_ms"),
    ("execute", "execute_ms", "execute_a_ms"),
    ("audit", "audit_ms", ""),
)


def print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    log(
        f"\nTPC-DS on Delta, sf={result['config']['sf']}: {s['queries_measured']} of "
        f"{s['queries_total']} queries measured, {result['config']['rounds']} rounds"
    )
    log(
        f"  total (sum of medians): A {s['total_a_s']:.2f} s, A' {s['total_floor_s']:.2f} s, "
        f"B {s['total_b_s']:.2f} s, C {s['total_c_s']:.2f} s"
    )
    if s["c_over_a"] is not None:
        log(
            f"  total C/A {s['c_over_a']:.3f} (target <= {TARGET_C_OVER_A}: "
            f"{_word(s['targets']['total_c_over_a']['met'])})"
        )
        log(
            f"  total C/A' {s['c_over_floor']:.3f} (target <= {TARGET_C_OVER_FLOOR}: "
            f"{_word(s['targets']['total_c_over_floor']['met'])}); median "
            f"C - A' {s['overhead_ms_median']:.1f} ms per statement (target <= "
            f"{TARGET_OVERHEAD_MS:.0f} ms: "
            f"{_word(s['targets']['overhead_ms_median']['met'])})"
        )
        log(
            f"  total C/B {s['c_over_b']:.3f} (target <= {TARGET_C_OVER_B}: "
            f"{_word(s['targets']['total_c_over_b']['met'])})"
        )
        log(
            f"  total B/A {s['b_over_a']:.3f}; per-query median C/B "
            f"{s['median_query_c_over_b']:.3f}"
        )
        log(
            f"  per-query C/A median {s['median_query_c_over_a']:.3f} (target <= "
            f"{TARGET_MEDIAN_C_OVER_A}: {_word(s['targets']['median_query_c_over_a']['met'])}),"
            f" p90 {s['p90_query_c_over_a']:.3f} (target <= {TARGET_P90_C_OVER_A}: "
            f"{_word(s['targets']['p90_query_c_over_a']['met'])})"
        )
        if nd := s.get("p90_c_over_a_without_difference"):
            log(
                f"  p90 C/A that noise alone gives (raw Spark's own rounds against each "
                f"other): median {nd['median']:.3f}, 90% of draws {nd['p5']:.3f}-"
                f"{nd['p95']:.3f}, over {TARGET_P90_C_OVER_A} in {nd['share_over_target']:.0%}"
            )
    if s["plan_ms_median"] is not None:
        log(
            f"  governed planning alone: median {s['plan_ms_median']:.1f} ms, max "
            f"{s['plan_ms_max']:.1f} ms per query"
        )
    for k, v in (s.get("breakdown") or {}).items():
        log(f"  {k[:-3]:<12} median {v['median']:7.1f} ms, over all queries {v['total_s']:6.2f} s")
    log(
        f"  queries with C > {FLAG_RATIO} x B: "
        + (", ".join(f"q{f['id']} ({f['c_over_b']:.2f})" for f in s["flagged"]) or "none")
    )
    log("  worst C/B: " + ", ".join(f"q{w['id']} {w['c_over_b']:.2f}" for w in s["worst"][:5]))
    log(f"  worst {WORST_BY_STEP} by C/A, ms per step (governed / raw where both have it):")
    for w in s["worst_c_over_a"]:
        b = w["breakdown"] or {}
        steps = (
            ", ".join(
                f"{name} {b[c]:.0f}/{b[a]:.0f}" if a else f"{name} {b[c]:.1f}"
                for name, c, a in STEPS
            )
            if b
            else "no breakdown"
        )
        log(
            f"    q{w['id']}: C/A {w['c_over_a']:.2f} (A {w['a']:.3f} s, C {w['c']:.3f} s): "
            + steps
        )
    for item in s["product_bugs"]:
        log(f"  PRODUCT BUG (C fails where A works): q{item['id']}: {item['error']}")
    if s["answers_differ_b_c"]:
        log(f"  B and C answers differ: {s['answers_differ_b_c']}")
    log("  files read, C more than A: " + (", ".join(map(str, s["c_reads_more_files"])) or "none"))
    for p in s["skipping"]:
        log(
            f"  {p['id']:<24} files A/B/C {p['files_a']}/{p['files_b']}/{p['files_c']}, "
            f"partitions A/C {p['partitions_a']}/{p['partitions_c']}: "
            f"{'kept' if p['same'] else 'LOST'}"
        )
    log(f"  run time {result['run_s']:.0f} s")
