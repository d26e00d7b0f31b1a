"""Many analysts at once (issue 39): N concurrent stock Spark Connect clients through the
gateway against the same N on plain Spark Connect, a mixed workload for a fixed time.

One server process (load_server.py: the demo lakehouse, the gateway, and the plain Spark
Connect service it forwards to, in one driver JVM) and N client processes
(load_client.py), each its own user in turn (alice, bob, carol, dana, erin: different
policies), each running the mix of short lookups, a join with an aggregate, DataFrame
operations and writes for `--seconds`. For every N the gateway and the plain side run
alternately (ABAB: the order flips from one N and repetition to the next), so background
load hits both. Per N and side: throughput, p50/p95/p99 latency, errors by kind, and the
server's CPU (gateway Python process and JVM apart) and memory; after each gateway run,
every request a client sent is looked up in the audit log by its hash (lost: a request
with fewer lines than it was sent; duplicated: more).

Targets (issue 39 item 2), printed MET / NOT MET: throughput >= 0.9x plain at every N;
p99 <= 1.2x plain; no error kind plain does not also give; zero lost or duplicated audit
lines.

Fairness (`--fairness`): one user runs `--heavy` heavy queries at once while another
user's short lookup is timed, against the same lookup on an idle gateway (target: under
2x idle). Soak (`--soak-minutes M`): N = `--soak-clients` through the gateway for M
minutes, the server sampled every 5 s (RSS, JVM heap, Python objects, fds, threads,
sessions, plan cache): growth over the last half of the run, target under 5 %.

    python benchmarks/load.py [--clients 1,8,32,64] [--seconds 60] [--reps 1] [--json OUT]
                              [--fairness] [--soak-minutes 60 --soak-clients 16]
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
from benchmarks.load_server import USERS, WRITE_TABLE, _proc  # noqa: E402

THROUGHPUT_RATIO = 0.9  # issue 39: gateway throughput at least 0.9x plain, every N
P99_RATIO = 1.2  # issue 39: gateway p99 at most 1.2x plain
FAIRNESS_RATIO = 2.0  # issue 39: a short lookup under another user's load, at most 2x idle
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

    def __init__(self, root: Path, *, per_user: int, queue: float, workers: int) -> None:
        self.root = root
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
                "--workers",
                str(workers),
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

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def client_spec(server: Server | LocalServer, side: str, user: str, name: str) -> dict[str, Any]:
    info = server.info
    tables = info["tables"]
    if side == "gateway":
        url = info["gateway"].format(token=info["tokens"][user])
        names = {
            "orders": "main.sales.orders",
            "customers": "main.sales.customers",
            "writes": WRITE_TABLE,
        }
        views: dict[str, str] = {}
    else:
        url = info["plain"].format(user=user)
        names = {
            "orders": "orders",
            "customers": "customers",
            "writes": f"delta.`{tables['load_writes']}`",
        }
        views = {"orders": tables["orders"], "customers": tables["customers"]}
    return {"url": url, "user": user, "name": name, "names": names, "views": views}


def run_side(
    server: Server | LocalServer, side: str, n: int, seconds: float, threads: int, tag: str
) -> dict[str, Any]:
    """N analysts on one side for `seconds`: their figures, the server's resources."""
    out_dir = server.root / "runs" / tag
    out_dir.mkdir(parents=True)
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=server.info["ca"])
    procs = []
    per = max(1, threads)
    for p in range((n + per - 1) // per):
        count = min(per, n - p * per)
        user = USERS[p % len(USERS)]
        spec = client_spec(server, side, user, f"{side}-{user}-{p}")
        spec.update(seconds=seconds, threads=count, offset=p * per, out=str(out_dir / f"c{p}.json"))
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
    peaks = {"py": 0.0, "jvm": 0.0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(1.0):
            r = server.resources()
            for k in peaks:
                peaks[k] = max(peaks[k], r[k]["rss_mb"])

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
        "throughput": len(lat) / seconds,
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


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 39 item 2's targets, per N, with the figures each is judged on."""
    out = []
    by_n: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["side"]] = r
    for n, sides in sorted(by_n.items()):
        g, p = sides.get("gateway"), sides.get("plain")
        if g is None or p is None:
            continue
        tp = g["throughput"] / p["throughput"] if p["throughput"] else 0.0
        p99 = g["p99"] / p["p99"] if g["p99"] and p["p99"] else float("inf")
        extra = sorted(set(g["errors"]) - set(p["errors"]))
        audit = g.get("audit", {})
        out += [
            {
                "n": n,
                "target": f"throughput >= {THROUGHPUT_RATIO}x plain",
                "met": tp >= THROUGHPUT_RATIO,
                "ratio": tp,
            },
            {"n": n, "target": f"p99 <= {P99_RATIO}x plain", "met": p99 <= P99_RATIO, "ratio": p99},
            {
                "n": n,
                "target": "no error plain does not also give",
                "met": not extra,
                "errors": {k: g["errors"][k] for k in extra},
            },
            {
                "n": n,
                "target": "zero lost or duplicated audit lines",
                "met": bool(audit) and audit["lost"] == 0 and audit["duplicated"] == 0,
                "audit": audit,
            },
        ]
    return out


def merge(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Repetitions of one (N, side) as one row: their ops pooled (percentiles over all),
    throughput over the total time, CPU and RSS the repetitions' mean and max."""
    if len(reps) == 1:
        return reps[0]
    clients = [c for r in reps for c in r["_clients"]]
    row = summarize(
        reps[0]["side"],
        reps[0]["n"],
        sum(r["seconds"] for r in reps),
        clients,
        {"py": {"cpu_s": 0.0}, "jvm": {"cpu_s": 0.0}},
        {"py": {"cpu_s": 0.0, "rss_mb": 0.0, "threads": 0.0}, "jvm": {"cpu_s": 0.0, "rss_mb": 0.0}},
        1.0,
        {"py": max(r["rss_py_mb"] for r in reps), "jvm": max(r["rss_jvm_mb"] for r in reps)},
        [r["client_rss_mb"] for r in reps],
        reps[0]["clients_per_process"],
    )
    row.update(
        cpu_py=sum(r["cpu_py"] for r in reps) / len(reps),
        cpu_jvm=sum(r["cpu_jvm"] for r in reps) / len(reps),
        threads_py=max(r["threads_py"] for r in reps),
        client_processes=reps[0]["client_processes"],
        client_rss_mb=sum(r["client_rss_mb"] for r in reps) / len(reps),
    )
    if "audit" in reps[0]:
        row["audit"] = {k: sum(r["audit"][k] for r in reps) for k in reps[0]["audit"]}
    return row


def soak(server: Server, n: int, minutes: float, threads: int) -> dict[str, Any]:
    """N gateway clients for `minutes`; the server's own samples over the run, and each
    measure's growth over the last half (its mean over the last tenth against its mean over
    the tenth at the half: a plateau's growth is about zero)."""
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
    """Relative growth over the last half: mean of the last tenth of the samples against
    the mean of the tenth at the run's middle (None: too few samples)."""
    if len(values) < 10:
        return None
    k = max(1, len(values) // 10)
    mid = len(values) // 2
    base = sum(values[mid - k // 2 : mid - k // 2 + k]) / k
    last = sum(values[-k:]) / k
    return (last - base) / base if base else 0.0


def fairness(server: Server | LocalServer, heavy: int, seconds: float) -> dict[str, Any]:
    """A short lookup of alice's, idle and while erin runs `heavy` heavy queries at once,
    through the gateway (its per-user limit and queue) and on plain Spark Connect."""
    code = (ROOT / "benchmarks" / "load_fair.py").resolve()
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=server.info["ca"])
    result: dict[str, Any] = {}
    for side in ("gateway", "plain"):
        spec = {
            "light": client_spec(server, side, "alice", "light"),
            "heavy": client_spec(server, side, "erin", "heavy"),
            "count": heavy,
            "seconds": seconds,
        }
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
        one["ratio"] = one["loaded"]["p50"] / one["idle"]["p50"]
        one["met"] = one["ratio"] <= FAIRNESS_RATIO
        result[side] = one
    return {**result["gateway"], "plain": result["plain"]}


class LocalServer:
    """The same server inside this process, over an existing SparkSession (the smoke test's
    shared one): CPU and memory are then the whole process's, not the gateway's alone."""

    def __init__(self, root: Path, spark: Any, *, per_user: int = 8, queue: float = 30.0) -> None:
        from benchmarks.load_server import Served

        self.root = root
        self.served = Served(root, spark, per_user=per_user, queue=queue, workers=0)
        self.info = self.served.info

    def resources(self) -> dict[str, dict[str, float]]:
        return {"py": _proc(self.info["pid"]), "jvm": _proc(self.info["jvm_pid"])}

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
) -> dict[str, Any]:
    """Every N, gateway and plain alternating (ABAB), each gateway run's audit checked:
    the rows (one per N and side) and the targets."""
    rows = []
    flip = 0
    for n in ns:
        threads = max(1, -(-n // max_processes))
        per_side: dict[str, list[dict[str, Any]]] = {"gateway": [], "plain": []}
        for rep in range(reps):
            order = ["gateway", "plain"] if flip % 2 == 0 else ["plain", "gateway"]
            flip += 1
            for side in order:
                row = run_side(server, side, n, seconds, threads, f"{side}-{n}-{rep}")
                if side == "gateway":
                    row["audit"] = audit_check(server.info["audit"], row["_clients"])
                per_side[side].append(row)
                log(line_of(row))
        for side in ("gateway", "plain"):
            row = merge(per_side[side])
            row.pop("_clients", None)
            rows.append(row)
        if partial is not None:  # a long run keeps what it measured if a later N fails
            partial({"rows": rows, "targets": targets(rows)})
    return {"rows": rows, "targets": targets(rows)}


def scenario(args: argparse.Namespace) -> None:
    import pyspark

    ns = [int(x) for x in args.clients.split(",") if x]
    result: dict[str, Any] = {
        "line": f"Spark {pyspark.__version__}",
        "seconds": args.seconds,
        "reps": args.reps,
        "machine": harness.machine_info(),
    }
    with tempfile.TemporaryDirectory(prefix="lakegate-bench-load-") as tmp:
        server = Server(Path(tmp), per_user=args.per_user, queue=args.queue, workers=args.workers)
        result["server"] = {
            "per_user": args.per_user,
            "queue_wait": args.queue,
            "workers": server.info["workers"],
        }
        try:
            log = lambda text: print(text, flush=True)  # noqa: E731
            result.update(
                measure(
                    server,
                    ns,
                    args.seconds,
                    reps=args.reps,
                    max_processes=args.max_processes,
                    log=log,
                    partial=lambda part: (
                        harness.write_json(f"{args.json}.partial", {**result, **part})
                        if args.json
                        else None
                    ),
                )
            )
            if args.fairness:
                result["fairness"] = fairness(server, args.heavy, args.fair_seconds)
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
    if args.json:
        harness.write_json(args.json, result)


def line_of(row: dict[str, Any]) -> str:
    audit = row.get("audit")
    a = f", audit lost {audit['lost']} dup {audit['duplicated']}" if audit else ""
    return (
        f"  N={row['n']:<3} {row['side']:<8} {row['throughput']:7.1f} ops/s  p50 "
        f"{row['p50'] or 0:7.0f}  p95 {row['p95'] or 0:7.0f}  p99 {row['p99'] or 0:7.0f} ms  "
        f"errors {sum(row['errors'].values())}  CPU py {row['cpu_py']:.2f} jvm "
        f"{row['cpu_jvm']:.2f}  RSS py {row['rss_py_mb']:.0f} jvm {row['rss_jvm_mb']:.0f} MB{a}"
    )


def print_result(result: dict[str, Any]) -> None:
    print(f"{result['line']}, {result['seconds']:g} s per run, {result['reps']} rep(s) per side")
    for row in result["rows"]:
        print(line_of(row))
        for kind, message in row["error_samples"].items():
            print(f"      {kind}: {message}")
    for t in result["targets"]:
        print(f"target N={t['n']} {t['target']}: {'MET' if t['met'] else 'NOT MET'}")
    fair = result.get("fairness")
    if fair:
        for side, f in (("gateway", fair), ("plain", fair.get("plain"))):
            if f:
                print(
                    f"fairness ({side}): alice's lookup p50 idle {f['idle']['p50']:.0f} ms, "
                    f"under erin's {f['count']} heavy queries {f['loaded']['p50']:.0f} ms "
                    f"({f['ratio']:.2f}x): {'MET' if f['met'] else 'NOT MET'}"
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
        default=64,
        help="client processes at most; more clients run as threads in them",
    )
    ap.add_argument("--per-user", type=int, default=8)
    ap.add_argument("--queue", type=float, default=30.0, help="statement_queue_wait (s)")
    ap.add_argument(
        "--workers", type=int, default=0, help="the gateway's gRPC threads (0: its default)"
    )
    ap.add_argument("--fairness", action="store_true")
    ap.add_argument("--heavy", type=int, default=64)
    ap.add_argument("--fair-seconds", type=float, default=30.0)
    ap.add_argument("--soak-minutes", type=float, default=0.0)
    ap.add_argument("--soak-clients", type=int, default=16)
    ap.add_argument("--json", help="write the figures as JSON")
    args = ap.parse_args()
    return harness.main("load", lambda: scenario(args))


if __name__ == "__main__":
    sys.exit(main())
