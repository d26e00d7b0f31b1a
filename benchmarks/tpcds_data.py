"""The TPC-DS Delta tables the benchmarks share: Parquet from dsdgen written once as Delta
under DIR/delta, fact tables range-partitioned by their date key, and a marker saying at
which scale and layout they were written, so a later step or run reuses them."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.tpcds import FACT_TABLES, TABLES, generate_parquet

# The date key each fact table is range-partitioned by (its first column: Delta keeps
# min/max statistics on the first 32 columns, so skipping works on it).
DATE_KEYS: dict[str, str] = {
    "catalog_returns": "cr_returned_date_sk",
    "catalog_sales": "cs_sold_date_sk",
    "inventory": "inv_date_sk",
    "store_returns": "sr_returned_date_sk",
    "store_sales": "ss_sold_date_sk",
    "web_returns": "wr_returned_date_sk",
    "web_sales": "ws_sold_date_sk",
}
PARTITIONED = {"inventory": "inv_date_sk"}  # Delta partition column: partition pruning
FACT_FILES = 8  # files per fact table; other steps that reuse the tables pass the same


def log(msg: str) -> None:
    print(msg, flush=True)


def prepare_data(
    spark: Any,
    root: Path,
    sf: float,
    fact_files: int,
    reuse: bool,
    tables: tuple[str, ...] = TABLES,
) -> tuple[dict[str, str], dict[str, float]]:
    """Parquet from dsdgen, then one Delta table per TPC-DS table in `tables`; returns
    paths, timings."""
    timings: dict[str, float] = {}
    stamp = _stamp(sf, fact_files, tables)
    marker = root / "delta" / MARKER
    delta_paths = {t: str((root / "delta" / t).resolve()) for t in tables}
    if reuse and reusable(root, sf, fact_files, tables):
        log(f"reusing Delta tables under {root / 'delta'} (sf={sf})")
        return delta_paths, timings
    t0 = time.perf_counter()
    log(f"generating TPC-DS sf={sf} with duckdb dsdgen ...")
    pq = generate_parquet(sf, str(root / "parquet"))
    timings["dsdgen_s"] = time.perf_counter() - t0
    log(f"  parquet in {timings['dsdgen_s']:.1f} s")
    if (root / "delta").exists():
        shutil.rmtree(root / "delta")
    t0 = time.perf_counter()
    for i, table in enumerate(tables, 1):
        t1 = time.perf_counter()
        df = spark.read.parquet(pq[table])
        if table in PARTITIONED:
            writer = df.write.format("delta").partitionBy(PARTITIONED[table])
        elif table in FACT_TABLES:
            writer = df.repartitionByRange(fact_files, DATE_KEYS[table]).write.format("delta")
        else:
            writer = df.coalesce(1).write.format("delta")
        writer.mode("overwrite").save(delta_paths[table])
        log(f"  [{i:2}/{len(tables)}] delta {table:<24} {time.perf_counter() - t1:5.1f} s")
    timings["delta_write_s"] = time.perf_counter() - t0
    marker.write_text(json.dumps(stamp))
    shutil.rmtree(root / "parquet", ignore_errors=True)
    return delta_paths, timings


MARKER = "_lakegate_bench.json"  # what the Delta tables under DIR/delta were written as


def _stamp(sf: float, fact_files: int, tables: tuple[str, ...]) -> dict[str, Any]:
    return {
        "sf": sf,
        "fact_files": fact_files,
        "partitioned": PARTITIONED,
        "v": 2,
        "tables": sorted(tables),
    }


def reusable(root: Path, sf: float, fact_files: int, tables: tuple[str, ...]) -> bool:
    """Do the Delta tables under `root` serve a run needing `tables` at this scale?"""
    marker = root / "delta" / MARKER
    return marker.is_file() and _holds(
        json.loads(marker.read_text()), _stamp(sf, fact_files, tables)
    )


def _holds(written: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Data written earlier serves this run: same scale and layout, and every table this
    run reads (a run over a query subset reuses the data of a whole run)."""
    same = all(written.get(k) == v for k, v in wanted.items() if k != "tables")
    return same and set(wanted["tables"]) <= set(written.get("tables", ()))
