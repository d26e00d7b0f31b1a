"""One-shot command-line start (issue 14, item 5): `lakegate sql` against a bare PySpark
start plus the same count, interleaved, and where the command's time goes.

Builds the demo lakehouse once, starts `lakegate connect` on it once (TLS with a throwaway
CA, one token for alice; stopped at the end), then per round, in rotated order:
  cli      `lakegate --config demo/lakegate.yaml sql --user alice "SELECT count(*) FROM
           main.sales.orders"` as a user runs it (a new process each time);
  gateway  `lakegate sql --gateway sc://127.0.0.1:PORT --ca-file ca.pem --token-file alice
           "<the same statement>"` against that running gateway (a new process each time,
           no Spark of its own);
  bare     a new Python process that starts PySpark with the same Delta jars and counts the
           same Delta table by path (no governance).
Then, once, the command's phases timed inside one process (imports, Spark start, opening
Lakegate, the governed statement, close). Prints medians and the cli/bare and gateway/bare
ratios.

    python benchmarks/cli_start.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "connect"))

from benchmarks import harness  # noqa: E402

STATEMENT = "SELECT count(*) FROM main.sales.orders"
BARE = """
import sys
from pyspark.sql import SparkSession
from governance.runtime.spark import cached_delta_jars
b = (SparkSession.builder.master("local[*]")
     .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
     .config("spark.sql.catalog.spark_catalog",
             "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
jars = cached_delta_jars()
if jars:
    b = b.config("spark.jars", ",".join(jars))
else:
    from delta import configure_spark_with_delta_pip
    b = configure_spark_with_delta_pip(b)
s = b.getOrCreate()
s.sparkContext.setLogLevel("ERROR")
print(s.read.format("delta").load(sys.argv[1]).count())
s.stop()
"""
PHASES = """
import json, sys, time
t = [time.perf_counter()]
from governance.session.governed import Lakegate
t.append(time.perf_counter())
lg = Lakegate.open(sys.argv[1], spark_log=__import__("pathlib").Path(sys.argv[2]))
t.append(time.perf_counter())
spark = lg.spark
t.append(time.perf_counter())
s = lg.session("alice")
t.append(time.perf_counter())
rows = s.sql(sys.argv[3]).collect()
t.append(time.perf_counter())
lg.close()
t.append(time.perf_counter())
names = ["import", "open", "spark start", "session", "first statement", "close"]
print(json.dumps({n: round(b - a, 3) for n, a, b in zip(names, t, t[1:])}))
"""


def _count(cmd: list[str], stdout: str) -> int:
    """The count a variant printed (the last number on stdout)."""
    numbers = [w for w in stdout.replace("|", " ").split() if w.isdigit()]
    if not numbers:
        raise RuntimeError(f"{cmd[:4]} printed no count: {stdout[-500:]}")
    return int(numbers[-1])


def timed(cmd: list[str]) -> tuple[float, str]:
    """Seconds a new process takes, and its stdout."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - t0, done.stdout


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@contextlib.contextmanager
def running_gateway(lakegate: str, cfg: Path, tmp: Path) -> Iterator[list[str]]:
    """`lakegate connect` on the demo (its lakegate.yaml gains `api.tokens` and `connect:`),
    up until the block ends; yields the `sql --gateway ...` options that reach it as alice."""
    from connect_testkit import make_tls

    ca, cert, key = make_tls(tmp)
    token = secrets.token_urlsafe(32)
    token_file = tmp / "alice.token"
    token_file.write_text(token)
    conf = yaml.safe_load(cfg.read_text())
    conf["api"] = {
        "tokens": [{"user": "alice", "sha256": hashlib.sha256(token.encode()).hexdigest()}]
    }
    conf["connect"] = {"port": 0, "tls_cert": str(cert), "tls_key": str(key)}
    cfg.write_text(yaml.safe_dump(conf, sort_keys=False))
    proc = subprocess.Popen(
        [lakegate, "--config", str(cfg), "connect"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    try:
        port = _announced_port(proc, timeout=300)
        yield [
            "--gateway",
            f"sc://127.0.0.1:{port}",
            "--ca-file",
            str(ca),
            "--token-file",
            str(token_file),
        ]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _announced_port(proc: subprocess.Popen[str], timeout: float) -> int:
    """The port from the gateway's 'Spark Connect on HOST:PORT (TLS)' line."""
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        if not sel.select(timeout=1.0):
            if proc.poll() is not None:
                break
            continue
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if "Spark Connect on" in line:
            return int(line.split(" on ", 1)[1].split()[0].rsplit(":", 1)[1])
    raise RuntimeError(f"lakegate connect did not start: {''.join(seen)[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", metavar="OUT", help="write the figures as JSON to OUT")
    args = ap.parse_args(argv)
    lakegate = str(Path(sys.executable).with_name("lakegate"))
    with tempfile.TemporaryDirectory(prefix="lakegate-cli-bench-") as tmp:
        demo = Path(tmp) / "demo"
        t0 = time.perf_counter()
        timed([lakegate, "demo", "--dir", str(demo)])
        print(f"demo lakehouse built in {time.perf_counter() - t0:.0f} s", flush=True)
        cfg = str(demo / "lakegate.yaml")
        orders = str(demo / "warehouse" / "main" / "sales" / "orders")
        if not (Path(orders) / "_delta_log").is_dir():
            raise RuntimeError(f"no Delta table at {orders}")
        with running_gateway(lakegate, Path(cfg), Path(tmp)) as remote:
            cmds = {
                "cli": [lakegate, "--config", cfg, "sql", "--user", "alice", STATEMENT],
                "gateway": [lakegate, "sql", *remote, STATEMENT],
                "bare": [sys.executable, "-c", BARE, orders],
            }
            timed(cmds["gateway"])  # the gateway's first statement warms its JVM, once
            got: dict[str, list[float]] = {k: [] for k in cmds}
            counts: dict[str, set[int]] = {k: set() for k in cmds}
            for order in harness.rotations(list(cmds), args.rounds):
                for name in order:
                    seconds, stdout = timed(cmds[name])
                    got[name].append(seconds)
                    counts[name].add(_count(cmds[name], stdout))
        # both governed runs must give alice's count (bare counts every row, unfiltered)
        if len(counts["cli"] | counts["gateway"]) != 1:
            raise RuntimeError(f"lakegate sql and --gateway disagree on the count: {counts}")
        med = {k: statistics.median(v) for k, v in got.items()}
        print(
            f"one-shot `lakegate sql` {med['cli']:.1f} s (runs {_list(got['cli'])}), "
            f"`lakegate sql --gateway` {med['gateway']:.1f} s (runs {_list(got['gateway'])}), "
            f"bare PySpark + count {med['bare']:.1f} s (runs {_list(got['bare'])}); cli/bare "
            f"{med['cli'] / med['bare']:.2f}, gateway/bare {med['gateway'] / med['bare']:.2f}, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        log = str(Path(tmp) / "phases-spark.log")
        done = subprocess.run(
            [sys.executable, "-c", PHASES, cfg, log, STATEMENT],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=_env(),
        )
        if done.returncode != 0:
            raise RuntimeError(f"phase timing failed: {done.stderr[-2000:]}")
        phases = json.loads(done.stdout.strip().splitlines()[-1])
        print("phases of the command, in one process (s): " + json.dumps(phases))
    if args.json:
        harness.write_json(args.json, {"runs": got, "median": med, "phases": phases})
    return 0


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    sys.exit(harness.main("cli_start", main))
