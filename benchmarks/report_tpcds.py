"""The report's TPC-DS section: A raw, A' floor, B dynamic views, C governed, per query."""

from __future__ import annotations

from typing import Any

from benchmarks.breakdown import PARTS
from benchmarks.report_kit import Add, Img, fmt


def tpcds_section(results: dict[str, Any], add: Add, img: Img) -> None:
    """How it was measured, the totals, the outliers, skipping, every query, the breakdown."""
    tpcds = results.get("tpcds") or {}
    if not tpcds:
        return
    _overview(tpcds, add, img)
    _outliers_and_answers(tpcds.get("summary") or {}, add)
    _worst_by_step(tpcds.get("summary") or {}, add)
    _skipping(tpcds, add)
    _all_queries(tpcds, add)
    breakdown_section(tpcds, add)


def _overview(tpcds: dict[str, Any], add: Add, img: Img) -> None:
    """The set-up, the four ways, the totals and the per-query ratio chart."""
    s = tpcds.get("summary") or {}
    cfg = tpcds.get("config", {})
    add("## TPC-DS on Delta: A raw, A' hand-written floor, B dynamic views, C governed\n")
    add(
        f"Scale factor {cfg.get('sf')}, {cfg.get('rounds')} interleaved rounds per query "
        f"(order rotates: ABC, BCA, CAB), medians; Spark `{cfg.get('master')}`, driver "
        f"memory {cfg.get('driver_memory')}. Fact tables range-partitioned by date key into "
        f"{cfg.get('fact_files')} files; `inventory` partitioned by `inv_date_sk`. "
        f"{tpcds.get('policy', {}).get('row_filters')} row filters and "
        f"{tpcds.get('policy', {}).get('column_masks')} column masks over "
        f"{tpcds.get('policy', {}).get('tables')} tables, all applying to user `bench`. "
        f"Load average before/after this benchmark: "
        f"{fmt((tpcds.get('load_before') or [None])[0], '.2f')} / "
        f"{fmt((tpcds.get('load_after') or [None])[0], '.2f')}.\n"
    )
    add("- **A**: raw Spark SQL over temp views of `spark.read.format('delta').load(path)`.")
    add(
        "- **A'**: the floor: raw Spark over global temp views with the same filters and "
        'masks written in by hand for user `bench` alone (every "does this apply to me" '
        "already answered) over the very DataFrames A reads, so C/A' is the cost of the "
        "governance layer itself and A'/A what the policies cost."
    )
    add(
        "- **B**: persistent dynamic views generated from the same policy set: "
        "`CASE WHEN <member> THEN <mask> ELSE col END`, `WHERE (NOT <applies> OR "
        "(<filter>))`, with `is_member('g')` as a scalar lookup in a Delta membership table "
        "keyed by `current_user()`, evaluated at query time."
    )
    add(
        "- **C**: `lg.session('bench').sql(q)` after `USE tpcds.sf1`: parse, decide, "
        "rewrite, verify, execute, audit. Times include `collect()`.\n"
    )
    add(
        f"Measured {s.get('queries_measured')} of {s.get('queries_total')} queries. "
        f"Totals (sums of per-query medians): **A {fmt(s.get('total_a_s'), '.2f')} s, "
        f"B {fmt(s.get('total_b_s'), '.2f')} s, C {fmt(s.get('total_c_s'), '.2f')} s**; "
        f"**C/A {fmt(s.get('c_over_a'))}**, **C/B {fmt(s.get('c_over_b'))}**, "
        f"B/A {fmt(s.get('b_over_a'))}. Per-query median ratios: C/A "
        f"{fmt(s.get('median_query_c_over_a'))}, C/B {fmt(s.get('median_query_c_over_b'))}. "
        f"The governed planning alone (parse to SQL, no Spark) takes median "
        f"{fmt(s.get('plan_ms_median'), '.1f')} ms, max {fmt(s.get('plan_ms_max'), '.1f')} ms "
        f"per query ({fmt(s.get('plan_s_total'), '.2f')} s over all queries).\n"
    )
    empty = [q for q in tpcds.get("queries", []) if (q.get("rows") or {}).get("A") == 0]
    no_scan = [q for q in tpcds.get("queries", []) if q.get("files", {}).get("A") == {}]
    if empty or no_scan:
        add(
            f"At this scale {len(empty)} queries return no rows and {len(no_scan)} show no "
            "file scan in their final plan (adaptive execution replaces a branch that turns "
            "out empty by an empty relation): those measure mostly planning, analysis and "
            "fixed costs, not scanning.\n"
        )
    add(img("tpcds_ratios", "per-query C/A and C/B"))


def _outliers_and_answers(s: dict[str, Any], add: Add) -> None:
    """The worst queries by C/B, product bugs, and whether B and C agree."""
    worst = s.get("worst", [])
    if worst:
        add("Worst queries by C/B:\n")
        add("| query | A s | B s | C s | C/A | C/B |")
        add("|---|---|---|---|---|---|")
        for w in worst:
            add(
                f"| q{w['id']} | {fmt(w['a'])} | {fmt(w['b'])} | {fmt(w['c'])} | "
                f"{fmt(w['c_over_a'], '.2f')} | {fmt(w['c_over_b'], '.2f')} |"
            )
        add("")
    for key, title in (("product_bugs", "**Product bugs: C fails where A works**"),):
        items = s.get(key) or []
        add(f"{title}: " + ("none" if not items else ""))
        for it in items:
            add(f"- q{it['id']}: `{(it.get('reason') or it.get('error') or '')[:300]}`")
        add("")
    differ = s.get("answers_differ_b_c") or []
    add(
        "Answers: B and C return the same rows (order-independent checksum) for "
        + (
            "every measured query."
            if not differ
            else f"all but {', '.join(f'q{d}' for d in differ)} (**differ**: see JSON)."
        )
    )
    add(
        "A's answers differ from B/C wherever a query outputs or groups by a masked column, "
        "as they should.\n"
    )


def _worst_by_step(s: dict[str, Any], add: Add) -> None:
    """The worst queries by C/A, each step's milliseconds governed against raw (issue 31):
    where a short query's fixed price goes, and how much of C over A is the policies' own
    (A', the same filters and masks written by hand)."""
    worst = s.get("worst_c_over_a") or []
    if not worst:
        return
    add(
        "Worst queries by C/A, by step (ms; governed / raw where raw Spark has the step; "
        "A'/A is what the policies themselves cost, C/A' the layer):\n"
    )
    add(
        "| query | A s | A' s | C s | C/A | A'/A | C/A' | plan | analyze C/A | verify | "
        "optimize C/A | execute C/A | audit |"
    )
    add("|---" * 13 + "|")
    for w in worst:
        b = w.get("breakdown") or {}

        def pair(c: str, a: str, b: dict[str, Any] = b) -> str:
            return f"{fmt(b.get(c), '.0f')} / {fmt(b.get(a), '.0f')}"

        floor_ratio = w["floor"] / w["a"] if w.get("floor") and w.get("a") else None
        add(
            f"| q{w['id']} | {fmt(w['a'])} | {fmt(w.get('floor'))} | {fmt(w['c'])} | "
            f"{fmt(w['c_over_a'], '.2f')} | {fmt(floor_ratio, '.2f')} | "
            f"{fmt(w.get('c_over_floor'), '.2f')} | {fmt(b.get('plan_ms'), '.1f')} | "
            f"{pair('analyze_c_ms', 'analyze_a_ms')} | {fmt(b.get('verify_ms'), '.1f')} | "
            f"{pair('optimize_ms', 'optimize_a_ms')} | {pair('execute_ms', 'execute_a_ms')} | "
            f"{fmt(b.get('audit_ms'), '.1f')} |"
        )
    add("")


def _skipping(tpcds: dict[str, Any], add: Add) -> None:
    """Files read by C against A, and the date-predicate probes."""
    s = tpcds.get("summary") or {}
    add("### Delta file skipping and partition pruning\n")
    more = s.get("c_reads_more_files") or []
    add(
        "Files read per query come from the `number of files read` metric of every "
        "`FileSourceScanExec` in the executed (final adaptive) plan, subqueries included, "
        "reused exchanges not counted twice. Over all TPC-DS queries, C reads more files "
        "than A in: " + (", ".join(f"q{x}" for x in more) if more else "**none**") + ".\n"
    )
    if s.get("skipping"):
        add("Probe queries with date predicates (files read A / B / C; partitions read A / C):\n")
        add("| probe | what | files A | files B | files C | partitions A | partitions C | kept |")
        add("|---|---|---|---|---|---|---|---|")
        for p in s["skipping"]:
            add(
                f"| {p['id']} | {p['what']} | {p['files_a']} | {p['files_b']} | "
                f"{p['files_c']} | {fmt(p['partitions_a'], 'd')} | "
                f"{fmt(p['partitions_c'], 'd')} | {'yes' if p['same'] else '**NO**'} |"
            )
        total_files = (tpcds.get("config") or {}).get("fact_files")
        add(
            f"\n(Each range-partitioned fact table has {total_files} files; `inventory` one "
            "file per weekly partition.)\n"
        )


def _all_queries(tpcds: dict[str, Any], add: Add) -> None:
    """Every query's medians, ratios and files read (folded)."""
    add("<details><summary>All queries (median seconds)</summary>\n")
    add("| query | A | A' | B | C | C/A | C/A' | C/B | plan ms | files A | files C | note |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for q in tpcds.get("queries", []):
        fa, fc = q.get("files", {}).get("A") or {}, q.get("files", {}).get("C") or {}
        notes = "; ".join(f"{k} failed: {e[:80]}" for k, e in q.get("errors", {}).items())
        if q.get("flag"):
            notes = (notes + "; " if notes else "") + "C > 1.25 x B"
        add(
            f"| q{q['id']} | {fmt(q.get('a_med'))} | {fmt(q.get('floor_med'))} | "
            f"{fmt(q.get('b_med'))} | {fmt(q.get('c_med'))} | {fmt(q.get('c_over_a'), '.2f')} | "
            f"{fmt(q.get('c_over_floor'), '.2f')} | "
            f"{fmt(q.get('c_over_b'), '.2f')} | {fmt(q.get('plan_ms'), '.1f')} | "
            f"{sum(x for x in fa.values() if isinstance(x, int)) if fa else '-'} | "
            f"{sum(x for x in fc.values() if isinstance(x, int)) if fc else '-'} | {notes} |"
        )
    add("\n</details>\n")


def breakdown_section(tpcds: dict[str, Any], add: Any) -> None:
    """Where C's time goes, per query: every step of the governed pipeline (issue 14)."""
    rows = [q for q in tpcds.get("queries", []) if q.get("breakdown")]
    if not rows:
        return
    add("### Where the time goes (per query, ms)\n")
    add(
        "Each step of the governed pipeline timed on its own, once per query after its "
        "measured runs (`benchmarks/breakdown.py`): the planner (parse, resolve, decide, "
        "rewrite, generate), Spark's parse + analysis, optimisation and execution "
        "(`collect()`) of the raw text (A's steps) and of the rewritten text, plan "
        "verification (warm view cache) and the audit write.\n"
    )
    heads = (
        "plan",
        "analyze raw",
        "analyze governed",
        "verify",
        "optimize raw",
        "optimize governed",
        "execute raw",
        "execute governed",
        "audit",
    )
    add("| query | " + " | ".join(heads) + " |")
    add("|---" * (len(heads) + 1) + "|")
    meds = (tpcds.get("summary") or {}).get("breakdown") or {}
    if meds:
        add("| **median** | " + " | ".join(f"**{meds[k]['median']:.1f}**" for k in PARTS) + " |")
    for q in rows:
        add(f"| q{q['id']} | " + " | ".join(f"{q['breakdown'][k]:.1f}" for k in PARTS) + " |")
    add("")
