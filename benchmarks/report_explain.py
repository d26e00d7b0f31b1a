"""The report's plain reasons for each target met or missed, read off the figures
themselves (run_all writes them under `why`)."""

from __future__ import annotations

import statistics
import sys
from typing import Any

from benchmarks import harness, report
from benchmarks.connect import RATIO_P50
from benchmarks.rewrite import TARGET_OVER_SQLGLOT, TARGET_P50_MS_14
from benchmarks.tpcds_summary import TARGET_C_OVER_A, TARGET_C_OVER_FLOOR


def explain(results: dict[str, Any]) -> list[str]:
    """Plain reasons for each target met or missed, from the figures themselves."""
    why: list[str] = []
    s = (results.get("tpcds") or {}).get("summary") or {}
    cfg = (results.get("tpcds") or {}).get("config") or {}
    if s.get("c_over_a") is not None:
        n = s["queries_measured"]
        per_q = s.get("overhead_per_query_s")
        bd = s.get("breakdown") or {}
        parts = []
        if bd:
            parts.append(
                f"the planner {bd['plan_ms']['median']:.1f} ms, Spark analysing the "
                f"rewritten SQL {bd['analyze_c_ms']['median']:.0f} ms against "
                f"{bd['analyze_a_ms']['median']:.0f} ms for the raw text, the "
                f"plan verification walk {bd['verify_ms']['median']:.1f} ms, "
                f"optimisation {bd['optimize_ms']['median']:.0f} ms and the audit "
                f"write {bd['audit_ms']['median']:.2f} ms (medians per query)"
            )
        median_a = sorted(q["a_med"] for q in results["tpcds"]["queries"] if q.get("a_med"))
        med_a = median_a[len(median_a) // 2] if median_a else 0
        verdict = "met" if s["targets"]["total_c_over_a"]["met"] else "NOT met"
        verdict_floor = "met" if s["targets"]["total_c_over_floor"]["met"] else "NOT met"
        delta = (
            f"costs {per_q * 1000:.0f} ms more per query on average than raw Spark"
            if per_q >= 0
            else f"ran {-per_q * 1000:.0f} ms per query faster on average than raw Spark "
            "(within run-to-run noise at this size: the rewritten plans do the same work "
            "plus the filters and masks)"
        )
        why.append(
            f"Total C/A {s['c_over_a']:.3f} ({verdict}, target <= {TARGET_C_OVER_A}) and C/A' "
            f"{s['c_over_floor']:.3f} ({verdict_floor}, target <= {TARGET_C_OVER_FLOOR}; A' "
            f"has the same filters and masks written in by hand): over {n} queries the "
            f"governed path {delta}; raw Spark's median query takes {med_a:.2f} s at "
            f"sf={cfg.get('sf')}"
            + (f"; fixed per-statement costs are {'; '.join(parts)}" if parts else "")
            + ". Row filters and masks also run in the plan (the same ones B runs). Fixed "
            "costs weigh less as the scale factor grows."
        )
        verdict = "met" if s["targets"]["total_c_over_b"]["met"] else "NOT met"
        why.append(
            f"Total C/B {s['c_over_b']:.3f} ({verdict}, target <= 1.0): B looks group "
            "membership up at query time (a scalar subquery per group per query, run as its "
            "own Spark job, and predicates Spark cannot fold), C resolves identity at rewrite "
            "time so its filters fold to constants before Spark plans them"
            + (
                "."
                if s["targets"]["total_c_over_b"]["met"]
                else "; here C's fixed per-statement costs outweigh that."
            )
        )
        if s.get("flagged"):

            def one(f: dict[str, Any]) -> str:
                text = (
                    f"q{f['id']} ({f['c_over_b']:.2f}; A {f['a']:.2f} s, B {f['b']:.2f} s, "
                    f"C {f['c']:.2f} s"
                )
                if f.get("recheck_c_over_b") is not None:
                    text += (
                        f"; re-measured with {f['recheck_rounds']} rounds: C/B "
                        f"{f['recheck_c_over_b']:.2f}"
                    )
                return text + ")"

            confirmed = [
                f
                for f in s["flagged"]
                if f.get("recheck_c_over_b") is None or f["recheck_c_over_b"] > 1.25
            ]
            names = ", ".join(f"q{f['id']}" for f in confirmed)
            why.append(
                "Queries above 1.25 x B in the main run: "
                + ", ".join(one(f) for f in s["flagged"])
                + ". "
                + (
                    f"Still above after re-measuring (or not re-measured): {names}. "
                    if confirmed
                    else "None stays above 1.25 x B when re-measured: "
                    "run-to-run noise of sub-second queries. "
                )
                + "Short queries are hit hardest by C's fixed per-statement cost; a "
                "query that loses partition pruning (below) is slower for real."
            )
        why += explain_per_query(results["tpcds"])
        more = s.get("c_reads_more_files") or []
        if more:
            by_id = {q["id"]: q for q in results["tpcds"]["queries"]}
            detail = []
            for n in more:
                fa = by_id[n]["files"].get("A", {})
                fc = by_id[n]["files"].get("C", {})
                worse = [
                    f"{t} {fa.get(t, 0)} -> {c}"
                    for t, c in fc.items()
                    if isinstance(c, int) and c > fa.get(t, 0)
                ]
                detail.append(f"q{n} ({', '.join(worse)})")
            try:
                added = report.diagnose_cross_joins(more)
            except Exception as e:
                added = {}
                print(f"cross-join diagnosis failed: {e}", file=sys.stderr)
            cause = ""
            if added and all(added.get(n, 0) > 0 for n in more):
                cause = (
                    " In every one the governed rewrite turns the query's comma joins into "
                    "explicit `CROSS JOIN`s (sqlglot's Spark output), which Spark plans as "
                    "Cross joins, and Spark's dynamic partition pruning does not consider "
                    "Cross joins: the partition-pruned `inventory` scan becomes a full "
                    "scan. B (the same filters and masks, the user's own join syntax) "
                    "keeps the pruning. Product bug: the rewrite must keep comma joins "
                    "(or emit inner joins)."
                )
            why.append(
                "Files read: C reads more files than A in "
                + "; ".join(detail)
                + " (files read, A -> C)."
                + cause
            )
        if s.get("product_bugs"):
            why.append(
                f"{len(s['product_bugs'])} queries fail governed but run raw: product "
                "bugs, listed in the TPC-DS section."
            )
    rw = results.get("rewrite")
    if rw:
        ok = rw["p50_ms"] < 5 and rw["max_ms"] < 25
        slowest = max((ms for _, ms in rw.get("slowest", [])), default=0.0)
        if ok:
            verdict = "target met."
        elif rw["p50_ms"] < 5 and slowest < 25:
            verdict = (
                f"target NOT met on the max only: it is a single outlier run, since the "
                f"slowest query's median is {slowest:.1f} ms and p99 "
                f"{rw['p99_ms']:.1f} ms (most likely a pause of the process: GC or "
                "scheduling on the shared machine, not a query slow to rewrite)."
            )
        else:
            verdict = (
                f"target NOT met: the slowest query's median is {slowest:.1f} ms "
                "(listed in the rewrite section)."
            )
        why.append(
            f"Rewrite latency p50 {rw['p50_ms']:.2f} ms / max {rw['max_ms']:.2f} ms: " + verdict
        )
        text = (
            f"Rewrite against sqlglot's own parse + generate of the same queries in the "
            f"same rounds: {rw['over_sqlglot']:.2f} x (sqlglot p50 "
            f"{rw['sqlglot_p50_ms']:.2f} ms; target <= {TARGET_OVER_SQLGLOT} x, p50 <= "
            f"{TARGET_P50_MS_14} ms): what the layer adds on top of the parser it is "
            "built on."
        )
        if rw["p50_ms"] > TARGET_P50_MS_14:
            room = TARGET_P50_MS_14 / rw["sqlglot_p50_ms"]
            text += (
                f" Issue 14's p50 <= {TARGET_P50_MS_14} ms is not met ({rw['p50_ms']:.2f} "
                f"ms): sqlglot alone takes {rw['sqlglot_p50_ms']:.2f} ms at the median on "
                f"this machine, so that target leaves the layer {room:.2f} x sqlglot, "
                "tighter than the ratio target it meets; it is bound by the parser's own "
                "speed here."
            )
        why.append(text)
    why += explain_connect(results)
    return why


def explain_connect(results: dict[str, Any]) -> list[str]:
    """Why a Connect target was missed: where the gateway's time goes (benchmarks/README.md,
    per-step timings of a request through the gateway) and, on TPC-DS data, the floor's
    split of gateway / plain into the policies' cost and the gateway's."""
    runs = [
        part[k]
        for part in (results, results.get("other_line") or {})
        for k in ("connect", "connect_tpcds")
        if part.get(k)
    ]
    missed = [
        f"{r.get('line', '?')} {r.get('data', 'demo')}: {t['target']}"
        for r in runs
        for t in r.get("targets", [])
        if not t["met"]
    ]
    if not missed:
        return []
    text = (
        "Connect targets not met (" + "; ".join(missed) + "). The gateway runs the very "
        "Dataset its verifier analysed (kept in the backend session under a one-time key "
        "and forwarded as a CachedRemoteRelation), so Spark does not analyse the plan "
        "a second time, and a session's repeated reads of settings no caller can set are "
        "answered without a backend hop. What it still adds per request "
        "(benchmarks/README.md, Connect): the verifier's analysis of the composed plan "
        "(12-15 ms) and walk (about 2 ms), the TLS relay and the Python gRPC hop of every "
        "call, the plan walk, cache lookup and audit lines (about 3 ms together): tens of "
        "milliseconds. The gateway's text is governed where the plain text is raw."
    )
    for r in runs:
        if r.get("data", "demo") != "demo" or all(t["met"] for t in r.get("targets", [])):
            continue
        q = next(iter(r["query"].values()))
        g, p = q["gateway"]["p50"], q["plain"]["p50"]
        f = r["first_row"]
        text += (
            f" On {r.get('line', '?')}'s demo data the gateway adds {g - p:+.0f} ms per query "
            f"(p50 {g:.0f} ms against {p:.0f} ms) and "
            f"{f['gateway']['p50'] - f['plain']['p50']:+.0f} ms to the first row: that fixed "
            f"cost is {g / p - 1:.0%} of a query plain Spark Connect answers in {p:.0f} ms, "
            "where it is a few percent of a TPC-DS query (above). Repeated runs of the "
            "same code on a quiet machine put the demo ratio at 0.98-1.14 and the first row "
            "at +33 to +56 ms (benchmarks/README.md, Connect)."
        )
    splits = [r for r in runs if r.get("split") and any(not t["met"] for t in r["targets"])]
    for r in splits:
        sp = r["split"]
        g = sp["gateway_over_floor"]
        text += (
            f" On {r.get('line', '?')}'s TPC-DS run, gateway / plain "
            f"{sp['gateway_ms'] / sp['plain_ms']:.3f} splits into floor / plain "
            f"{sp['policies_ratio']:.3f}, what the bench user's policies cost when written "
            "by hand into plain Spark Connect (the row filter on store_sales reads a column "
            f"the query does not), and gateway / floor {g:.3f} "
            f"({sp['gateway_minus_floor_ms_per_query']:+.0f} ms per query), what the gateway "
            "adds: "
            + (
                "within the 1.05 the target allows, so the remainder is the policies' cost."
                if g <= RATIO_P50
                else "over 1.05, so part of the remainder is the gateway's and not explained."
            )
        )
    if not splits and any(r.get("data") == "tpcds" for r in runs):
        text += (
            " Run without the floor, this report cannot split a TPC-DS excess into the "
            "policies' cost and the gateway's" + _embedded_share(results) + "."
        )
    return [text]


def _embedded_share(results: dict[str, Any]) -> str:
    """The same TPC-DS queries in the embedded run: what policies plus layer cost there."""
    tp = (results.get("connect_tpcds") or {}).get("query") or {}
    wanted = {int(k[1:]) for k in tp if k.startswith("q") and k[1:].isdigit()}
    qs = [
        q
        for q in (results.get("tpcds") or {}).get("queries", [])
        if q.get("id") in wanted and q.get("a_med") and q.get("c_med") and q.get("floor_med")
    ]
    if not qs:
        return ""
    a = sum(q["a_med"] for q in qs)
    return (
        f" (the same {len(qs)} queries in the embedded TPC-DS run, governed against raw: "
        f"C/A {sum(q['c_med'] for q in qs) / a:.3f})"
    )


def explain_per_query(tpcds: dict[str, Any]) -> list[str]:
    """Issue 31's per-query C/A targets split into what the policies cost (A'/A: the same
    filters and masks written by hand into raw Spark) and what the layer costs (C/A')."""
    s = tpcds.get("summary") or {}
    qs = [
        q
        for q in tpcds.get("queries", [])
        if q.get("a_med") and q.get("floor_med") and q.get("c_med")
    ]
    if not qs or s.get("p90_query_c_over_a") is None:
        return []

    policy = [q["floor_med"] / q["a_med"] for q in qs]
    layer = [q["c_med"] / q["floor_med"] for q in qs]
    gap_ms = [(q["c_med"] - q["floor_med"]) * 1000 for q in qs]
    t = s["targets"]
    pol = tpcds.get("policy") or {}
    word = {True: "met", False: "NOT met", None: "not measured"}
    return [
        f"Per-query C/A median {s['median_query_c_over_a']:.3f} "
        f"({word[t['median_query_c_over_a']['met']]}, target <= 1.02) and p90 "
        f"{s['p90_query_c_over_a']:.3f} ({word[t['p90_query_c_over_a']['met']]}, target <= "
        f"1.10). Split per query: what the policies cost, A'/A (the same "
        f"{pol.get('row_filters', '?')} filters and {pol.get('column_masks', '?')} masks "
        f"written by hand into raw Spark), median {statistics.median(policy):.3f}, "
        f"p90 {harness.percentile(policy, 0.9):.3f}; what the layer costs on top, C/A', "
        f"median {statistics.median(layer):.3f}, p90 {harness.percentile(layer, 0.9):.3f}, "
        f"median C - A' {statistics.median(gap_ms):.0f} ms per query. A ratio over target "
        "that A'/A carries is policy evaluation (every row filtered, every masked value "
        "computed), which the targets' 'remove what is not policy evaluation' leaves in."
        + _noise_sentence(s.get("p90_c_over_a_without_difference"))
    ]


def _noise_sentence(nd: dict[str, Any] | None) -> str:
    """The p90 target read against the run's own resolution (tpcds_summary)."""
    if not nd:
        return ""
    return (
        f" The same run's resolution: raw Spark's own rounds resampled against each other "
        f"(no difference at all) give a per-query p90 of {nd['median']:.3f} (90% of "
        f"{nd['queries']}-query draws {nd['p5']:.3f}-{nd['p95']:.3f}; over 1.10 in "
        f"{nd['share_over_target']:.0%}), so a p90 under 1.10 is below what "
        "this many rounds on this machine can tell apart from noise."
    )
