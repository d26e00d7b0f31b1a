"""Spark Connect: a governed query through `lakegate connect` vs the same query on a plain
Spark Connect server, interleaved in one run (ratio), and time to first row.

The plain server is the very Spark Connect service the gateway forwards to (in the same
driver JVM, reached with its secret header and no TLS), asked for the raw Delta table by
its path: the difference is what the gateway adds (TLS, token, plan walk, governed
planning and audit, plan verification, forwarding). Both clients are stock
`pyspark.sql.connect` sessions in this process.

    .venv/bin/python benchmarks/connect.py [--rounds 20] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "connect"))

from benchmarks import harness  # noqa: E402

QUERY = "SELECT region, sum(amount) AS total FROM {t} GROUP BY region"
SMALL = "SELECT id FROM {t} LIMIT 1"


def scenario(rounds: int, as_json: bool) -> None:
    from connect_testkit import make_tls, token_of
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    from api.connect.server import Gateway
    from governance.config import ApiConfig, ApiToken, ConnectConfig
    from governance.demo import build_demo
    from governance.session import Lakegate

    with tempfile.TemporaryDirectory(prefix="lakegate-bench-connect-") as tmp:
        root = Path(tmp)
        demo = build_demo(root / "lh", spark_log=root / "spark.log")
        ca, cert, key = make_tls(root)
        cfg = replace(
            demo.config,
            api=ApiConfig(
                tokens=(ApiToken("alice", hashlib.sha256(token_of("alice").encode()).hexdigest()),)
            ),
            connect=ConnectConfig(port=0, tls_cert=cert, tls_key=key),
        )
        lg = Lakegate(cfg, spark=demo.spark)
        gw = Gateway(lg, host="127.0.0.1", port=0)
        gw.start()
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(ca)
        location = lg.catalog.table("main", "sales", "orders").location
        raw = "delta.`" + location.replace("`", "``") + "`"
        sessions = {
            "gateway": RemoteSession.builder.remote(
                f"sc://127.0.0.1:{gw.port}/;use_ssl=true;token={token_of('alice')}"
            ).create(),
            "plain": RemoteSession.builder.remote(
                f"sc://127.0.0.1:{gw.backend.port}/;user_id=alice;"
                f"authorization=Bearer%20{gw.backend.secret}"
            ).create(),
        }
        tables = {"gateway": "main.sales.orders", "plain": raw}
        try:
            times: dict[str, list[float]] = {m: [] for m in sessions}
            first: dict[str, list[float]] = {m: [] for m in sessions}
            for mode in sessions:  # warm-up: JIT, plan caches, first session set-up
                sessions[mode].sql(QUERY.format(t=tables[mode])).collect()
            for order in harness.rotations(list(sessions), rounds):
                for mode in order:
                    s, t = sessions[mode], tables[mode]
                    ms, out = harness.timed_ms(lambda s=s, t=t: s.sql(QUERY.format(t=t)).collect())
                    if not out:
                        raise harness.ScenarioFailed(f"{mode}: the query returned no rows")
                    times[mode].append(ms)
                    ms, _ = harness.timed_ms(lambda s=s, t=t: _first_row(s, SMALL.format(t=t)))
                    first[mode].append(ms)
        finally:
            for s in sessions.values():
                s.stop()
            gw.stop()
            lg.close()
            demo.close()
            demo.spark.stop()
    result: dict[str, Any] = {
        "rounds": rounds,
        "query": {m: harness.summary(v) for m, v in times.items()},
        "first_row": {m: harness.summary(v) for m, v in first.items()},
    }
    result["ratio_p50"] = result["query"]["gateway"]["p50"] / result["query"]["plain"]["p50"]
    q, f = result["query"], result["first_row"]
    print(
        f"governed query: gateway p50 {q['gateway']['p50']:.0f} ms, plain Spark Connect "
        f"p50 {q['plain']['p50']:.0f} ms, ratio {result['ratio_p50']:.2f}"
    )
    print(
        f"time to first row: gateway p50 {f['gateway']['p50']:.0f} ms "
        f"(p99 {f['gateway']['p99']:.0f}), plain p50 {f['plain']['p50']:.0f} ms"
    )
    if as_json:
        print(json.dumps(result, indent=1))


def _first_row(session: Any, sql: str) -> Any:
    """The first row as it streams in; the iterator is closed at once (releasing the
    operation on the server) rather than at interpreter exit."""
    rows = session.sql(sql).toLocalIterator()
    try:
        return next(rows)
    finally:
        rows.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args()
    return harness.main("connect", lambda: scenario(args.rounds, args.json))


if __name__ == "__main__":
    sys.exit(main())
