"""A server killed under load (issue 39 item 5): K `lakegate connect` gateways on one
PostgreSQL catalog and one audit directory, N stock Spark Connect clients spread over them
running load_client.py's mix (lookups, a join, DataFrame operations, INSERTs into one
table), and one gateway killed with SIGKILL (its process group: the Python server and its
Spark JVM) mid-load.

Checked, each printed PASS / FAIL (any FAIL: exit status 1):

* the clients of the other gateways saw no error at all;
* every client of the killed gateway got UNAVAILABLE (its details printed) for what it had
  in flight or sent next, opened a session on a surviving gateway and went on
  (load_kill_client.py: the stock client with a list of addresses; its retry policy is
  shortened to ~3 s, the stock default keeps retrying UNAVAILABLE for 10 minutes);
* every Delta commit of the written table tagged `lakegate:queryId=<id>` has its intent line
  (phase=intent) in the audit log, and no client got a refusal for that write (matched by
  the request's SHA-256, the line's `stmt_hash`);
* the killed gateway restarted recovers the outcomes it left out (`lakegate connect` and
  `serve` do at start-up: governance/session/recovery.py), and then no intent is pending
  (`lakegate audit query --pending`) and `lakegate audit verify` passes (the killed writer's
  torn last line, if any, is reported by verify as a tolerated truncation).

    python benchmarks/load_kill.py [--servers 2] [--clients 6] [--seconds 60] [--kill-at 20]
                                   [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "api" / "connect"))

from benchmarks import harness  # noqa: E402
from benchmarks.load_server import LOAD_POLICY, USERS, WRITE_TABLE  # noqa: E402

LAKEGATE = str(Path(sys.executable).with_name("lakegate"))

SETUP_SCRIPT = """
import sys
from governance.session.governed import Lakegate
from governance.tools.demo import SETUP
lg = Lakegate.open(sys.argv[1])
admin = lg.session("root")
for stmt in SETUP + [sys.argv[2]]:
    admin.sql(stmt)
lg.close()
"""


def free_port() -> int:
    from governance.runtime.local_cluster import free_port as fp

    return fp()


def lakehouse(root: Path, catalog_url: str) -> tuple[Path, dict[str, Any]]:
    """A lakegate.yaml on `catalog_url` (the demo's policies and tables, the load's write
    table), TLS and a token per user; the tables made by a governed session as root."""
    from connect_testkit import make_tls, token_of

    from governance.tools.demo import write_config

    cfg_path = write_config(root)
    (root / "policies" / "load.yaml").write_text(LOAD_POLICY)
    ca, cert, key = make_tls(root)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["catalog"] = catalog_url
    cfg["api"] = {
        "tokens": [
            {"user": u, "sha256": hashlib.sha256(token_of(u).encode()).hexdigest()} for u in USERS
        ]
    }
    cfg["connect"] = {
        "tls_cert": str(cert),
        "tls_key": str(key),
        "statement_timeout": 900,  # a loaded machine is slow; the test is about the kill
        "statement_queue_wait": 30,
    }
    cfg["spark"] = {"master": "local[2]", "conf": {"spark.driver.memory": "1g"}}
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    create = f"CREATE TABLE {WRITE_TABLE} (id BIGINT, client STRING, amount DOUBLE)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, "-c", SETUP_SCRIPT, str(cfg_path), create],
        check=True,
        cwd=root,
        env=env,
        stdout=(root / "setup.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    return cfg_path, {"ca": str(ca), "tokens": {u: token_of(u) for u in USERS}}


class Gateway:
    """One `lakegate connect` process (its own session group: kill -9 takes its JVM too)."""

    def __init__(self, root: Path, cfg_path: Path, index: int) -> None:
        self.root, self.cfg_path, self.index = root, cfg_path, index
        self.port, self.metrics = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.root / f"gateway{self.index}.{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [
                LAKEGATE,
                "--config",
                str(self.cfg_path),
                "connect",
                "--port",
                str(self.port),
                "--metrics-port",
                str(self.metrics),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.root,
        )

    @property
    def log(self) -> str:
        return (self.root / f"gateway{self.index}.{self.starts}.log").read_text()

    def wait_ready(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise harness.ScenarioFailed(f"gateway {self.index} exited:\n{self.log[-3000:]}")
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{self.metrics}/readyz", timeout=5).status_code
                    == 200
                ):
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise harness.ScenarioFailed(f"gateway {self.index} not ready in {timeout:.0f} s")

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def url(self, token: str) -> str:
        return f"sc://127.0.0.1:{self.port}/;use_ssl=true;token={token}"


def write_commits(table_dir: Path) -> dict[str, int]:
    """Query id -> version of every commit tagged by Lakegate in a table's Delta log."""
    from audit.landing import TAG_PREFIX

    found = {}
    for path in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            meta = (info or {}).get("userMetadata") or ""
            if meta.startswith(TAG_PREFIX):
                found[meta[len(TAG_PREFIX) :]] = int(path.stem)
    return found


def table_dir(cfg_path: Path) -> Path:
    from audit.landing import local_path
    from catalog.catalog import Catalog
    from catalog.store import open_store
    from governance.config import Config

    cfg = Config.load(cfg_path)
    cat = Catalog(open_store(cfg.catalog), cfg.warehouse)
    info = cat.table(*WRITE_TABLE.split("."))
    where = local_path(info.location) if info else None
    assert where is not None
    return where


def check_writes(audit_dir: Path, commits: dict[str, int], clients: list[dict]) -> dict[str, Any]:
    """Every tagged commit: its intent line, and what its client was answered. The
    ExecutePlan line of a write that returned carries the statement's query id and the
    request's SHA-256 (matched exactly to the client's request); a write whose server died
    before it answered has no such line, and is matched by its statement's hash (the
    intent's `stmt_hash`) to a write the client logged as UNAVAILABLE."""
    from audit.log import statement_hash
    from audit.query import read_records

    records = [r for r in read_records(audit_dir) if r is not None]  # RPC lines: no phase
    intents = {r.query_id: r for r in records if r.phase == "intent"}
    rpc = {
        r.query_id: r.stmt_hash
        for r in records
        if r.proto == "connect" and r.phase is None and r.cmd == "executePlan" and r.query_id
    }
    by_request: dict[str, dict[str, Any]] = {}
    by_text: dict[str, list[dict[str, Any]]] = {}
    for c in clients:
        for e in c["log"]:
            for _method, digest in e["sent"]:
                by_request[digest] = e | {"client": c["client"]}
            if "text" in e:
                by_text.setdefault(statement_hash(e["text"]), []).append(
                    e | {"client": c["client"]}
                )
    missing, refused, unmatched, in_flight, answered, setup = [], [], [], [], 0, 0
    for qid in commits:
        intent = intents.get(qid)
        if intent is None:
            missing.append(qid)
            continue
        if not (intent.caller_context or "").startswith("connect:"):
            setup += 1  # the set-up's CREATE TABLE, by an embedded session
            continue
        op = by_request.get(rpc.get(qid) or "")
        if op is None:  # no answer line: was it in flight when its server died?
            lost = [e for e in by_text.get(intent.stmt_hash or "", []) if not e["ok"]]
            if lost and all(e["code"] == "UNAVAILABLE" for e in lost):
                in_flight.append({"query": qid, "client": lost[0]["client"]})
            else:
                unmatched.append(qid)
        elif op["ok"]:
            answered += 1
        else:
            refused.append(
                {"query": qid, "client": op["client"], "code": op["code"], "details": op["details"]}
            )
    return {
        "commits": len(commits),
        "intents": len(intents),
        "answered_ok": answered,
        "setup": setup,
        "missing_intent": missing,
        "refused": refused,
        "in_flight_at_kill": in_flight,
        "unmatched": unmatched,
    }


def wait_for_open_write(audit_dir: Path, pid: int, timeout: float) -> bool:
    """Until the process `pid` has a write's intent line without its outcome (a write in
    flight), at most `timeout` s: killing it then is a kill mid-write."""
    from audit.landing import COMMITTING_CMDS
    from audit.query import open_intents, read_records

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in open_intents(read_records(audit_dir, phased=True)):
            if r.cmd in COMMITTING_CMDS and f":{pid}:" in f":{r.writer}:":
                return True
        time.sleep(0.05)
    return False


def pending(cfg_path: Path, root: Path) -> tuple[int, str]:
    out = subprocess.run(
        [LAKEGATE, "--config", str(cfg_path), "audit", "query", "--pending", "--output", "jsonl"],
        capture_output=True,
        text=True,
        cwd=root,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("{")]
    return len(lines), (out.stdout + out.stderr)[-2000:]


def verify_cli(cfg_path: Path, root: Path) -> tuple[int, str]:
    out = subprocess.run(
        [LAKEGATE, "--config", str(cfg_path), "audit", "verify"],
        capture_output=True,
        text=True,
        cwd=root,
    )
    return out.returncode, (out.stdout + out.stderr)[-2000:]


def run(args: argparse.Namespace, root: Path, catalog_url: str) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    cfg_path, info = lakehouse(root, catalog_url)
    gateways = [Gateway(root, cfg_path, i) for i in range(args.servers)]
    result: dict[str, Any] = {"servers": args.servers, "clients": args.clients}
    try:
        for g in gateways:
            g.start()
        for g in gateways:
            g.wait_ready()
        victim = gateways[0]
        out_dir = root / "clients"
        out_dir.mkdir()
        env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=info["ca"], PYTHONPATH=str(ROOT))
        procs = []
        for i in range(args.clients):
            user = USERS[i % len(USERS)]
            home = i % args.servers
            order = gateways[home:] + gateways[:home]
            spec = {
                "urls": [g.url(info["tokens"][user]) for g in order],
                "home": home,
                "user": user,
                "name": f"kill-{user}-{i}",
                "names": {
                    "orders": "main.sales.orders",
                    "customers": "main.sales.customers",
                    "writes": WRITE_TABLE,
                },
                "seconds": args.seconds,
                "offset": i,
                "retries": 3,
                "out": str(out_dir / f"c{i}.json"),
            }
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(ROOT / "benchmarks" / "load_kill_client.py"),
                        json.dumps(spec),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=(out_dir / f"c{i}.err").open("w"),
                    text=True,
                    env=env,
                    cwd=ROOT / "benchmarks",
                )
            )
        for i, p in enumerate(procs):
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                for q in procs:
                    q.kill()
                raise harness.ScenarioFailed(
                    f"client {i} did not start:\n{(out_dir / f'c{i}.err').read_text()[-3000:]}"
                )
        t0 = time.time()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        time.sleep(args.kill_at)
        assert victim.proc is not None
        mid_write = wait_for_open_write(root / "audit", victim.proc.pid, args.seconds / 2)
        killed_at = time.time()
        load_at_kill = os.getloadavg()[0]
        victim.kill9()
        result["killed_mid_write"] = mid_write
        print(
            f"killed gateway 0 (kill -9, process group) at {killed_at - t0:.1f} s"
            + (" with a write in flight (its intent line written)" if mid_write else ""),
            flush=True,
        )
        for i, p in enumerate(procs):
            if p.wait(timeout=args.seconds + 900) != 0:
                raise harness.ScenarioFailed(
                    f"client {i} failed:\n{(out_dir / f'c{i}.err').read_text()[-3000:]}"
                )
        clients = [
            c for i in range(len(procs)) for c in json.loads((out_dir / f"c{i}.json").read_text())
        ]
        audit_dir = root / "audit"
        from audit.landing import dead_intents

        dead = dead_intents(audit_dir)
        result["dead_intents_before_restart"] = [
            {"cmd": r.cmd, "query": r.query_id, "dst": r.dst} for r in dead
        ]
        # recovery without the dead server: what an operator runs when it is not coming back
        rec = subprocess.run(
            [LAKEGATE, "--config", str(cfg_path), "audit", "recover"],
            capture_output=True,
            text=True,
            cwd=root,
        )
        result["audit_recover"] = {"exit": rec.returncode, "text": rec.stdout + rec.stderr}
        t_restart = time.time()
        victim.start()  # a restarted server recovers too (none left by now), then serves
        victim.wait_ready()
        result["restart_s"] = time.time() - t_restart
        result["recovery_log"] = [ln for ln in victim.log.splitlines() if "outcome" in ln]
        from audit.query import read_records

        result["recovered"] = [
            {"query": r.query_id, "cmd": r.cmd, "succeeded": r.succeeded, "reason": r.reason}
            for r in read_records(audit_dir, phased=True)
            if r is not None and r.phase == "recovered"
        ]
        commits = write_commits(table_dir(cfg_path))
        result["writes"] = check_writes(audit_dir, commits, clients)
    finally:
        for g in gateways:
            g.stop()
    n_pending, pending_text = pending(cfg_path, root)
    code, verify_text = verify_cli(cfg_path, root)
    result["pending_after"] = n_pending
    result["pending_text"] = pending_text
    result["verify"] = {"exit": code, "text": verify_text}
    result["killed_at_s"] = killed_at - t0
    result["load_note"] = (
        f"1-minute load average {load0:.1f} at the start, {load_at_kill:.1f} at the kill, "
        f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores"
    )
    result["clients_figures"] = summarize(clients, killed_at)
    return result


def summarize(clients: list[dict[str, Any]], killed_at: float) -> dict[str, Any]:
    survivors, victims = [], []
    for c in clients:
        errors = [e for e in c["log"] if not e["ok"]]
        row = {
            "client": c["client"],
            "ops": len(c["log"]),
            "errors": Counter(f"{e['code']}: {e['details']}" for e in errors),
            "after_reconnect_ok": sum(
                1
                for e in c["log"]
                if e["ok"] and c["reconnects"] and e["t"] > c["reconnects"][-1]["t"]
            ),
            "reconnects": c["reconnects"],
            "first_error_s": (errors[0]["t"] - killed_at) if errors else None,
        }
        (victims if c["home"] == 0 else survivors).append(row)
    return {"survivors": survivors, "victims": victims}


def checks(r: dict[str, Any]) -> list[tuple[str, bool, str]]:
    s, v, w = r["clients_figures"]["survivors"], r["clients_figures"]["victims"], r["writes"]
    out = [
        (
            "clients of the other gateways saw no error",
            all(not c["errors"] for c in s) and all(c["ops"] > 0 for c in s),
            "; ".join(
                f"{c['client']}: {c['ops']} ops, {sum(c['errors'].values())} errors" for c in s
            ),
        ),
        (
            "the killed gateway's clients got UNAVAILABLE and nothing else",
            all(c["errors"] and all(k.startswith("UNAVAILABLE") for k in c["errors"]) for c in v),
            "; ".join(f"{c['client']}: {dict(c['errors'])}" for c in v),
        ),
        (
            "... and reconnected to a surviving gateway and went on",
            all(c["reconnects"] and c["after_reconnect_ok"] > 0 for c in v),
            "; ".join(
                f"{c['client']}: reconnected in {c['reconnects'][-1].get('ms', 0):.0f} ms, "
                f"{c['after_reconnect_ok']} ops ok after"
                for c in v
                if c["reconnects"]
            ),
        ),
        (
            "every committed write has its intent line",
            not w["missing_intent"],
            f"{w['commits']} tagged commits, missing intent: {w['missing_intent']}",
        ),
        (
            "no committed write got a refused reply",
            not w["refused"],
            f"{w['answered_ok']} answered OK, {w['setup']} the set-up's; refused: "
            f"{w['refused']}; in flight at the kill "
            f"(UNAVAILABLE, committed): {len(w['in_flight_at_kill'])}",
        ),
        (
            "every committed write is matched to its client's request",
            not w["unmatched"],
            f"not matched: {w['unmatched']}",
        ),
        (
            "nothing pending after recovery",
            r["pending_after"] == 0,
            f"{len(r['dead_intents_before_restart'])} dead intent(s) before the restart, "
            f"{r['pending_after']} pending after; {' / '.join(r['recovery_log'])}; recovered: "
            + "; ".join(f"{x['cmd']} {x['query']}: {x['reason']}" for x in r["recovered"]),
        ),
        (
            "lakegate audit recover resolved every dead intent",
            r["audit_recover"]["exit"] == 0,
            " / ".join(r["audit_recover"]["text"].strip().splitlines()[-6:]),
        ),
        (
            "lakegate audit verify passes",
            r["verify"]["exit"] == 0,
            r["verify"]["text"].strip().splitlines()[-1] if r["verify"]["text"].strip() else "",
        ),
    ]
    return out


def scenario(args: argparse.Namespace) -> int:
    from catalog.local_postgres import local_postgres, new_database

    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="lakegate-bench-kill-") as tmp:
        server = stack.enter_context(local_postgres())
        result = run(args, Path(tmp), new_database(server))
    rows = checks(result)
    result["checks"] = [{"check": c, "pass": ok, "detail": d} for c, ok, d in rows]
    print(
        f"{args.servers} gateways, {args.clients} clients, {args.seconds:g} s, "
        f"gateway 0 killed at {result['killed_at_s']:.1f} s; restarted in "
        f"{result['restart_s']:.0f} s"
    )
    for c, ok, d in rows:
        print(f"{'PASS' if ok else 'FAIL'}: {c}\n      {d}")
    if args.json:
        harness.write_json(args.json, result)
    return 0 if all(ok for _, ok, _ in rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--kill-at", type=float, default=20.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    return scenario(args)


if __name__ == "__main__":
    sys.exit(main())
