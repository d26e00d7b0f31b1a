"""The governed scenarios run on both engines: a loopback standalone cluster and local mode.

Run as a script, it builds the demo lakehouse under a folder with the given Spark master,
runs the scenarios and writes them as JSON to the given file (the cluster side runs in its
own process, since a Python process holds one SparkContext). Not to stdout: the driver's JVM
shares the script's stdout, and what it prints there can come after any line of ours.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (user, statement), run in this order; the writes change the lakehouse, so later reads
# see their effect on both engines.
SCENARIOS: list[tuple[str, str]] = [
    ("carol", "SELECT id, region, amount FROM main.sales.orders ORDER BY id"),
    ("alice", "SELECT id, name, email, phone FROM main.sales.customers ORDER BY id"),
    (
        "carol",
        "SELECT c.name, count(*) AS n, sum(o.amount) AS total FROM main.sales.orders o "
        "JOIN main.sales.customers c ON o.customer_id = c.id GROUP BY c.name ORDER BY 1",
    ),
    ("dana", "SELECT region, count(*) AS n FROM main.sales.orders GROUP BY region ORDER BY 1"),
    ("alice", "SELECT name, salary FROM main.hr.employees"),
    ("alice", "SELECT * FROM delta.`/tmp/anything`"),
    ("erin", "SELECT count(*) AS n FROM main.sales.orders VERSION AS OF 0"),
    (
        "carol",
        "INSERT INTO main.sales.orders VALUES (20, 1, 'EMEA', 10.00, DATE'2026-05-01', false)",
    ),
    (
        "carol",
        "INSERT INTO main.sales.orders VALUES (21, 2, 'AMER', 11.00, DATE'2026-05-02', false)",
    ),
    ("carol", "UPDATE main.sales.orders SET amount = amount + 1 WHERE amount < 100"),
    ("carol", "DELETE FROM main.sales.orders WHERE id = 4"),
    ("erin", "SELECT id, region, amount, is_test FROM main.sales.orders ORDER BY id"),
    ("erin", "SELECT count(*) AS n FROM main.sales.orders VERSION AS OF 1"),
]


def run_scenarios(lg: Any) -> list[dict[str, Any]]:
    """Each scenario's rows as strings, or its error's kind and message."""
    from governance.errors import LakegateError

    out: list[dict[str, Any]] = []
    for user, sql in SCENARIOS:
        try:
            rows = lg.session(user).sql(sql).collect()
            out.append({"rows": [[None if v is None else str(v) for v in r] for r in rows]})
        except LakegateError as e:
            out.append({"error": type(e).__name__, "message": str(e).split(" (query ")[0]})
    return out


def main(root: str, master: str, out: str) -> None:
    import yaml

    from governance.tools.demo import build_demo, write_config

    path = write_config(Path(root))
    cfg = yaml.safe_load(path.read_text())
    cfg["spark"] = {
        "master": master,
        "conf": {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.cores.max": "2",
        },
    }
    path.write_text(yaml.safe_dump(cfg))
    # the demo keeps this spark section: the same data as the local side, on the cluster
    lg = build_demo(Path(root), spark_log=Path(root) / "lakegate-spark.log")
    executors = lg.spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    Path(out).write_text(
        json.dumps(
            {
                "executors": executors,
                "master": lg.spark.sparkContext.master,
                "results": run_scenarios(lg),
            }
        )
    )
    lg.close()
    lg.spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
