"""The server side of benchmarks/load.py: the demo lakehouse behind a TLS Connect gateway,
in its own process, so the gateway's CPU and memory are this process's alone.

The same process serves the REST API (`lakegate serve`'s app, api/app.py, under uvicorn on
a thread, over the same Lakegate): REST clients and Connect clients meet one governed
layer, one audit log and one JVM, and its CPU and memory are this process's too.

With `--tpcds DIR --tpcds-scale S` the TPC-DS tables under DIR/delta (benchmarks/
load_tpcds.py: written once per scale, then reused) are registered as tpcds.sf1.* under
their policies for the load's users: the heavy part of the mix.

Started by load.py with a work directory; prints one JSON line (the gateway's, the REST
API's and the plain service's addresses, the CA, the tables' Delta paths, the audit
directory, the JVM's pid)
once serving, then samples itself every `--every` seconds into `samples.jsonl` (RSS, CPU,
Python objects, fds and threads of this process and of its JVM, the JVM heap, open Connect
sessions, plan cache entries and the Datasets the gateway keeps in the backend) until its
stdin closes.

The plain reference is the Spark Connect service the gateway forwards to, in the same JVM,
reached with its secret and no TLS (as benchmarks/connect.py's): the difference is what the
gateway adds.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "api" / "connect"))

# the personas of the demo's policies (governance/tools/demo.py), each its own rules
USERS = ("alice", "bob", "carol", "dana", "erin")
MAX_ANALYSTS = 64  # load.py's largest N


def analyst(i: int) -> str:
    """Client i's own user (issue 39: each client its own user): alice00, bob01, ..., under
    the policies of the persona it is named after (`add_analysts`), so every N runs users
    with different policies and each has its own limits, pool and audit lines."""
    return f"{USERS[i % len(USERS)]}{i:02d}"


ANALYSTS = tuple(analyst(i) for i in range(MAX_ANALYSTS))


def add_analysts(policies: Path) -> None:
    """Every list in the policy files naming a persona (a group's members, a rule's
    principals) names that persona's analysts too. Edited as YAML nodes, so every other
    scalar (`on:` is a key, not YAML 1.1's true) is written back as it was read."""
    import yaml

    for path in sorted(policies.glob("*.yaml")):
        root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
        if root is not None:
            _with_analysts(root)
            path.write_text(yaml.serialize(root, Dumper=yaml.SafeDumper))


def _with_analysts(node: Any) -> None:
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if isinstance(node, MappingNode):
        for _, value in node.value:
            _with_analysts(value)
    elif isinstance(node, SequenceNode):
        named = {v.value for v in node.value if isinstance(v, ScalarNode)} & set(USERS)
        for v in node.value:
            _with_analysts(v)
        node.value += [
            ScalarNode("tag:yaml.org,2002:str", a)
            for i, a in enumerate(ANALYSTS)
            if USERS[i % len(USERS)] in named
        ]


WRITE_TABLE = "main.sales.load_writes"
SESSION_IDLE = 20.0  # connect.session_idle_timeout of the load's gateway (seconds)

# the load's own table, written by every analyst (its grant below); reads stay on the
# demo's tables, whose size the writes never change
LOAD_POLICY = f"""\
grants:
  - id: load-writers
    principals: [group:analysts, group:sales-owners]
    privileges: [select, modify]
    on: {WRITE_TABLE}
"""


def _proc(pid: int | str) -> dict[str, float]:
    """RSS (MB), CPU seconds, fds and threads of one process, from /proc."""
    base = Path(f"/proc/{pid}")
    rss = 0.0
    for line in (base / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return {
        "rss_mb": rss,
        "cpu_s": (int(fields[11]) + int(fields[12])) / tick,
        "fds": float(len(os.listdir(base / "fd"))),
        "threads": float(len(os.listdir(base / "task"))),
    }


def sample(gw: Any, lg: Any, jvm_pid: int) -> dict[str, Any]:
    """One sample of everything the soak watches."""
    rt = lg.spark._jvm.java.lang.Runtime.getRuntime()
    return {
        "t": time.time(),
        "py": _proc("self"),
        "jvm": _proc(jvm_pid),
        "heap_mb": (rt.totalMemory() - rt.freeMemory()) / 2**20,
        "py_objects": len(gc.get_objects()),
        "sessions": gw.service.sessions.count(),
        "plan_cache": len(lg.plans),
        "kept": gw.service.sessions.kept(),
        "statements": sum(1 for _ in list(gw.service.limits._running)),
    }


def bounds(lg: Any) -> dict[str, float]:
    """Each bounded cache's configured bound, for the soak's report."""
    from api.connect.verified import KEPT

    c = lg.config.connect
    return {"sessions": c.max_sessions, "plan_cache": lg.plans.size, "kept": KEPT * c.max_sessions}


class Served:
    """The demo lakehouse behind a gateway over `spark`: `info` is what clients need."""

    def __init__(
        self,
        root: Path,
        spark: Any,
        *,
        per_user: int,
        queue: float,
        workers: int,
        tpcds: dict[str, str] | None = None,
        lakehouse: Any = None,
        fair_share_slots: int | None = None,
    ) -> None:
        """`tpcds`: TPC-DS table -> Delta path, registered as tpcds.sf1.* (None: none).
        `lakehouse`: a demo lakehouse already built over `spark` (the tests' shared one) to
        serve instead of building one (see `over`); None: a demo of its own under `root`."""
        import shutil

        from connect_testkit import make_tls, token_of

        from api.connect.server import Gateway
        from governance.config import ApiConfig, ApiToken, ConnectConfig
        from governance.session.governed import Lakegate
        from governance.tools.demo import REFERENCE_POLICIES, build_demo

        policies = root / "policies-src"
        shutil.copytree(REFERENCE_POLICIES, policies, ignore=shutil.ignore_patterns("schema.json"))
        (policies / "load.yaml").write_text(LOAD_POLICY)
        if tpcds:
            from benchmarks.load_tpcds import policy_yaml

            (policies / "tpcds.yaml").write_text(policy_yaml(root / "delta"))
        add_analysts(policies)
        if lakehouse is None:
            self.demo = build_demo(root / "lh", spark=spark, policies=policies)
        else:
            self.demo = over(lakehouse, root / "lh", spark, policies)
        self.demo.session("root").sql(
            f"CREATE TABLE {WRITE_TABLE} (id BIGINT, client STRING, amount DOUBLE)"
        )
        from benchmarks.load_tpcds import CATALOG, SCHEMA

        for table, path in (tpcds or {}).items():
            self.demo.register_table(f"{CATALOG}.{SCHEMA}.{table}", path)
        ca, cert, key = make_tls(root)
        tokens = tuple(
            ApiToken(u, hashlib.sha256(token_of(u).encode()).hexdigest())
            for u in (*USERS, *ANALYSTS)
        )
        cfg = replace(
            self.demo.config,
            # REST: the statement timeout as Connect's below (plain has none)
            api=ApiConfig(tokens=tokens, timeout=900.0),
            connect=ConnectConfig(
                port=0,
                tls_cert=cert,
                tls_key=key,
                # plain Spark Connect has no timeout: on a loaded machine the default 60 s
                # would turn slow statements into errors only the gateway gives
                statement_timeout=900.0,
                max_statements_per_user=per_user,
                statement_queue_wait=queue,
                fair_share_slots=fair_share_slots,
                max_sessions_per_user=64,
                max_sessions=96,
                # Spark 3.5's clients never release their sessions (no ReleaseSession before
                # Spark 4): the runs' finished sessions must expire before the next N opens
                # its own (load.py waits this long after a gateway side)
                session_idle_timeout=SESSION_IDLE,
            ),
        )
        self.lg = Lakegate(cfg, spark=spark)
        self.gw = Gateway(self.lg, host="127.0.0.1", port=0, max_workers=workers or None)
        self.gw.start()
        self.rest, self._rest_stop = serve_rest(self.lg)
        self.jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        tables = {
            t: self.demo.catalog.table("main", "sales", t).location
            for t in ("orders", "customers", "load_writes")
        }
        self.info: dict[str, Any] = {
            "gateway": f"sc://127.0.0.1:{self.gw.port}/;use_ssl=true;token={{token}}",
            "tokens": {u: token_of(u) for u in (*USERS, *ANALYSTS)},
            "plain": f"sc://127.0.0.1:{self.gw.backend.port}/;user_id={{user}};"
            f"authorization=Bearer%20{self.gw.backend.secret}",
            "rest": self.rest,
            "ca": str(ca),
            "tables": {t: str(p) for t, p in tables.items()},
            "tpcds": dict(tpcds or {}),
            "tpcds_queries": tpcds_queries() if tpcds else {},
            "audit": str(self.lg.config.audit),
            "pid": os.getpid(),
            "jvm_pid": self.jvm_pid,
            "workers": workers or max(16, 2 * cfg.connect.max_sessions),  # Gateway's default
            "fair_share_slots": self.gw.service.limits.fair_share_slots,  # auto's too
            "bounds": bounds(self.lg),
            "floor": str(write_floor(self.lg, root / "floor.json", tpcds or {})),
        }

    def sample(self) -> dict[str, Any]:
        return sample(self.gw, self.lg, self.jvm_pid)

    def heap_mb(self) -> float:
        rt = self.lg.spark._jvm.java.lang.Runtime.getRuntime()
        return float((rt.totalMemory() - rt.freeMemory()) / 2**20)

    def stop(self) -> None:
        self._rest_stop()
        self.gw.stop()
        self.lg.close()
        self.demo.close()


RAW = "lg_raw_{}"  # the floor's name for a table's raw temp view (as plain's own)


def write_floor(lg: Any, path: Path, tpcds: dict[str, str]) -> Path:
    """The floor (load.py `--floor`): per analyst, each table plain reads, as the SQL of
    that analyst's governed view (`explain` of a SELECT *: Lakegate's own rewrite, every
    "does this apply to me" test already answered) over a temp view of the raw table made
    as plain makes its own (`RAW`), so the floor reads exactly what plain reads. Plain
    Spark Connect over these views evaluates the same filters and masks with no gateway:
    gateway/floor is what Lakegate itself costs, floor/plain what the policies cost (as
    benchmarks/tpcds_views.py's A')."""
    from benchmarks.load_tpcds import CATALOG, SCHEMA

    tables = {"orders": "main.sales.orders", "customers": "main.sales.customers"}
    tables.update({t: f"{CATALOG}.{SCHEMA}.{t}" for t in tpcds})
    floor = {
        user: {
            n: over_raw(lg.session(user).explain(f"SELECT * FROM {t}"), n)
            for n, t in tables.items()
        }
        for user in ANALYSTS
    }
    path.write_text(json.dumps(floor))
    return path


def over_raw(sql: str, name: str) -> str:
    """A governed view's SQL reading `RAW` for `name` in place of its one Delta path."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read="spark")
    reads = [t for t in tree.find_all(exp.Table) if t.text("db").lower() == "delta"]
    if len(reads) != 1:
        raise ValueError(f"the governed view of {name} reads {len(reads)} Delta paths, not 1")
    raw = exp.Table(this=exp.to_identifier(RAW.format(name)), alias=reads[0].args.get("alias"))
    reads[0].replace(raw)
    return tree.sql("spark")


def over(lakehouse: Any, root: Path, spark: Any, policies: Path) -> Any:
    """A Lakegate over an existing demo lakehouse's tables, which stay untouched: a copy of
    its catalog (SQLite, as the demo's), with `policies`, and its own warehouse (the load's
    write table is made there) and audit directory under `root`. The demo's set-up
    statements are most of a Served's start: a test that already holds the demo pays them
    once."""
    import sqlite3

    from governance.files import owner_only_tree
    from governance.session.governed import Lakegate

    root.mkdir(parents=True)
    owner_only_tree(policies)  # as the demo's own copy (copies keep the source's modes)
    src, dst = sqlite3.connect(lakehouse.config.catalog), sqlite3.connect(root / "catalog.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    cfg = replace(
        lakehouse.config,
        catalog=str(root / "catalog.db"),
        warehouse=root / "warehouse",
        audit=root / "audit",
        policies=policies,
    )
    return Lakegate(cfg, spark=spark)


def tpcds_queries() -> dict[str, dict[str, str]]:
    from benchmarks.load_tpcds import queries

    return {str(n): q for n, q in queries().items()}


def serve_rest(lg: Any) -> tuple[str, Any]:
    """The REST API (`lakegate serve`'s app) over `lg` under uvicorn on a thread, on a free
    loopback port: its base URL and how to stop it."""
    import logging
    import socket

    import uvicorn

    from api.app import create_app

    app = create_app(lg)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    # log_config=None: uvicorn's default dictConfig would close the audit log's handlers
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=lg.config.api.keep_alive_seconds,  # as `lakegate serve`
        )
    )
    logging.getLogger("lakegate.api").setLevel(logging.ERROR)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("the REST server did not start")
        time.sleep(0.05)

    def stop() -> None:
        server.should_exit = True
        thread.join(30)
        sock.close()
        app.state.service.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def fair_slots(text: str) -> int | None:
    """--fair-share-slots: `auto` (Lakegate's default, the backend's task slots) is None."""
    return None if text == "auto" else int(text)


def fair_slots_arg(slots: int | None) -> str:
    """`fair_slots`'s text again, for the command line of a server started from here."""
    return "auto" if slots is None else str(slots)


def main() -> int:
    from governance.runtime.heap import settle_heap
    from governance.runtime.spark import build_spark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--per-user", type=int, default=8, help="connect.max_statements_per_user")
    ap.add_argument("--queue", type=float, default=30.0, help="connect.statement_queue_wait")
    ap.add_argument(
        "--fair-share-slots",
        type=fair_slots,
        default=None,
        help="connect.fair_share_slots: auto (the default: the backend's task slots), 0 (off) or N",
    )
    ap.add_argument("--workers", type=int, default=0, help="gRPC threads (0: the default)")
    ap.add_argument("--tpcds", type=Path, help="TPC-DS cache directory (DIR/delta)")
    ap.add_argument("--tpcds-scale", type=float, default=0.0, help="TPC-DS scale (0: none)")
    ap.add_argument(
        "--scheduler-mode",
        choices=("FAIR", "FIFO"),
        default="FIFO",
        help="spark.scheduler.mode (FIFO, Lakegate's default; FAIR: a pool per gateway user)",
    )
    args = ap.parse_args()
    root: Path = args.dir
    spark = build_spark(
        "local[2]",
        {
            "spark.driver.memory": "3g",
            "spark.sql.warehouse.dir": str(root / "spark-warehouse"),
            "spark.scheduler.mode": args.scheduler_mode,
        },
        app_name="lakegate-bench-load",
        log=root / "spark.log",
    )
    tpcds = None
    if args.tpcds_scale:
        from benchmarks.load_tpcds import ensure_data, tables_read

        with contextlib.redirect_stdout(sys.stderr):  # stdout is load.py's: one JSON line
            paths = ensure_data(spark, args.tpcds, args.tpcds_scale)
        tpcds = {t: paths[t] for t in tables_read()}
    served = Served(
        root,
        spark,
        per_user=args.per_user,
        queue=args.queue,
        workers=args.workers,
        tpcds=tpcds,
        fair_share_slots=args.fair_share_slots,
    )
    settle_heap()  # as `lakegate connect` does once started
    print(json.dumps(served.info), flush=True)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    with (root / "samples.jsonl").open("a") as out:
        while not done.wait(args.every):
            out.write(json.dumps(served.sample()) + "\n")
            out.flush()
    served.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
