"""Many analysts at once (issue 39): N concurrent stock Spark Connect clients through the
gateway against the same N on plain Spark Connect, a mixed workload for a fixed time.

One server process (load_server.py: the demo lakehouse, the gateway, and the plain Spark
Connect service it forwards to, in one driver JVM) and N client processes
(load_client.py), each its own user (load_server.py `analyst`: alice00, bob01, ..., under
the policies of the demo persona it is named after), each running the mix of short
lookups, a join with an aggregate, DataFrame operations and writes for `--seconds`. For
every N the gateway and the plain side run alternately (ABAB: the order flips from one N
and repetition to the next), so background load hits both. Per N and side: throughput
(statements that ended by the deadline, over `--seconds`; those still running then finish
and count in the latencies only), p50/p95/p99 latency, errors by kind, and the server's
CPU (gateway Python process and JVM apart) and memory; after each gateway run, every
request a client sent is looked up in the audit log by its hash (lost: a request with
fewer lines than it was sent; duplicated: more).

REST (`--rest`): N REST clients too (load_client.py's RestAnalyst, one process each up to
`--max-processes`, each its own user), the same mix as SQL texts over the REST statements
API, which the server process serves beside the gateway (`lakegate serve`'s app, same
Lakegate and JVM). There is no plain REST: REST is judged against plain Spark Connect
running the same statements at the same N (the plain row), and its audit is checked per
request id (rest_audit_check). TPC-DS (`--tpcds-scale S`): a TPC-DS query (load_tpcds.py's
five star joins, governed tables under their policies) takes the join's place in the mix;
the data is written once into `--tpcds-dir` (default bench-sf1/ at sf 1) and reused.
`--other-line PYTHON` runs the same again with the other Spark line's interpreter;
`--report REPORT.md` splices the section (both lines) into the report.

Targets (issue 39 item 2), printed MET / NOT MET: throughput >= 0.9x plain at every N;
p99 <= 1.2x plain; no error kind plain does not also give; zero lost or duplicated audit
lines. The floor (`--floor`): a third side, plain Spark Connect over each user's governed
views (load_server.write_floor), so what the policies cost (floor/plain) and what Lakegate
costs beyond them (gateway/floor) are told apart; figures, not targets.

Fairness (`--fairness`): one user runs `--heavy` heavy queries at once while another
user's short lookup is timed, against the same lookup on an idle gateway (target: under
2x idle). Soak (`--soak-minutes M`): N = `--soak-clients` through the gateway for M
minutes, the server sampled every 5 s (RSS, JVM heap, Python objects, fds, threads,
sessions, plan cache): growth over the last half of the run, target under 5 %.

    python benchmarks/load.py [--clients 1,8,32,64] [--seconds 60] [--reps 1] [--json OUT]
                              [--rest] [--floor] [--tpcds-scale 1] [--other-line PYTHON]
                              [--fairness] [--soak-minutes 60 --soak-clients 16]
                              [--report benchmarks/REPORT.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import harness, load_soak  # noqa: E402
from benchmarks.load_client import MIX_TPCDS  # noqa: E402
from benchmarks.load_server import (  # noqa: E402
    RAW,
    SESSION_IDLE,
    USERS,
    WRITE_TABLE,
    _proc,
    analyst,
    fair_slots,
    fair_slots_arg,
)

THROUGHPUT_RATIO = 0.9  # issue 39: gateway throughput at least 0.9x plain, every N
P99_RATIO = 1.2  # issue 39: gateway p99 at most 1.2x plain
FAIRNESS_RATIO = 2.0  # issue 39: a short lookup under another user's load, at most 2x idle
GATEWAY_ENDS: dict[int, float] = {}  # by server: when its last gateway side ended
SOAK_GROWTH = 0.05  # issue 39: growth over the soak's last half under 5 %
# the RPCs the gateway writes an audit line for (service.py's `_begin`)
AUDITED = {
    "ExecutePlan",
    "AnalyzePlan",
    "Config",
    "AddArtifacts",
    "ArtifactStatus",
    "Interrupt",
    "ReattachExecute",
    "ReleaseExecute",
}


class Server:
    """load_server.py in its own process; `info` is the JSON line it printed."""

    def __init__(
        self,
        root: Path,
        *,
        per_user: int,
        queue: float,
        workers: int,
        tpcds_scale: float = 0.0,
        tpcds_dir: Path | None = None,
        fair_share_slots: int | None = None,
        scheduler_mode: str = "FIFO",
    ) -> None:
        self.root = root
        tpcds = (
            ["--tpcds-scale", str(tpcds_scale), "--tpcds", str(tpcds_dir)] if tpcds_scale else []
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "load_server.py"),
                "--dir",
                str(root),
                "--per-user",
                str(per_user),
                "--queue",
                str(queue),
                "--fair-share-slots",
                fair_slots_arg(fair_share_slots),
                "--workers",
                str(workers),
                "--scheduler-mode",
                scheduler_mode,
                *tpcds,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(root / "server.err").open("w"),
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            tail = (root / "server.err").read_text()[-3000:]
            raise harness.ScenarioFailed(f"the load server did not start:\n{tail}")
        self.info: dict[str, Any] = json.loads(line)

    def resources(self) -> dict[str, dict[str, float]]:
        return {"py": _proc(self.info["pid"]), "jvm": _proc(self.info["jvm_pid"])}

    def heap_mb(self) -> float | None:
        """The JVM heap in use at the server's last sample (every 5 s)."""
        samples = self.root / "samples.jsonl"
        lines = samples.read_text().splitlines() if samples.is_file() else []
        return float(json.loads(lines[-1])["heap_mb"]) if lines else None

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def client_spec(server: Server | LocalServer, side: str, user: str, name: str) -> dict[str, Any]:
    """What one analyst needs: where to connect as `user`, the table names of its side
    (governed names through the gateway and REST, temp views of the Delta paths on plain),
    and the mix (TPC-DS queries in it when the server has the TPC-DS tables)."""
    info = server.info
    tables = info["tables"]
    tpcds = info.get("tpcds_queries") or {}
    extra: dict[str, Any] = {}
    if tpcds:
        text = "plain" if side in ("plain", "floor") else "gateway"
        extra = {"mix": list(MIX_TPCDS), "tpcds": [q[text] for q in tpcds.values()]}
    if side in ("gateway", "rest"):
        if side == "gateway":
            url, token = info["gateway"].format(token=info["tokens"][user]), None
        else:
            url, token = info["rest"], info["tokens"][user]
        names = {
            "orders": "main.sales.orders",
            "customers": "main.sales.customers",
            "writes": WRITE_TABLE,
        }
        spec = {"url": url, "user": user, "name": name, "names": names, "views": {}, **extra}
        if token is not None:
            spec.update(kind="rest", token=token)
        return spec
    url = info["plain"].format(user=user)
    names = {
        "orders": "orders",
        "customers": "customers",
        "writes": f"delta.`{tables['load_writes']}`",
    }
    views = {"orders": tables["orders"], "customers": tables["customers"]}
    views.update(info.get("tpcds") or {})  # plain TPC-DS: the bare names over the paths
    if side == "floor":  # plain's raw views, under the user's governed views (write_floor)
        extra["view_sql"] = floor_views(info["floor"])[user]
        views = {RAW.format(v): p for v, p in views.items()}
    return {"url": url, "user": user, "name": name, "names": names, "views": views, **extra}


_FLOORS: dict[str, dict[str, dict[str, str]]] = {}


def floor_views(path: str) -> dict[str, dict[str, str]]:
    """The server's floor file (load_server.write_floor), read once: user -> name -> SQL."""
    if path not in _FLOORS:
        _FLOORS[path] = json.loads(Path(path).read_text())
    return _FLOORS[path]


def run_side(
    server: Server | LocalServer, side: str, n: int, seconds: float, threads: int, tag: str
) -> dict[str, Any]:
    """N analysts on one side for `seconds`: their figures, the server's resources. A
    gateway side first waits until the last one's sessions are idle past the gateway's
    session_idle_timeout: Spark 3.5's clients never release theirs, so they would count
    against connect.max_sessions (96) with this side's."""
    if side == "gateway":
        wait = GATEWAY_ENDS.get(id(server), 0.0) + SESSION_IDLE + 1.0 - time.time()
        if wait > 0:
            time.sleep(wait)
    out_dir = server.root / "runs" / tag
    out_dir.mkdir(parents=True)
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=server.info["ca"])
    procs = []
    per = max(1, threads)
    for p in range((n + per - 1) // per):
        count = min(per, n - p * per)
        # every analyst its own user, also when a process holds several
        analysts = [
            client_spec(server, side, analyst(i), f"{side}-{analyst(i)}")
            for i in range(p * per, p * per + count)
        ]
        spec = {
            **analysts[0],
            "analysts": analysts,
            "seconds": seconds,
            "threads": count,
            "offset": p * per,
            "out": str(out_dir / f"c{p}.json"),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "benchmarks" / "load_client.py"), json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=(out_dir / f"c{p}.err").open("w"),
                text=True,
                env=env,
            )
        )
    for i, p in enumerate(procs):
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            for q in procs:
                q.kill()
            err = (out_dir / f"c{i}.err").read_text()[-3000:]
            raise harness.ScenarioFailed(f"{side} client {i} did not start:\n{err}")
    client_rss = [_proc(p.pid)["rss_mb"] for p in procs]
    before, t0 = server.resources(), time.time()
    peaks = {"py": 0.0, "jvm": 0.0, "heap": 0.0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(1.0):
            r = server.resources()
            for k in ("py", "jvm"):
                peaks[k] = max(peaks[k], r[k]["rss_mb"])
            peaks["heap"] = max(peaks["heap"], server.heap_mb() or 0.0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for i, p in enumerate(procs):
        if p.wait(timeout=seconds + 600) != 0:
            err = (out_dir / f"c{i}.err").read_text()[-3000:]
            raise harness.ScenarioFailed(f"{side} client {i} failed:\n{err}")
    stop.set()
    watcher.join()
    if side == "gateway":
        GATEWAY_ENDS[id(server)] = time.time()
    after, wall = server.resources(), time.time() - t0
    clients = [
        c for i in range(len(procs)) for c in json.loads((out_dir / f"c{i}.json").read_text())
    ]
    return summarize(side, n, seconds, clients, before, after, wall, peaks, client_rss, threads)


def summarize(
    side: str,
    n: int,
    seconds: float,
    clients: list[dict[str, Any]],
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    wall: float,
    peaks: dict[str, float],
    client_rss: list[float],
    threads: int,
) -> dict[str, Any]:
    lat = [ms for c in clients for _, _, ms, ok in c["ops"] if ok]
    # throughput counts what ended inside the window: the statements still running at the
    # deadline end later (up to a slow statement's latency at large N), and counting them
    # over `seconds` would credit each side with its own drain
    done = sum(
        1
        for c in clients
        for end, _, _, ok in c["ops"]
        if ok and (c.get("until") is None or end <= c["until"])
    )
    by_op: dict[str, list[float]] = {}
    for c in clients:
        for op, v in c["times"].items():
            by_op.setdefault(op, []).extend(v)
    errors = Counter(e["kind"] for c in clients for e in c["errors"])
    samples = {e["kind"]: e["message"] for c in clients for e in c["errors"]}
    return {
        "side": side,
        "n": n,
        "seconds": seconds,
        "ops": len(lat),
        "ops_in_window": done,
        "throughput": done / seconds,
        "p50": harness.percentile(lat, 0.5) if lat else None,
        "p95": harness.percentile(lat, 0.95) if lat else None,
        "p99": harness.percentile(lat, 0.99) if lat else None,
        "by_op": {op: harness.summary(v) for op, v in by_op.items() if v},
        "errors": dict(errors),
        "error_samples": samples,
        "cpu_py": (after["py"]["cpu_s"] - before["py"]["cpu_s"]) / wall,
        "cpu_jvm": (after["jvm"]["cpu_s"] - before["jvm"]["cpu_s"]) / wall,
        "rss_py_mb": peaks["py"] or after["py"]["rss_mb"],
        "rss_jvm_mb": peaks["jvm"] or after["jvm"]["rss_mb"],
        "heap_mb": peaks.get("heap") or None,
        "threads_py": after["py"]["threads"],
        "client_processes": len(client_rss),
        "clients_per_process": threads,
        "client_rss_mb": sum(client_rss) / len(client_rss),
        "_clients": clients,
    }


def audit_check(audit_dir: str, clients: list[dict[str, Any]]) -> dict[str, Any]:
    """Every audited request of the clients against the audit log. A request's own line
    carries its hash (`stmt_hash`, service.py hashes the request as received): a request
    (as often as it was sent) with fewer lines of one phase is lost, with more is
    duplicated. The governed statement's own lines in the same sessions (cmd `select`,
    `insert`, ...: their hash is the statement text's, their query id their own) are
    counted, not matched one by one."""
    from audit.query import read_records

    sent: Counter[str] = Counter()
    sessions = set()
    for c in clients:
        sessions.add(f"connect:{c['session_id']}")
        for method, digest in c["sent"]:
            if method in AUDITED:
                sent[digest] += 1
    lines: Counter[tuple[str, str | None]] = Counter()
    statement_lines: Counter[str] = Counter()
    for r in read_records(audit_dir):
        if r is None or r.caller_context not in sessions:
            continue
        if r.stmt_hash in sent:
            lines[(r.stmt_hash, r.phase)] += 1
        else:
            statement_lines[r.cmd] += 1
    per_hash: dict[str, Counter[str | None]] = {}
    for (digest, phase), count in lines.items():
        per_hash.setdefault(digest, Counter())[phase] = count
    lost = duplicated = 0
    for digest, times in sent.items():
        phases = per_hash.get(digest)
        if not phases:
            lost += times
            continue
        for count in phases.values():
            lost += max(0, times - count)
            duplicated += max(0, count - times)
    return {
        "requests": sum(sent.values()),
        "lines": sum(lines.values()),
        "lost": lost,
        "duplicated": duplicated,
        "statement_lines": dict(statement_lines),
    }


def rest_audit_check(audit_dir: str, clients: list[dict[str, Any]]) -> dict[str, Any]:
    """Every REST request of the clients against the audit log, one by one: the request's
    own line (cmd executeStatement, its query id the request id the client was answered
    with, its hash the statement's) exactly once; the governed statement's lines (caller
    context `rest:<request id>`, statements.py; one per table it reads or writes) at most
    once per phase and table, and at least one for a request answered 200. A request sent
    without an answer has no request id: it is counted as unanswered, not checked."""
    from audit.query import read_records

    sent: dict[str, tuple[str, int]] = {}
    unanswered = 0
    for c in clients:
        for rid, digest, status in c["requests"]:
            if rid is None:
                unanswered += 1
            else:
                sent[rid] = (digest, status)
    own: Counter[str] = Counter()
    wrong_hash = 0
    phases: dict[str, Counter[tuple[str | None, str | None, str | None]]] = {}
    for r in read_records(audit_dir):
        if r is None:
            continue
        if r.cmd == "executeStatement" and r.query_id in sent:
            own[r.query_id] += 1
            wrong_hash += r.stmt_hash != sent[r.query_id][0]
        elif r.caller_context and r.caller_context.startswith("rest:"):
            rid = r.caller_context[5:]
            if rid in sent:
                phases.setdefault(rid, Counter())[(r.phase, r.src, r.dst)] += 1
    lost = duplicated = 0
    for rid, (_, status) in sent.items():
        lost += own[rid] == 0
        duplicated += max(0, own[rid] - 1)
        counts = phases.get(rid, Counter())
        lost += status == 200 and not counts
        duplicated += sum(max(0, v - 1) for v in counts.values())
    return {
        "requests": len(sent),
        "lines": sum(own.values()) + sum(sum(c.values()) for c in phases.values()),
        "lost": lost,
        "duplicated": duplicated,
        "wrong_hash": wrong_hash,
        "unanswered": unanswered,
    }


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 39 item 2's targets, per N, with the figures each is judged on."""
    out = []
    by_n: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["side"]] = r
    for n, sides in sorted(by_n.items()):
        p = sides.get("plain")
        for side in ("gateway", "rest"):
            g = sides.get(side)
            if g is not None and p is not None:
                out += side_targets(n, side, g, p)
    return out


def side_targets(n: int, side: str, g: dict[str, Any], p: dict[str, Any]) -> list[dict[str, Any]]:
    """One governed side's four targets against plain Spark Connect at the same N (REST
    too: there is no plain REST; plain Spark Connect runs the same statements)."""
    pre = "" if side == "gateway" else "REST: "
    tp = g["throughput"] / p["throughput"] if p["throughput"] else 0.0
    # each repetition against plain's of the same turn (adjacent in time): their spread
    # says whether the pooled ratio's verdict is within the run-to-run noise
    per_rep = [a / b for a, b in zip(reps_of(g), reps_of(p), strict=True) if b]
    p99 = g["p99"] / p["p99"] if g["p99"] and p["p99"] else float("inf")
    extra = sorted(set(g["errors"]) - set(p["errors"]))
    audit = g.get("audit", {})
    return [
        {
            "n": n,
            "side": side,
            "target": f"{pre}throughput >= {THROUGHPUT_RATIO}x plain",
            "met": tp >= THROUGHPUT_RATIO,
            "ratio": tp,
            "ratio_reps": per_rep,
        },
        {
            "n": n,
            "side": side,
            "target": f"{pre}p99 <= {P99_RATIO}x plain",
            "met": p99 <= P99_RATIO,
            "ratio": p99,
        },
        {
            "n": n,
            "side": side,
            "target": f"{pre}no error plain does not also give",
            "met": not extra,
            "errors": {k: g["errors"][k] for k in extra},
        },
        {
            "n": n,
            "side": side,
            "target": f"{pre}zero lost or duplicated audit lines",
            "met": bool(audit) and audit["lost"] == 0 and audit["duplicated"] == 0,
            "audit": audit,
        },
    ]


def reps_of(row: dict[str, Any]) -> list[float]:
    """A row's throughput per repetition (a row of one run, or of an older JSON: its own)."""
    return list(row.get("throughput_reps") or [row["throughput"]])


def merge(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Repetitions of one (N, side) as one row: their ops pooled (percentiles over all),
    throughput over the total time (and each repetition's, `throughput_reps`), CPU and RSS
    the repetitions' mean and max."""
    if len(reps) == 1:
        return {**reps[0], "throughput_reps": [reps[0]["throughput"]]}
    clients = [c for r in reps for c in r["_clients"]]
    row = summarize(
        reps[0]["side"],
        reps[0]["n"],
        sum(r["seconds"] for r in reps),
        clients,
        {"py": {"cpu_s": 0.0}, "jvm": {"cpu_s": 0.0}},
        {"py": {"cpu_s": 0.0, "rss_mb": 0.0, "threads": 0.0}, "jvm": {"cpu_s": 0.0, "rss_mb": 0.0}},
        1.0,
        {
            "py": max(r["rss_py_mb"] for r in reps),
            "jvm": max(r["rss_jvm_mb"] for r in reps),
            "heap": max(r.get("heap_mb") or 0.0 for r in reps),
        },
        [r["client_rss_mb"] for r in reps],
        reps[0]["clients_per_process"],
    )
    row.update(
        cpu_py=sum(r["cpu_py"] for r in reps) / len(reps),
        cpu_jvm=sum(r["cpu_jvm"] for r in reps) / len(reps),
        threads_py=max(r["threads_py"] for r in reps),
        client_processes=reps[0]["client_processes"],
        client_rss_mb=sum(r["client_rss_mb"] for r in reps) / len(reps),
        throughput_reps=[r["throughput"] for r in reps],
    )
    if "audit" in reps[0]:
        row["audit"] = {
            k: sum(r["audit"][k] for r in reps)
            for k, v in reps[0]["audit"].items()
            if isinstance(v, int)
        }
    return row


def warm_up(
    server: Server, seconds: float, log: Callable[[str], None], floor: bool = False
) -> None:
    """One client per persona on each side runs the mix untimed for `seconds` first: the
    JVM's JIT warms the paths both sides share and the gateway's own, each persona's
    governed plans among them (their generated code is their own), so the first N measured
    is not judged on a cold JVM. Measured: on the quiet machine the first 100 gateway
    lookups of a fresh server took 203 ms at p50, the next 100 157 ms, plain 156 then 138
    ms; after a warm-up by two personas, 8 analysts of all five ran at 2.3 ops/s through the
    gateway in their first 45 s and 3.7-3.8 in the next (plain 3.7-4.0, then 4.2-4.4)."""
    for side in ("gateway", "plain", *(["floor"] if floor else [])):
        row = run_side(server, side, len(USERS), seconds, 1, f"warmup-{side}")
        log(f"  warm-up {side}: {row['ops']} operations in {seconds:g} s (not measured)")


def soak(server: Server, n: int, minutes: float, threads: int) -> dict[str, Any]:
    """N gateway clients for `minutes`; the server's own samples over the run, and each
    measure's growth over the last half (`growth`: a plateau's is about zero or below)."""
    samples_file = server.root / "samples.jsonl"
    start = time.time()
    row = run_side(server, "gateway", n, minutes * 60, threads, "soak")
    clients = row.pop("_clients")
    row["audit"] = audit_check(server.info["audit"], clients)
    # the run's window starts when the clients do, not while they connect and warm up
    start = min((o[0] - o[2] / 1000 for c in clients for o in c["ops"]), default=start)
    samples = [
        json.loads(line)
        for line in samples_file.read_text().splitlines()
        if json.loads(line)["t"] >= start
    ]
    series = {
        "rss_py_mb": [s["py"]["rss_mb"] for s in samples],
        "rss_jvm_mb": [s["jvm"]["rss_mb"] for s in samples],
        "heap_mb": [s["heap_mb"] for s in samples],
        "py_objects": [float(s["py_objects"]) for s in samples],
        "fds_py": [s["py"]["fds"] for s in samples],
        "fds_jvm": [s["jvm"]["fds"] for s in samples],
        "threads_py": [s["py"]["threads"] for s in samples],
        "threads_jvm": [s["jvm"]["threads"] for s in samples],
        "sessions": [float(s["sessions"]) for s in samples],
        "plan_cache": [float(s["plan_cache"]) for s in samples],
        "kept": [float(s.get("kept", 0)) for s in samples],
    }
    growths = {k: growth(v) for k, v in series.items()}
    return {
        "n": n,
        "minutes": minutes,
        "samples": len(samples),
        "t": [s["t"] - start for s in samples],
        "series": series,
        "growth": growths,
        "verdict": load_soak.verdict(
            {"series": series, "growth": growths}, server.info.get("bounds", {})
        ),
        "run": row,
    }


def growth(values: list[float]) -> float | None:
    """Relative growth over the last half: the mean of the last tenth of the samples against
    the highest level reached before it, the highest mean of a tenth of the first half or of
    the tenth at the middle (None: too few samples). A climb shows as growth; a series that
    dips mid-run and comes back to its earlier level does not (the hour's JVM threads did)."""
    if len(values) < 10:
        return None
    k = max(1, len(values) // 10)
    mid = len(values) // 2
    windows = [values[i * k : (i + 1) * k] for i in range(mid // k)]
    windows.append(values[mid - k // 2 : mid - k // 2 + k])
    base = max(sum(w) / len(w) for w in windows if w)
    last = sum(values[-k:]) / k
    return (last - base) / base if base else 0.0


def refusals(audit_dir: str, user: str) -> int:
    """The user's statements refused as busy so far, by the audit log."""
    from audit.query import read_records

    return sum(
        1
        for r in read_records(audit_dir)
        if r is not None and r.user == user and (r.reason or "").startswith("busy: ")
    )


def fairness(
    server: Server | LocalServer, heavy: int, seconds: float, rows: int = 3_000_000
) -> dict[str, Any]:
    """A short lookup of alice's, idle and while erin runs `heavy` heavy queries at once,
    through the gateway (its per-user limit and queue) and on plain Spark Connect; `rows`
    per order row sets how long each of erin's tasks runs (load_fair.HEAVY)."""
    code = (ROOT / "benchmarks" / "load_fair.py").resolve()
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=server.info["ca"])
    result: dict[str, Any] = {}
    for side in ("gateway", "plain"):
        light, heavy_spec = (
            client_spec(server, side, user, name)
            for user, name in (("alice", "light"), ("erin", "heavy"))
        )
        for one in (light, heavy_spec):  # the demo's tables alone (no TPC-DS views to set up)
            one["views"] = {k: v for k, v in one["views"].items() if k in ("orders", "customers")}
        spec = {
            "light": light,
            "heavy": heavy_spec,
            "count": heavy,
            "seconds": seconds,
            "rows": rows,
        }
        refused_before = refusals(server.info["audit"], "erin") if side == "gateway" else 0
        out = subprocess.run(
            [sys.executable, str(code), json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if out.returncode != 0:
            raise harness.ScenarioFailed(f"the {side} fairness run failed:\n{out.stderr[-3000:]}")
        one: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        if side == "gateway":  # a Spark 4 client retries a busy answer itself (its
            # RetryInfo): the refusals it waited out are on record, not in its own counts
            one["heavy"]["refused"] = refusals(server.info["audit"], "erin") - refused_before
        one["ratio"] = one["loaded"]["p50"] / one["idle"]["p50"]
        one["met"] = one["ratio"] <= FAIRNESS_RATIO
        result[side] = one
    return {**result["gateway"], "plain": result["plain"]}


class LocalServer:
    """The same server inside this process, over an existing SparkSession (the smoke test's
    shared one): CPU and memory are then the whole process's, not the gateway's alone."""

    def __init__(
        self,
        root: Path,
        spark: Any,
        *,
        per_user: int = 8,
        queue: float = 30.0,
        tpcds: dict[str, str] | None = None,
        lakehouse: Any = None,
        fair_share_slots: int | None = None,
    ) -> None:
        """`lakehouse`: an existing demo lakehouse to serve (Served's), None: build one."""
        from benchmarks.load_server import Served

        self.root = root
        self.served = Served(
            root,
            spark,
            per_user=per_user,
            queue=queue,
            workers=0,
            tpcds=tpcds,
            lakehouse=lakehouse,
            fair_share_slots=fair_share_slots,
        )
        self.info = self.served.info

    def resources(self) -> dict[str, dict[str, float]]:
        return {"py": _proc(self.info["pid"]), "jvm": _proc(self.info["jvm_pid"])}

    def heap_mb(self) -> float | None:
        return self.served.heap_mb()

    def stop(self) -> None:
        self.served.stop()


def measure(
    server: Server | LocalServer,
    ns: list[int],
    seconds: float,
    *,
    reps: int = 1,
    max_processes: int = 64,
    log: Callable[[str], None] = print,
    partial: Callable[[dict[str, Any]], None] | None = None,
    rest: int | None = 0,
    floor: bool = False,
) -> dict[str, Any]:
    """Every N, gateway and plain (and REST, and the floor) in turn, the order rotating
    from one N and repetition to the next, each governed run's audit checked: the rows (one
    per N and side) and the targets. `rest`: REST clients at every N (None: N of them, as the
    Connect sides; a number: at most that many, the smoke's cheap REST path; 0: none);
    `floor`: plain Spark Connect over each user's governed views too (`against_floor`)."""
    rows = []
    flip = 0
    sides = ["gateway", "plain"] + (["rest"] if rest != 0 else []) + (["floor"] if floor else [])
    for n in ns:
        threads = max(1, -(-n // max_processes))
        per_side: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for rep in range(reps):
            order = sides[flip % len(sides) :] + sides[: flip % len(sides)]
            flip += 1
            for side in order:
                count = min(n, rest) if side == "rest" and rest else n
                row = run_side(server, side, count, seconds, threads, f"{side}-{n}-{rep}")
                row["n"] = n
                if side == "gateway":
                    row["audit"] = audit_check(server.info["audit"], row["_clients"])
                elif side == "rest":
                    row["clients"] = count
                    row["audit"] = rest_audit_check(server.info["audit"], row["_clients"])
                per_side[side].append(row)
                log(line_of(row))
        for side in sides:
            row = merge(per_side[side])
            row.pop("_clients", None)
            rows.append(row)
        if partial is not None:  # a long run keeps what it measured if a later N fails
            partial({"rows": rows, "targets": targets(rows)})
    out: dict[str, Any] = {"rows": rows, "targets": targets(rows)}
    if floor:
        out["against_floor"] = against_floor(rows)
    return out


def against_floor(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each governed side and plain against the floor at the same N: governed/floor is
    what Lakegate costs beyond evaluating its policies (the bar: nothing more), plain/floor
    what the policies save or cost. Figures, not targets: issue 39's targets are against
    plain, and stay so."""
    by_n: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["side"]] = r
    out = []
    for n, sides in sorted(by_n.items()):
        f = sides.get("floor")
        if f is None:
            continue
        for side in ("gateway", "rest", "plain"):
            g = sides.get(side)
            if g is None:
                continue
            out.append(
                {
                    "n": n,
                    "side": side,
                    "clients": g.get("clients", n),
                    "throughput_ratio": g["throughput"] / f["throughput"]
                    if f["throughput"]
                    else None,
                    "p99_ratio": g["p99"] / f["p99"] if g["p99"] and f["p99"] else None,
                }
            )
    return out


def scenario(args: argparse.Namespace) -> None:
    import pyspark

    from benchmarks.load_tpcds import default_dir

    ns = [int(x) for x in args.clients.split(",") if x]
    result: dict[str, Any] = {
        "line": f"Spark {pyspark.__version__}",
        "seconds": args.seconds,
        "reps": args.reps,
        "max_processes": args.max_processes,
        "rest": args.rest,
        "floor": args.floor,
        "tpcds_scale": args.tpcds_scale,
        "machine": harness.machine_info(),
    }
    tpcds_dir = Path(args.tpcds_dir or default_dir(args.tpcds_scale)).resolve()
    with tempfile.TemporaryDirectory(prefix="lakegate-bench-load-") as tmp:
        t0 = time.time()
        server = Server(
            Path(tmp),
            per_user=args.per_user,
            queue=args.queue,
            workers=args.workers,
            tpcds_scale=args.tpcds_scale,
            tpcds_dir=tpcds_dir,
            fair_share_slots=args.fair_share_slots,
            scheduler_mode=args.scheduler_mode,
        )
        print(f"server up in {time.time() - t0:.0f} s", flush=True)
        result["server"] = {
            "per_user": args.per_user,
            "scheduler_mode": args.scheduler_mode,
            "queue_wait": args.queue,
            "fair_share_slots": server.info["fair_share_slots"],
            "fair_share_auto": args.fair_share_slots is None,
            "workers": server.info["workers"],
            "start_s": time.time() - t0,
        }
        if args.tpcds_scale:
            result["tpcds"] = {
                "dir": str(tpcds_dir),
                "queries": sorted(int(q) for q in server.info["tpcds_queries"]),
                "tables": sorted(server.info["tpcds"]),
            }
        try:
            log = lambda text: print(text, flush=True)  # noqa: E731
            if args.warmup and ns:
                warm_up(server, args.warmup, log, floor=args.floor)
                result["warmup_s"] = args.warmup
            result.update(
                measure(
                    server,
                    ns,
                    args.seconds,
                    reps=args.reps,
                    max_processes=args.max_processes,
                    log=log,
                    rest=None if args.rest else 0,
                    floor=args.floor,
                    partial=lambda part: (
                        harness.write_json(f"{args.json}.partial", {**result, **part})
                        if args.json
                        else None
                    ),
                )
            )
            if args.fairness:
                sweep = [
                    fairness(server, args.heavy, args.fair_seconds, int(r))
                    for r in args.heavy_rows.split(",")
                    if r
                ]
                result["fairness"] = sweep[0]  # the judged one; the rest: how it follows
                if len(sweep) > 1:
                    result["fairness_by_task_length"] = sweep
            if args.soak_minutes:
                result["soak"] = soak(
                    server,
                    args.soak_clients,
                    args.soak_minutes,
                    max(1, -(-args.soak_clients // args.max_processes)),
                )
        finally:
            server.stop()
    print_result(result)
    failed = None
    if args.other_line:
        if args.json:  # this line's figures are kept whatever the other line does
            harness.write_json(args.json, result)
        try:
            result["other_line"] = other_line(args, tpcds_dir)
        except harness.ScenarioFailed as e:
            failed = e
            result["other_line"] = {"line": args.other_line, "error": str(e)}
    if args.json:
        harness.write_json(args.json, result)
    if args.report:
        from benchmarks.report_load import splice

        splice(args.report, {"load": result}, args.report.parent / "charts")
        print(f"wrote the load section of {args.report}")
    if failed is not None:
        raise failed


def other_line(args: argparse.Namespace, tpcds_dir: Path) -> dict[str, Any]:
    """The same N, sides and mix on the other Spark line (its venv's python), same TPC-DS
    data; no fairness or soak there (they judge the gateway, not the line)."""
    argv = [
        args.other_line,
        str(ROOT / "benchmarks" / "load.py"),
        "--clients",
        args.clients,
        "--seconds",
        str(args.seconds),
        "--reps",
        str(args.reps),
        "--max-processes",
        str(args.max_processes),
        "--per-user",
        str(args.per_user),
        "--queue",
        str(args.queue),
        "--fair-share-slots",
        fair_slots_arg(args.fair_share_slots),
        "--workers",
        str(args.workers),
        "--warmup",
        str(args.warmup),
        "--scheduler-mode",
        args.scheduler_mode,
        "--tpcds-scale",
        str(args.tpcds_scale),
        "--tpcds-dir",
        str(tpcds_dir),
        *(["--rest"] if args.rest else []),
        *(["--floor"] if args.floor else []),
    ]
    with tempfile.TemporaryDirectory(prefix="lakegate-bench-load-other-") as tmp:
        out = Path(tmp) / "other.json"
        print(f"\n##### the other line: {' '.join(argv)}", flush=True)
        rc = subprocess.run([*argv, "--json", str(out)], check=False).returncode
        if rc != 0 or not out.is_file():
            raise harness.ScenarioFailed(f"the other line's load run failed (exit {rc})")
        other: dict[str, Any] = json.loads(out.read_text())
        return other


def line_of(row: dict[str, Any]) -> str:
    audit = row.get("audit")
    a = f", audit lost {audit['lost']} dup {audit['duplicated']}" if audit else ""
    return (
        f"  N={row['n']:<3} {row['side']:<8} {row['throughput']:7.1f} ops/s  p50 "
        f"{row['p50'] or 0:7.0f}  p95 {row['p95'] or 0:7.0f}  p99 {row['p99'] or 0:7.0f} ms  "
        f"errors {sum(row['errors'].values())}  CPU py {row['cpu_py']:.2f} jvm "
        f"{row['cpu_jvm']:.2f}  RSS py {row['rss_py_mb']:.0f} jvm {row['rss_jvm_mb']:.0f} "
        f"heap {row.get('heap_mb') or 0:.0f} MB{a}"
    )


def print_result(result: dict[str, Any]) -> None:
    print(f"{result['line']}, {result['seconds']:g} s per run, {result['reps']} rep(s) per side")
    for row in result["rows"]:
        print(line_of(row))
        for kind, message in row["error_samples"].items():
            print(f"      {kind}: {message}")
    for t in result["targets"]:
        spread = t.get("ratio_reps") or []
        per_rep = (
            f" ({t['ratio']:.2f}x; per repetition {', '.join(f'{r:.2f}' for r in spread)})"
            if len(spread) > 1
            else ""
        )
        print(f"target N={t['n']} {t['target']}: {'MET' if t['met'] else 'NOT MET'}{per_rep}")
    for f in result.get("against_floor", []):
        print(
            f"against the floor N={f['n']} {f['side']}: throughput "
            f"{f['throughput_ratio'] or 0:.2f}x, p99 {f['p99_ratio'] or 0:.2f}x"
        )
    fair = result.get("fairness")
    if fair:
        for side, f in (("gateway", fair), ("plain", fair.get("plain"))):
            if f:
                print(
                    f"fairness ({side}): alice's lookup p50 idle {f['idle']['p50']:.0f} ms, "
                    f"under erin's {f['count']} heavy queries {f['loaded']['p50']:.0f} ms "
                    f"({f['ratio']:.2f}x): {'MET' if f['met'] else 'NOT MET'}"
                )
    for f in result.get("fairness_by_task_length", []):
        print(
            f"fairness by task length: {f['rows']:,} rows per order, erin's query alone "
            f"{f['heavy_alone']['p50']:.0f} ms: gateway {f['ratio']:.2f}x, "
            f"plain {f['plain']['ratio']:.2f}x"
        )
    s = result.get("soak")
    if s:
        print(f"soak: N={s['n']}, {s['minutes']:g} min, {s['samples']} samples")
        load_soak.print_verdict(s["verdict"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,8,32,64")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--reps", type=int, default=1, help="runs per side per N (ABAB)")
    ap.add_argument(
        "--max-processes",
        type=int,
        default=32,
        help="client processes at most; more clients run as threads in them (each its own "
        "session and user); 32: N = 64 as 32 processes of 2 (about 150 MB per process)",
    )
    ap.add_argument("--per-user", type=int, default=8)
    ap.add_argument("--queue", type=float, default=30.0, help="statement_queue_wait (s)")
    ap.add_argument(
        "--fair-share-slots",
        type=fair_slots,
        default=None,
        help="connect.fair_share_slots: auto (the default: the backend's task slots), 0 (off) or N",
    )
    ap.add_argument(
        "--workers", type=int, default=0, help="the gateway's gRPC threads (0: its default)"
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="seconds of the mix on each side, untimed, before the first N (a cold JVM's JIT "
        "otherwise weighs on whichever side runs first; 0: none)",
    )
    ap.add_argument(
        "--scheduler-mode",
        choices=("FAIR", "FIFO"),
        default="FIFO",
        help="the server's spark.scheduler.mode (FIFO: Lakegate's default; FAIR: its per-user "
        "pools, the A/B)",
    )
    ap.add_argument("--fairness", action="store_true")
    ap.add_argument("--heavy", type=int, default=64)
    ap.add_argument("--fair-seconds", type=float, default=30.0)
    ap.add_argument(
        "--heavy-rows",
        default="3000000",
        help="rows the heavy query generates per order row, comma-separated: the first is "
        "judged, the others show how the lookup's wait follows the heavy tasks' length",
    )
    ap.add_argument("--soak-minutes", type=float, default=0.0)
    ap.add_argument("--soak-clients", type=int, default=16)
    ap.add_argument("--rest", action="store_true", help="N REST clients too, at every N")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="a third Connect side: plain Spark Connect over each user's governed views "
        "(Lakegate's rewrite as temp views, no gateway), what the policies alone cost",
    )
    ap.add_argument(
        "--tpcds-scale",
        type=float,
        default=0.0,
        help="TPC-DS queries at this scale factor in the mix (0: none; the data is written "
        "once into --tpcds-dir and reused)",
    )
    ap.add_argument(
        "--tpcds-dir", help="TPC-DS cache (default: bench-sf1/ at sf 1, as make bench-sf1)"
    )
    ap.add_argument(
        "--other-line",
        metavar="PYTHON",
        help="then the same run with this interpreter (the other Spark line's venv)",
    )
    ap.add_argument("--report", type=Path, help="splice the load section into this REPORT.md")
    ap.add_argument("--json", help="write the figures as JSON")
    args = ap.parse_args()
    return harness.main("load", lambda: scenario(args))


if __name__ == "__main__":
    sys.exit(main())
