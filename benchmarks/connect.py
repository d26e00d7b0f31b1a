"""Spark Connect: the same queries through `lakegate connect` and on plain Spark Connect,
interleaved in one run; query p50 ratio and time to first row, against issue 31's targets.

The plain server is the very Spark Connect service the gateway forwards to (in the same
driver JVM, reached with its secret header and no TLS), reading the raw Delta tables
through temp views of `spark.read.format("delta").load(path)` (as tpcds_delta's A): the
difference is what the gateway adds (TLS relay, token, plan walk, governed planning and
audit, plan verification, forwarding). The clients are stock `pyspark.sql.connect`
sessions in a separate process (benchmarks/connect_client.py), as an analyst's are.

Two data sets:
  default   the demo's `main.sales.orders` as alice: one governed aggregate (plain: `orders`);
  --tpcds   TPC-DS queries on the Delta tables under DIR/delta (benchmarks/tpcds_delta.py's
            layout; its policies, as user `bench`), gateway text qualified with tpcds.sf1,
            plain text over temp views of the same Delta paths (tpcds_delta's mode A), and a
            third mode, floor: the plain service reading tpcds_delta's A' views (the same
            filters and masks written in by hand for `bench`), which splits gateway / plain
            into what the policies cost (floor / plain) and what the gateway adds
            (gateway / floor).
Each round times every query to its last row (`collect`) and the first row of a small
query (`toLocalIterator`). Targets (issue 31 item 4), printed MET / NOT MET:
  first row   gateway p50 within 50 ms of plain p50;
  query p50   gateway / plain <= 1.05 (TPC-DS: the sum of per-query p50s).

    python benchmarks/connect.py [--rounds 20] [--json]
    python benchmarks/connect.py --tpcds DIR [--queries 3,7,42] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "api" / "connect"))

from benchmarks import harness  # noqa: E402

QUERY = "SELECT region, sum(amount) AS total FROM {t} GROUP BY region"
SMALL = "SELECT id FROM {t} LIMIT 1"
TPCDS_QUERIES = "3,7,19,42,52,55,96"  # short star joins: the gateway's share is largest
TPCDS_SMALL = "SELECT * FROM {t} LIMIT 1"
FIRST_ROW_MS = 50.0  # issue 31: time to first row within 50 ms of plain Spark Connect
RATIO_P50 = 1.05  # issue 31: query p50 ratio at most 1.05


@contextlib.contextmanager
def gateway(lg: Any, user: str, root: Path) -> Iterator[tuple[Any, dict[str, str], Path]]:
    """A TLS gateway over `lg` with one token for `user`: (gateway, client urls, CA)."""
    from connect_testkit import make_tls, token_of

    from api.connect.server import Gateway
    from governance.config import ApiConfig, ApiToken, ConnectConfig
    from governance.session.governed import Lakegate

    ca, cert, key = make_tls(root)
    token = hashlib.sha256(token_of(user).encode()).hexdigest()
    cfg = replace(
        lg.config,
        api=ApiConfig(tokens=(ApiToken(user, token),)),
        connect=ConnectConfig(port=0, tls_cert=cert, tls_key=key),
    )
    served = Lakegate(cfg, spark=lg.spark)
    gw = Gateway(served, host="127.0.0.1", port=0)
    gw.start()
    urls = {
        "gateway": f"sc://127.0.0.1:{gw.port}/;use_ssl=true;token={token_of(user)}",
        "plain": f"sc://127.0.0.1:{gw.backend.port}/;user_id={user};"
        f"authorization=Bearer%20{gw.backend.secret}",
    }
    try:
        yield gw, urls, ca
    finally:
        gw.stop()
        served.close()


def demo_spec(root: Path) -> tuple[dict[str, Any], contextlib.ExitStack]:
    from governance.tools.demo import build_demo

    stack = contextlib.ExitStack()
    demo = build_demo(root / "lh", spark_log=root / "spark.log")
    stack.callback(demo.spark.stop)
    stack.callback(demo.close)
    location = demo.catalog.table("main", "sales", "orders").location
    _, urls, ca = stack.enter_context(gateway(demo, "alice", root))
    spec = {
        "urls": urls,
        "ca": str(ca),
        "plain_views": {"orders": location},
        "queries": {
            "orders aggregate": {
                "gateway": QUERY.format(t="main.sales.orders"),
                "plain": QUERY.format(t="orders"),
            }
        },
        "first_row": {
            "gateway": SMALL.format(t="main.sales.orders"),
            "plain": SMALL.format(t="orders"),
        },
    }
    return spec, stack


def tpcds_spec(root: Path, data: Path, wanted: str) -> tuple[dict[str, Any], contextlib.ExitStack]:
    """TPC-DS over the Delta tables tpcds_delta.py wrote under `data` (read, never
    rewritten): its Lakegate set-up (catalog, policies) in `root`, whose `delta` links to
    them."""
    from benchmarks.tpcds import spark_queries
    from benchmarks.tpcds_delta import setup_lakegate, tables_of
    from benchmarks.tpcds_policies import BENCH_USER
    from benchmarks.tpcds_views import CATALOG, FLOOR_DB, SCHEMA, qualify, setup_floor_views
    from governance.runtime.spark import build_spark

    ids = harness.parse_ids(wanted)
    plain = [(n, q) for n, q in spark_queries() if ids is None or n in ids]
    qualified = dict(spark_queries(qualify=f"{CATALOG}.{SCHEMA}"))
    needed = tables_of([q for _, q in plain] + ["SELECT 1 FROM store_sales"])
    paths = {t: str((data / "delta" / t).resolve()) for t in needed}
    missing = [t for t, p in paths.items() if not (Path(p) / "_delta_log").is_dir()]
    if missing:
        raise harness.ScenarioFailed(
            f"no Delta table for {', '.join(missing)} under {data / 'delta'}: write them with "
            "benchmarks/tpcds_delta.py --dir DIR --keep"
        )
    stack = contextlib.ExitStack()
    spark = build_spark(
        "local[2]",
        {"spark.driver.memory": "2g", "spark.sql.warehouse.dir": str(root / "spark-warehouse")},
        app_name="lakegate-bench-connect",
        log=root / "spark.log",
    )
    stack.callback(spark.stop)
    (root / "delta").symlink_to((data / "delta").resolve(), target_is_directory=True)
    lg = setup_lakegate(spark, root, paths)
    stack.callback(lg.close)
    setup_floor_views(spark, lg, paths)  # global temp views: the plain service reads them
    _, urls, ca = stack.enter_context(gateway(lg, BENCH_USER, root))
    urls["floor"] = urls["plain"]
    spec = {
        "urls": urls,
        "ca": str(ca),
        "plain_views": paths,
        "queries": {
            f"q{n}": {"gateway": qualified[n], "plain": sql, "floor": qualify(sql, FLOOR_DB)}
            for n, sql in plain
        },
        "first_row": {
            "gateway": TPCDS_SMALL.format(t=f"{CATALOG}.{SCHEMA}.store_sales"),
            "plain": TPCDS_SMALL.format(t="store_sales"),
            "floor": TPCDS_SMALL.format(t=f"{FLOOR_DB}.store_sales"),
        },
    }
    return spec, stack


def client(spec: dict[str, Any], rounds: int) -> dict[str, Any]:
    """The figures from connect_client.py, run in its own process with this interpreter."""
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=spec["ca"])
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "connect_client.py")],
        input=json.dumps({**spec, "rounds": rounds}),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise harness.ScenarioFailed(f"the Connect client failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 31's two targets with the figures each is judged on."""
    f = result["first_row"]
    gap = f["gateway"]["p50"] - f["plain"]["p50"]
    q = result["query"]
    gw = sum(v["gateway"]["p50"] for v in q.values())
    pl = sum(v["plain"]["p50"] for v in q.values())
    return [
        {
            "target": f"time to first row within {FIRST_ROW_MS:.0f} ms of plain Spark Connect",
            "met": gap <= FIRST_ROW_MS,
            "gateway_ms": f["gateway"]["p50"],
            "plain_ms": f["plain"]["p50"],
            "difference_ms": gap,
        },
        {
            "target": f"query p50 ratio gateway / plain <= {RATIO_P50}",
            "met": gw / pl <= RATIO_P50,
            "gateway_ms": gw,
            "plain_ms": pl,
            "ratio": gw / pl,
        },
    ]


def split(result: dict[str, Any]) -> dict[str, float] | None:
    """gateway / plain as two factors, when the run had the floor (TPC-DS): floor / plain,
    what the bench user's policies cost through Spark Connect, and gateway / floor, what
    the gateway adds on top (sums of per-query p50s)."""
    q = result["query"]
    if not q or not all("floor" in v for v in q.values()):
        return None
    gw, pl, fl = (sum(v[m]["p50"] for v in q.values()) for m in ("gateway", "plain", "floor"))
    return {
        "gateway_ms": gw,
        "plain_ms": pl,
        "floor_ms": fl,
        "policies_ratio": fl / pl,
        "gateway_over_floor": gw / fl,
        "gateway_minus_floor_ms_per_query": (gw - fl) / len(q),
    }


def scenario(args: argparse.Namespace) -> None:
    import pyspark

    with tempfile.TemporaryDirectory(prefix="lakegate-bench-connect-") as tmp:
        root = Path(tmp)
        if args.tpcds:
            spec, stack = tpcds_spec(root, Path(args.tpcds), args.queries)
        else:
            spec, stack = demo_spec(root)
        with stack:
            result = client(spec, args.rounds)
    result.update(
        data="tpcds" if args.tpcds else "demo",
        line=f"Spark {pyspark.__version__}",
        rounds=args.rounds,
    )
    q = result["query"]
    result["ratio_p50"] = sum(v["gateway"]["p50"] for v in q.values()) / sum(
        v["plain"]["p50"] for v in q.values()
    )
    result["targets"] = targets(result)
    result["split"] = split(result)
    print(f"{result['line']}, {result['data']} data, {args.rounds} interleaved rounds")
    for name, v in q.items():
        g, p = v["gateway"]["p50"], v["plain"]["p50"]
        floor = f", floor p50 {v['floor']['p50']:7.0f} ms" if "floor" in v else ""
        print(
            f"  {name:<18} gateway p50 {g:7.0f} ms, plain p50 {p:7.0f} ms{floor}, ratio {g / p:.2f}"
        )
    f = result["first_row"]
    print(
        f"  first row          gateway p50 {f['gateway']['p50']:7.0f} ms "
        f"(p99 {f['gateway']['p99']:.0f}), plain p50 {f['plain']['p50']:7.0f} ms"
    )
    for t in result["targets"]:
        figures = (
            f"difference {t['difference_ms']:+.0f} ms"
            if "difference_ms" in t
            else f"ratio {t['ratio']:.3f}"
        )
        print(
            f"target {t['target']}: {'MET' if t['met'] else 'NOT MET'} (gateway "
            f"{t['gateway_ms']:.0f} ms, plain {t['plain_ms']:.0f} ms, {figures})"
        )
    sp = result["split"]
    if sp:
        print(
            f"split: floor / plain {sp['policies_ratio']:.3f} (the policies, written in by "
            f"hand), gateway / floor {sp['gateway_over_floor']:.3f} (the gateway, "
            f"{sp['gateway_minus_floor_ms_per_query']:+.0f} ms per query)"
        )
        differ = [n for n, same in result["floor_same_answer"].items() if not same]
        if differ:
            print(f"warning: the floor's answer differs from the gateway's on {', '.join(differ)}")
    if args.json:
        print(json.dumps(result, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tpcds", metavar="DIR", help="TPC-DS Delta tables under DIR/delta")
    ap.add_argument("--queries", default=TPCDS_QUERIES, help="TPC-DS query numbers (--tpcds)")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args()
    return harness.main("connect", lambda: scenario(args))


if __name__ == "__main__":
    sys.exit(main())
