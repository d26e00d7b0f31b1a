"""Run every Lakegate benchmark and write benchmarks/REPORT.md with PNG charts (issue 7).

Each scenario runs as its own subprocess (each stays runnable alone), its output streamed
with a prefix as it goes; the figures are collected from their --json output or, for the
scripts that print text, parsed from it. Then the report and charts are written. A scenario
that fails (non-zero exit: its measurement raised, see benchmarks/harness.py) fails the
whole run, loudly, after the report is written with what did run.

    python benchmarks/run_all.py [--sf 0.05] [--rounds 3] [--quick]
                                 [--wait-load 1.5 --wait-max 2400] [--only tpcds,rewrite]

`make bench` runs it; pass options with `make bench BENCH_ARGS="--sf 0.1"`; `make bench-sf1`
is the issue 14 run (TPC-DS sf 1, all 99 queries).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks import harness, report  # noqa: E402
from benchmarks.report_explain import explain  # noqa: E402
from benchmarks.tpcds_summary import summarize  # noqa: E402

# Spark's ivy resolver and log4j start-up lines: noise in a benchmark log
NOISE = (
    ":: ",
    "\t:: ",
    "\tconfs",
    "\tfound",
    "\t---",
    "\t|",
    "Ivy Default",
    "The jars for",
    "io.delta#",
    "\tio.delta#",
    "\torg.antlr#",
    "\t0 artifacts",
    "\tdefault",
    "Setting default log level",
    "To adjust logging level",
    "\t-----",
)
STEPS = (
    "rewrite",
    "scaling",
    "decisions",
    "audit",
    "api",
    "analysis",
    "connect",
    "cluster",
    "cli",
    "tpcds",
    "mapping",
    "connect_tpcds",
    "load",
    "load_kill",
)


#: The steps measured again on the other Spark line (issue 26): what differs between lines.
LINE_STEPS = ("tpcds", "connect", "mapping")


def other_line_python() -> tuple[str, Path]:
    """The other Spark line and its virtual environment's interpreter (`make` builds both:
    .venv-spark4, .venv-spark35)."""
    from governance.spark_line import LINE

    other = "3.5" if LINE.name == "4" else "4"
    venv = ".venv-spark35" if other == "3.5" else ".venv-spark4"
    return other, ROOT / venv / "bin" / "python"


def run_step(
    name: str, argv: list[str], timeout: float, echo: bool = True, python: str | None = None
) -> dict[str, Any]:
    """Run one benchmark, streaming its output with a prefix; returns rc, stdout, seconds.
    `python`: another interpreter (the other Spark line's)."""
    cmd = [python or sys.executable, *argv]
    shown = " ".join([python or "python", *argv])
    print(f"\n=== [{name}] {shown}", flush=True)
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out: list[str] = []

    def pump(stream: Any, keep: bool) -> None:
        for line in stream:
            if keep:
                out.append(line)
                if not echo:
                    continue
            if line.startswith(NOISE) or " WARN " in line[:40]:
                continue
            print(f"[{name}] {line.rstrip()}", flush=True)

    threads = [
        threading.Thread(target=pump, args=(proc.stdout, True), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, False), daemon=True),
    ]
    samples: list[float] = []

    def sample() -> None:  # the 1-minute load while the benchmark runs (others' work shows)
        while proc.poll() is None:
            samples.append(os.getloadavg()[0])
            time.sleep(5)

    threads.append(threading.Thread(target=sample, daemon=True))
    for t in threads:
        t.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9
        print(f"[{name}] timed out after {timeout:.0f} s", flush=True)
    for t in threads:
        t.join(timeout=10)
    secs = time.perf_counter() - t0
    print(f"=== [{name}] exit {rc} in {secs:.0f} s", flush=True)
    return {
        "command": shown,
        "rc": rc,
        "ok": rc == 0,
        "seconds": secs,
        "stdout": "".join(out),
        "load_before": load0,
        "load_after": os.getloadavg()[0],
        "load_mean": sum(samples) / len(samples) if samples else load0,
        "load_max": max(samples, default=load0),
    }


def wait_for_quiet(threshold: float, max_wait: float) -> tuple[float, float]:
    """Sleep until the 1-minute load average is below `threshold` (at most `max_wait` s)."""
    t0 = time.monotonic()
    load = os.getloadavg()[0]
    while load >= threshold and time.monotonic() - t0 < max_wait:
        print(
            f"load average {load:.2f} >= {threshold}: waiting "
            f"({time.monotonic() - t0:.0f}/{max_wait:.0f} s)",
            flush=True,
        )
        time.sleep(30)
        load = os.getloadavg()[0]
    return load, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.05, help="TPC-DS scale factor")
    ap.add_argument("--rounds", type=int, default=3, help="TPC-DS interleaved rounds")
    ap.add_argument("--queries", help="TPC-DS query subset, e.g. 1-10 (default: all)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: tiny scale, 1 round, 8 queries, short benchmarks",
    )
    ap.add_argument("--only", help=f"comma list of steps to run: {', '.join(STEPS)}")
    ap.add_argument("--report", default=str(HERE / "REPORT.md"))
    ap.add_argument("--charts", default=str(HERE / "charts"))
    ap.add_argument("--results-json", help="also write every figure collected to this file")
    ap.add_argument(
        "--wait-load",
        type=float,
        default=1.5,
        help="wait for the 1-minute load average to drop below this first",
    )
    ap.add_argument(
        "--wait-max",
        type=float,
        default=0,
        help="seconds to wait for a quiet machine (default 0: do not wait)",
    )
    ap.add_argument("--workdir", help="where the TPC-DS data goes (default: temporary)")
    ap.add_argument(
        "--other-line",
        action="store_true",
        help="also run the TPC-DS and Connect steps on the other Spark line (its venv)",
    )
    ap.add_argument(
        "--other-rounds",
        type=int,
        default=1,
        help="TPC-DS interleaved rounds on the other line (default 1)",
    )
    ap.add_argument(
        "--soak-minutes",
        type=float,
        default=10.0,
        help="the load step's soak at N = 16 (issue 39 asks for 60; default 10)",
    )
    ap.add_argument(
        "--carry",
        metavar="RESULTS_JSON",
        help="a partial run (--only) keeps the steps it does not run from this earlier "
        "--results-json file, each named in the report's caveats with its date",
    )
    ap.add_argument(
        "--regenerate",
        metavar="RESULTS_JSON",
        help="run nothing: rewrite the report from a --results-json file",
    )
    args = ap.parse_args(argv)
    if args.regenerate:
        results = json.loads(Path(args.regenerate).read_text())
        results["why"] = explain(results)
        out = report.write_report(results, Path(args.report), Path(args.charts))
        print(f"rewrote {out} from {args.regenerate}")
        return 0

    only = set(args.only.split(",")) if args.only else set(STEPS)
    unknown = only - set(STEPS)
    if unknown:
        ap.error(f"unknown steps {sorted(unknown)}; known: {', '.join(STEPS)}")
    started = time.perf_counter()
    load, waited = (
        wait_for_quiet(args.wait_load, args.wait_max)
        if args.wait_max > 0
        else (os.getloadavg()[0], 0.0)
    )
    results: dict[str, Any] = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": harness.machine_info(),
        "versions": harness.versions(),
        "steps": {},
        "load": {"before": load, "waited_s": waited},
        "caveats": [],
        "not_run": [s for s in STEPS if s not in only],
    }
    if load >= args.wait_load:
        results["load"]["note"] = (
            f"The machine was not quiet (1-minute load {load:.2f} >= {args.wait_load}"
            + (f" after waiting {waited:.0f} s" if waited else "")
            + "): other work shared the 2 cores, so absolute times are inflated and noisier."
        )

    quick = args.quick
    with tempfile.TemporaryDirectory(prefix="lakegate-bench-") as tmp:
        tmpd = Path(tmp)
        plan: list[tuple[str, list[str], float]] = []
        plan.append(
            ("rewrite", ["benchmarks/rewrite.py", "--json", "--rounds", "1" if quick else "5"], 900)
        )
        plan.append(
            (
                "scaling",
                [
                    "benchmarks/scaling.py",
                    "--json",
                    str(tmpd / "scaling.json"),
                    "--reps",
                    "2" if quick else "20",
                ]
                + (["--tables", "1", "2", "4", "--depths", "1", "2", "4"] if quick else []),
                900,
            )
        )
        plan.append(
            (
                "decisions",
                [
                    "benchmarks/decisions.py",
                    "--lines",
                    "1000",
                    "10000",
                    *([] if quick else ["100000"]),
                    "--requests",
                    "300" if quick else "2000",
                ],
                1800,
            )
        )
        plan.append(("audit", ["benchmarks/audit.py", "--seconds", "0.3" if quick else "2"], 900))
        plan.append(("api", ["benchmarks/api.py", *(["--seconds", "1"] if quick else [])], 1200))
        an = ["benchmarks/analysis.py", "--json", str(tmpd / "analysis.json")]
        if args.workdir and (Path(args.workdir) / "delta" / "store_sales").is_dir():
            an += ["--delta", str(Path(args.workdir) / "delta")]  # the TPC-DS tables themselves
        plan.append(("analysis", an + (["--rounds", "1", "--reps", "3"] if quick else []), 900))
        plan.append(
            (
                "connect",
                ["benchmarks/connect.py", "--json", "--rounds", "3" if quick else "20"],
                1200,
            )
        )
        cl = ["benchmarks/cluster.py", "--json", str(tmpd / "cluster.json")]
        cl += ["--sf", "0.01", "--rounds", "1", "--queries", "3,42,52"] if quick else []
        plan.append(("cluster", cl, 3600))
        cli = ["benchmarks/cli_start.py", "--json", str(tmpd / "cli.json")]
        plan.append(("cli", [*cli, "--rounds", "1" if quick else "3"], 1800))
        tp = [
            "benchmarks/tpcds_delta.py",
            "--json",
            str(tmpd / "tpcds.json"),
            "--sf",
            "0.01" if quick else str(args.sf),
            "--rounds",
            "1" if quick else str(args.rounds),
        ]
        if quick and not args.queries:
            tp += ["--queries", "1-8"]
        if args.queries:
            tp += ["--queries", args.queries]
        if args.workdir:
            tp += ["--dir", args.workdir, "--reuse", "--keep"]
        plan.append(("tpcds", tp, 7200))
        mp = ["benchmarks/mapping.py", "--json", str(tmpd / "mapping.json")]
        mp += [
            "--sf",
            "0.01" if quick else str(args.sf),
            "--rounds",
            "1" if quick else str(args.rounds),
        ]
        if args.workdir:  # the mapping filter over the TPC-DS step's own store_sales
            mp += ["--workdir", args.workdir, "--reuse"]
        plan.append(("mapping", mp, 3600))
        if args.workdir:  # the gateway on the very TPC-DS tables the step above used
            ct = ["benchmarks/connect.py", "--json", "--tpcds", args.workdir]
            if quick:  # queries whose tables the quick TPC-DS step (queries 1-8) wrote
                ct += ["--queries", "3,7"]
            plan.append(("connect_tpcds", [*ct, "--rounds", "1" if quick else "5"], 3600))

        ld = ["benchmarks/load.py", "--json", str(tmpd / "load.json"), "--rest"]
        if quick:  # the harness's smoke: N = 1 and 4, no fairness or soak
            ld += ["--clients", "1,4", "--seconds", "20"]
        else:
            ld += ["--fairness", "--soak-minutes", str(args.soak_minutes)]
        if args.workdir and args.sf == 1 and not quick:  # TPC-DS sf 1 in the mix, same data
            ld += ["--tpcds-scale", "1", "--tpcds-dir", args.workdir]
        plan.append(("load", ld, 7200))
        if not quick:  # three gateway starts: minutes on a loaded machine
            kl = ["benchmarks/load_kill.py", "--json", str(tmpd / "load_kill.json")]
            plan.append(("load_kill", kl, 3600))

        for i, (name, argv_, timeout) in enumerate(plan, 1):
            if name not in only:
                continue
            print(
                f"\n##### step {i}/{len(plan)}: {name} "
                f"({time.perf_counter() - started:.0f} s so far)",
                flush=True,
            )
            st = run_step(name, argv_, timeout, echo=name != "rewrite")
            stdout = st.pop("stdout")
            results["steps"][name] = st
            # TPC-DS writes its figures before failing on queries only C fails (product bugs):
            # the report shows them, and the run still fails
            # load_kill writes its checks before failing on one: the report shows which
            if st["ok"] or (name in ("tpcds", "load_kill") and (tmpd / f"{name}.json").is_file()):
                collect(name, stdout, tmpd, results)
            if st["load_max"] >= args.wait_load + 2:  # the benchmark itself adds up to ~2
                results["caveats"].append(
                    f"{name}: the 1-minute load average reached {st['load_max']:.1f} (mean "
                    f"{st['load_mean']:.1f}) while it ran on {os.cpu_count()} cores: other "
                    "work on the machine competed with it"
                )

        if args.other_line:
            run_other_line(args, plan, only, tmpd, results)

    results["load"]["after"] = os.getloadavg()[0]
    results["run_s"] = time.perf_counter() - started
    if quick:
        results["caveats"].append(
            "QUICK smoke run (--quick): tiny scale and few rounds; "
            "these figures are not the benchmark."
        )
    if args.carry:
        carry(json.loads(Path(args.carry).read_text()), only, results)
    results["caveats"] += default_caveats(results)
    results["why"] = explain(results)
    out = report.write_report(results, Path(args.report), Path(args.charts))
    if args.results_json:
        Path(args.results_json).write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {out} and charts in {args.charts} ({results['run_s']:.0f} s in all)")
    s = (results.get("tpcds") or {}).get("summary")
    if s and s.get("c_over_a") is not None:
        print(
            f"headline: total C/A {s['c_over_a']:.3f}, total C/B {s['c_over_b']:.3f}, "
            f"{len(s['flagged'])} queries over 1.25 x B"
        )
    return verdict(results["steps"])


def carry(earlier: dict[str, Any], only: set[str], results: dict[str, Any]) -> None:
    """The figures of the steps this run left out, from an earlier run, on both lines;
    TPC-DS's summary is computed again from its per-query figures by this version's code,
    so every target reads the same way. The report names each carried step and its date."""
    when = earlier.get("date", "an earlier run")
    origin = earlier.get("carried_from") or {}  # steps the earlier run carried in turn
    carried: dict[str, str] = {}
    # a step is measured again on a line only if this run ran that line: `--only tpcds`
    # without --other-line keeps the other line's TPC-DS figures
    other_measured = only if "other_line" in results else set()
    if (theirs := earlier.get("other_line")) and "other_line" not in results:
        results["other_line"] = {"line": theirs["line"], "python": theirs.get("python")}
    for name in STEPS:
        for into, src, measured in (
            (results, earlier, only),
            (results.get("other_line"), earlier.get("other_line") or {}, other_measured),
        ):
            if name in measured or into is None or src.get(name) is None:
                continue
            into[name] = src[name]
            if name == "tpcds":
                t = into[name]
                t["summary"] = summarize(t["queries"], t.get("probes", []))
            suffix = f"@{into['line']}" if into is not results else ""
            if name + suffix in earlier.get("steps", {}):
                results["steps"][name + suffix] = earlier["steps"][name + suffix]
            carried[name + suffix] = origin.get(name + suffix, when)
    if carried:
        results["not_run"] = [s for s in results["not_run"] if s not in carried]
        results["carried_from"] = carried
        by_date: dict[str, list[str]] = {}
        for step, date in carried.items():
            by_date.setdefault(date, []).append(step)
        results["caveats"].append(
            "Not measured again in this run; their figures are those of earlier runs: "
            + "; ".join(f"{', '.join(steps)} of {date}" for date, steps in by_date.items())
            + "."
        )


def run_other_line(
    args: argparse.Namespace,
    plan: list[tuple[str, list[str], float]],
    only: set[str],
    tmpd: Path,
    results: dict[str, Any],
) -> None:
    """The line-dependent steps again on the other Spark line, same data, same queries;
    their figures under results["other_line"], their runs among the steps (a failure
    fails the run)."""
    line, python = other_line_python()
    if not python.is_file():
        raise harness.ScenarioFailed(
            f"--other-line: {python} is missing; build it with `make test-cross` or "
            f"`make .venv-spark{line.replace('.', '')}/.installed-spark"
            f"{line.replace('.', '')} SPARK={line}`"
        )
    into: dict[str, Any] = {"line": line, "python": str(python)}
    results["other_line"] = into
    for name, argv_, timeout in plan:
        if name not in only or not name.startswith(LINE_STEPS):
            continue
        if name == "tpcds":
            at = argv_.index("--rounds") + 1
            argv_ = [*argv_[:at], str(args.other_rounds), *argv_[at + 1 :]]
        for out in ("tpcds.json", "mapping.json"):  # never this line's figures as that's
            (tmpd / out).unlink(missing_ok=True)
        key = f"{name}@{line}"
        print(f"\n##### on Spark {line}: {name}", flush=True)
        st = run_step(key, argv_, timeout, echo=True, python=str(python))
        stdout = st.pop("stdout")
        results["steps"][key] = st
        if st["ok"] or (name == "tpcds" and (tmpd / "tpcds.json").is_file()):
            collect(name, stdout, tmpd, into)


def verdict(steps: dict[str, dict[str, Any]]) -> int:
    """0 if every scenario ran; else name the failed ones loudly and return 1."""
    failed = [f"{name} (exit {st['rc']})" for name, st in steps.items() if not st["ok"]]
    if failed:
        print(
            f"\nBENCHMARK RUN FAILED: {', '.join(failed)}; their output above says why, "
            "and their figures are missing from the report",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


def collect(name: str, stdout: str, tmpd: Path, results: dict[str, Any]) -> None:
    """A finished scenario's figures into `results` (a scenario without them raises)."""
    if name == "rewrite":
        rw = results["rewrite"] = json.loads(stdout[stdout.index("{") :])
        print(
            f"[rewrite] warm p50 {rw['p50_ms']:.2f} ms, p99 {rw['p99_ms']:.2f} ms, max "
            f"{rw['max_ms']:.2f} ms; cold max {rw['cold_max_ms']:.2f} ms; "
            f"{rw['over_sqlglot']:.2f} x sqlglot",
            flush=True,
        )
    elif name == "scaling":
        results["scaling"] = json.loads((tmpd / "scaling.json").read_text())
    elif name == "decisions":
        results["decisions"] = report.parse_decisions(stdout)
    elif name == "audit":
        results["audit"] = report.parse_audit(stdout)
    elif name == "api":
        results["api"] = {"text": stdout, "rows": report.parse_api(stdout)}
    elif name in ("connect", "connect_tpcds"):
        results[name] = json.loads(stdout[stdout.index("\n{") :])
    elif name in ("cluster", "cli", "analysis", "mapping", "load", "load_kill"):
        results[name] = json.loads((tmpd / f"{name}.json").read_text())
        if name == "cli" and set(results[name].get("median") or {}) != {"cli", "gateway", "bare"}:
            raise harness.ScenarioFailed("cli: the cli, gateway and bare medians are not all there")
    elif name == "tpcds":
        results["tpcds"] = json.loads((tmpd / "tpcds.json").read_text())
    data = results[name]
    if not (data.get("rows") if name in ("audit", "api") else data):
        raise harness.ScenarioFailed(f"{name} exited 0 but printed no figures")


def default_caveats(results: dict[str, Any]) -> list[str]:
    out = []
    t = results.get("tpcds") or {}
    sf = (t.get("config") or {}).get("sf")
    if sf is not None and sf < 1:
        out.append(
            f"TPC-DS ran at sf={sf} on {results['machine'].get('cpus')} cores so the "
            "run fits in minutes; at this size most queries take well under a few "
            "seconds, so fixed per-statement costs (planning, analysis, verification, "
            "audit) weigh far more than they would on real data. Re-run with "
            "`make bench-sf1` (the issue 14 run) for a fairer ratio."
        )
    out.append(
        "A, A', B and C share one SparkSession and run interleaved per query, so JIT, "
        "caches and background load hit all four alike; medians of the rounds are "
        "reported, not means."
    )
    out.append(
        "Tables are not Hive-partitioned except `inventory` (by week); TPC-DS queries "
        "put their date ranges on `date_dim`, which open-source Spark turns into file "
        "skipping only through dynamic partition pruning on partition columns, so most "
        "queries read every file in A as in C. The probes test literal predicates."
    )
    return out


if __name__ == "__main__":
    sys.exit(harness.main("run_all", main))
