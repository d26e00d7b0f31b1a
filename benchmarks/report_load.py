"""REPORT.md's load section (issue 39, benchmarks/load.py): the side-by-side table per N,
the targets as the benchmark judged them, fairness and the soak; and, run alone, the same
section spliced into an existing REPORT.md from a `load.py --json` file, leaving every
other section as it was:

    python benchmarks/report_load.py LOAD.json [--report benchmarks/REPORT.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import load_soak, plots  # noqa: E402
from benchmarks.report_kit import Add, Img, splice_section  # noqa: E402

TITLE = "## Many analysts at once (issue 39)"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def load_section(results: dict[str, Any], add: Add, img: Img) -> None:
    """The load table, gateway and plain side by side per N, with the ratios and targets."""
    add(f"{TITLE}\n")
    ld = results.get("load") or {}
    if not ld.get("rows"):
        add("_not run or failed_\n")
        return
    m = ld.get("machine") or {}
    srv = ld.get("server") or {}
    tp = ld.get("tpcds") or {}
    qs = ", ".join(f"q{q}" for q in tp.get("queries", []))
    heavy = (
        f"TPC-DS queries at sf {ld['tpcds_scale']:g} ({qs}"
        ": star joins over store_sales, the governed tables tpcds.sf1.* under "
        "benchmarks/tpcds_policies.py's filters and masks for these users, plain: temp views "
        "of the same Delta paths) in the join's place"
        if ld.get("tpcds_scale")
        else "a join with an aggregate over the demo's tables"
    )
    rest = (
        " REST: the same N as REST clients (one process each, each its own user) sending the "
        "same statements as SQL texts (the DataFrame operation as the SQL of the same "
        "aggregate) to the REST statements API, served by the same server process (`lakegate "
        "serve`'s app beside the gateway, one Lakegate, one JVM). There is no plain REST: "
        "REST is judged against **plain Spark Connect running the same statements at the "
        "same N** (the plain row), i.e. what an analyst would get without Lakegate at all; "
        "its audit is checked request by request (each request's own line, by the request "
        "id it was answered with and the statement's hash, exactly once; its statement's "
        "lines at most once per phase and table, at least one when it was answered 200)."
        if any(r["side"] == "rest" for r in ld["rows"])
        else ""
    )
    add(
        f"`benchmarks/load.py`: N stock Spark Connect clients, each its own "
        "process and its own user (alice00, bob01, carol02, ...: each under the policies of "
        "the demo persona it is named after, alice, bob, carol, dana, erin; runs before "
        "2026-12-06 14:00 UTC used the five personas themselves, 6-13 clients each at N = 32 "
        f"and 64), run a mix of short lookups, {heavy}, DataFrame "
        f"operations and writes (1 in 6) for {ld['seconds']:g} s, through the gateway and on "
        "the plain Spark Connect service behind it (same JVM, same Delta tables), the sides "
        f"taking turns (the order rotating), {ld['reps']} run(s) per side per N.{rest} "
        f"Gateway settings: max_statements_per_user {srv.get('per_user')}, "
        f"statement_queue_wait {srv.get('queue_wait')} s, "
        f"fair_share_slots {srv.get('fair_share_slots', 0)}{_auto(srv)} (0: off), "
        f"{srv.get('workers')} gRPC threads, spark.scheduler.mode "
        f"{srv.get('scheduler_mode', 'FAIR')}; "
        "REST runs statements on the app's api.statement_threads pool (32 by default; a "
        "fixed 8 before 2026-12-06). Machine: "
        f"{m.get('cpus')} cores, load average at the start {_load(m)} (shared with other "
        "work: absolute figures are inflated; the ratios are what the targets judge).\n"
    )
    if tp:
        add(
            f"TPC-DS data: written once under `{tp.get('dir')}` (benchmarks/load_tpcds.py; "
            "`make bench-sf1` writes and reuses the same directory) and reused by every run.\n"
        )
    line_block(ld, add)
    add(img("load", "load: throughput and p99 per N"))
    other = ld.get("other_line")
    if other and other.get("error"):
        add(f"The other line ({other.get('line')}) did not finish: {other['error']}\n")
    if other and other.get("rows"):
        add(f"### The other line: {other['line']}\n")
        add(
            f"The same N, sides and mix with the other Spark line's client and server "
            f"({other['seconds']:g} s per run, {other['reps']} run(s) per side per N; no "
            f"fairness or soak), load average at its start {_load(other.get('machine') or {})}."
            "\n"
        )
        line_block(other, add)
    floor_run = ld.get("floor_run")
    if floor_run and floor_run.get("rows"):
        floor_section(floor_run, add)
    notes = ld.get("notes") or []
    if notes:  # what the run's operator found when measuring why a target was missed
        add("What was measured about the misses, and what this run did not cover:\n")
        for note in notes:
            add(f"- {note}")
        add("")
    fair = ld.get("fairness")
    if fair:
        verdict = "**met**" if fair["met"] else "**NOT met**"
        add(
            f"Fairness (item 3): alice's short lookup p50 {fair['idle']['p50']:.0f} ms idle, "
            f"{fair['loaded']['p50']:.0f} ms (p99 {fair['loaded']['p99']:.0f}) while erin keeps "
            f"{fair['count']} heavy queries submitted ({fair['heavy']['done']} ran, "
            f"{fair['heavy']['busy']} answered busy, {fair['heavy']['failed']} failed"
            f"{_refused(fair['heavy'])}): "
            f"{fair['ratio']:.2f}x idle, target <= 2x: {verdict}"
        )
        plain = fair.get("plain")
        if plain:
            add(
                f"On plain Spark Connect (no limits) the same: {plain['idle']['p50']:.0f} ms "
                f"idle, {plain['loaded']['p50']:.0f} ms loaded ({plain['ratio']:.2f}x; "
                f"{plain['heavy']['done']} heavy queries ran)."
            )
        add("")
    by_length = ld.get("fairness_by_task_length") or []
    if by_length:
        add(
            "The same with shorter heavy queries (fewer rows generated per order row, so "
            "shorter tasks; Spark runs a task to its end once started):\n"
        )
        add("| rows per order | erin's query alone, p50 | gateway: lookup loaded/idle | plain |")
        add("|---|---|---|---|")
        for f in by_length:
            add(
                f"| {f['rows']:,} | {f['heavy_alone']['p50']:.0f} ms | {f['ratio']:.2f}x | "
                f"{f['plain']['ratio']:.2f}x |"
            )
        add("")
    soak = ld.get("soak")
    if soak:
        run = soak["run"]
        add(
            f"Soak (item 4): N={soak['n']} through the gateway for {soak['minutes']:g} minutes "
            f"({soak['samples']} samples of the server; {run['throughput']:.2f} ops/s, p99 "
            f"{_ms(run['p99'])} ms, {sum(run['errors'].values())} errors, audit lost "
            f"{run['audit']['lost']}, duplicated {run['audit']['duplicated']}). Growth over "
            "the last half (mean of the last tenth of the samples against the highest mean of "
            "a tenth before the last half; target under 5 % for memory, fds and threads; the "
            "caches also within their configured bounds):\n"
        )
        load_soak.markdown(soak, add)
        add("")


def floor_section(run: dict[str, Any], add: Add) -> None:
    """A run with the floor (`load.py --floor`): what the policies cost apart from what
    Lakegate costs."""
    add(f"### Against the floor: what the policies cost, and what Lakegate costs ({run['line']})\n")
    add(
        "The same mix with a third Connect side, the floor: plain Spark Connect where each "
        "user reads every table through a temp view holding that user's governed view "
        '(Lakegate\'s own rewrite of `SELECT *` for the user, every "does this apply to me" '
        "test already answered) over a temp view of the raw table made as plain makes its "
        "own. The floor evaluates the same row filters and column masks as the gateway, "
        "with no gateway, no verification and no audit: gateway/floor is what Lakegate "
        "itself costs, floor/plain what evaluating the policies costs. "
        f"{run['seconds']:g} s per run, {run['reps']} run(s) per side per N, the sides "
        f"taking turns (the order rotating); load average at the start "
        f"{_load(run.get('machine') or {})}"
        + (f"; {run['stopped']}" if run.get("stopped") else "")
        + ".\n"
    )
    line_block(run, add)


def side_label(r: dict[str, Any]) -> str:
    if r["side"] != "rest":
        return str(r["side"])
    clients = r.get("clients", r["n"])
    return "REST" if clients == r["n"] else f"REST ({clients} clients)"


def line_block(ld: dict[str, Any], add: Add) -> None:
    """One Spark line's table, client processes, targets and errors."""
    add(f"{ld['line']}:\n")
    add(
        "| N | side | ops/s | p50 ms | p95 ms | p99 ms | errors | gateway CPU | JVM CPU | "
        "gateway RSS MB | JVM RSS MB | JVM heap MB | audit requests / lost / dup |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ld["rows"]:
        a = r.get("audit")
        audit = f"{a['requests']} / {a['lost']} / {a['duplicated']}" if a else "-"
        heap = r.get("heap_mb")
        add(
            f"| {r['n']} | {side_label(r)} | {r['throughput']:.2f} | {_ms(r['p50'])} | "
            f"{_ms(r['p95'])} | {_ms(r['p99'])} | {sum(r['errors'].values())} | "
            f"{r['cpu_py']:.2f} | {r['cpu_jvm']:.2f} | {r['rss_py_mb']:.0f} | "
            f"{r['rss_jvm_mb']:.0f} | {'-' if not heap else f'{heap:.0f}'} | {audit} |"
        )
    add("")
    procs = {
        (r["n"], side_label(r), r["client_processes"], r["clients_per_process"]) for r in ld["rows"]
    }
    threaded = sorted(p for p in procs if p[3] > 1)
    rss = {
        kind: max(
            (r["client_rss_mb"] for r in ld["rows"] if (r["side"] == "rest") == rest), default=0
        )
        for kind, rest in (("Connect", False), ("REST", True))
    }
    add(
        "Clients: one process each (RSS per client process up to "
        + ", ".join(f"{v:.0f} MB {k}" for k, v in rss.items() if v)
        + ")"
        + (
            "; except "
            + ", ".join(
                f"N={n} {side}: {p} processes of {t} clients (each its own session and user)"
                for n, side, p, t in threaded
            )
            if threaded
            else ""
        )
        + ". CPU is cores used over the run (1.0 = one core busy); the gateway is the server's "
        "Python process (Connect gateway and REST), the JVM serves every side; RSS and heap "
        "are the run's peaks (heap: used, sampled every 5 s).\n"
    )
    add("Targets (issue 39 item 2; REST against plain Spark Connect):\n")
    for t in ld.get("targets", []):
        verdict = "**met**" if t["met"] else "**NOT met**"
        if "ratio" in t:
            fig = f"ratio {t['ratio']:.2f}"
            if len(t.get("ratio_reps") or []) > 1:  # the spread the verdict sits in
                fig += "; per repetition " + ", ".join(f"{r:.2f}" for r in t["ratio_reps"])
        elif "errors" in t:
            fig = f"errors only the governed side gave: {t['errors'] or 'none'}"
        else:
            fig = (
                f"{t['audit'].get('requests', 0)} requests, lost {t['audit'].get('lost')}, "
                f"duplicated {t['audit'].get('duplicated')}"
            )
        add(f"- N={t['n']}, {t['target']}: {verdict} ({fig})")
    add("")
    floor = ld.get("against_floor") or []
    if floor:
        add(
            "Against the floor (plain Spark Connect over each user's governed views: the same "
            "filters and masks, no gateway; figures, not targets):\n"
        )
        for f in floor:
            tp, p99 = f["throughput_ratio"], f["p99_ratio"]
            add(
                f"- N={f['n']}, {side_label(f)}/floor: "
                f"throughput {'-' if tp is None else f'{tp:.2f}x'}, "
                f"p99 {'-' if p99 is None else f'{p99:.2f}x'}"
            )
        add("")
    errs = {
        (r["n"], side_label(r), k): v for r in ld["rows"] for k, v in r["error_samples"].items()
    }
    if errs:
        add("Errors seen (kind: first line of one):\n")
        for (n, side, kind), message in sorted(errs.items()):
            add(f"- N={n} {side}: `{kind}`: {message}")
        add("")


def _load(m: dict[str, Any]) -> str:
    la = m.get("load_avg")
    return f"{la[0]:.1f}" if la else "?"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def splice(report: Path, results: dict[str, Any], charts_dir: Path) -> None:
    """Replace (or append before the closing line) the load section of `report`."""
    charts_dir.mkdir(parents=True, exist_ok=True)
    chart = plots.chart_load(results.get("load") or {}, charts_dir / "load.png")
    rel = Path("charts") / "load.png"
    lines: list[str] = []
    load_section(
        results,
        lines.append,
        lambda name, alt: f"![{alt}]({rel})\n" if chart else f"_(no {alt} chart: no data)_\n",
    )
    splice_section(report, TITLE, "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("load_json", type=Path)
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "REPORT.md")
    args = ap.parse_args()
    data = json.loads(args.load_json.read_text())
    splice(args.report, {"load": data}, args.report.parent / "charts")
    print(f"wrote the load section of {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _auto(srv: dict[str, Any]) -> str:
    """Runs since session 25 follow Lakegate's default, the backend's task slots."""
    return " (auto: the backend's task slots)" if srv.get("fair_share_auto") else ""


def _refused(heavy: dict[str, Any]) -> str:
    """The refusals on record (runs since session 25), which a Spark 4 client that waits out
    the busy answer's retry delay does not itself count as answered busy."""
    n = heavy.get("refused")
    return "" if n is None else f"; {n} statements refused as busy on record, retried by the client"
