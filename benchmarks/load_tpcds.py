"""TPC-DS queries as the heavy part of benchmarks/load.py's mix (issue 39: "TPC-DS queries
at sf 1"): the Delta tables, written once per scale into a cache directory and reused
(benchmarks/tpcds_data.py's layout, DIR/delta with its marker, so `make bench-sf1`'s
bench-sf1/ serves both), their policies for the load's users, and the query texts.

The policies are benchmarks/tpcds_policies.py's row filters and masks, with the load's
users in place of `bench`: the demo's groups already hold them (analysts: alice, bob, carol,
dana; pii-readers: dana; sales-owners: erin), so the TPC-DS file adds only `regional` (bob
and erin: the regional filters do not narrow them) and the grant to erin's group. Each user
thus reads the TPC-DS tables under different filters and masks.

Run alone, it writes the data (the slow part, once) and says how long it took:

    python benchmarks/load_tpcds.py --scale 1 [--dir bench-sf1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CATALOG, SCHEMA = "tpcds", "sf1"  # the gateway's names (benchmarks/tpcds_views.py's)
# short star joins over store_sales with date_dim and item (as benchmarks/connect.py's): a
# second or a few each at sf 1 on one core, an order of magnitude above a lookup
QUERIES = (3, 42, 52, 55, 96)


def default_dir(scale: float) -> Path:
    """The cache: bench-sf1/ (what `make bench-sf1` writes) at sf 1, else one per scale."""
    return ROOT / ("bench-sf1" if scale == 1 else f"bench-load-sf{scale:g}")


def ensure_data(spark: Any, root: Path, scale: float) -> dict[str, str]:
    """The Delta tables under root/delta at `scale`, generated only when no earlier run
    left them there (all 24 tables, so the TPC-DS benchmarks can reuse them too)."""
    from benchmarks.tpcds_data import FACT_FILES, prepare_data

    root.mkdir(parents=True, exist_ok=True)
    paths, _ = prepare_data(spark, root, scale, FACT_FILES, reuse=True)
    return paths


def queries(ids: tuple[int, ...] = QUERIES) -> dict[int, dict[str, str]]:
    """Per query: the gateway's text (tables named tpcds.sf1.*) and the plain one (the bare
    names, which the plain clients bind to temp views of the same Delta paths)."""
    from benchmarks.tpcds import spark_queries

    qualified = dict(spark_queries(qualify=f"{CATALOG}.{SCHEMA}"))
    plain = dict(spark_queries())
    return {n: {"gateway": qualified[n], "plain": plain[n]} for n in ids}


def tables_read(ids: tuple[int, ...] = QUERIES) -> tuple[str, ...]:
    from benchmarks.tpcds_delta import tables_of

    return tables_of([q["plain"] for q in queries(ids).values()])


def policy_yaml(delta_root: Path) -> str:
    """benchmarks/tpcds_policies.py's policy set for the load's users (see the module)."""
    from benchmarks.tpcds import tpcds_tables
    from benchmarks.tpcds_policies import tpcds_policy_yaml

    doc = yaml.safe_load(tpcds_policy_yaml(tpcds_tables(str(delta_root), CATALOG, SCHEMA)))
    doc["groups"] = {"regional": ["bob", "erin"]}  # the demo's groups.yaml has the rest
    doc["grants"].append(
        {
            "id": "tpcds-owners-select",
            "principals": ["group:sales-owners"],
            "privileges": ["select"],
            "on": f"{CATALOG}.{SCHEMA}.*",
        }
    )
    for rule in doc["row_filters"] + doc["column_masks"]:
        rule["principals"] = [
            "group:analysts" if p == "bench" else p for p in rule.get("principals", [])
        ]
    return "# TPC-DS policies for the load's users (benchmarks/load_tpcds.py)\n" + yaml.safe_dump(
        doc, sort_keys=False, default_flow_style=None, width=100
    )


def main() -> int:
    from governance.runtime.spark import build_spark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    root = (args.dir or default_dir(args.scale)).resolve()
    spark = build_spark("local[2]", {"spark.driver.memory": "4g"}, app_name="lakegate-load-tpcds")
    t0 = time.perf_counter()
    ensure_data(spark, root, args.scale)
    print(f"TPC-DS sf {args.scale:g} under {root / 'delta'}: {time.perf_counter() - t0:.0f} s")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
