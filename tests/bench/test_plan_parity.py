"""benchmarks/plan_parity.py's comparison: what it treats as the same plan and what it
reports as a difference, on plan texts as Spark prints them (no Spark needed)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.plan_parity import compare, normalise  # noqa: E402

FLOOR = """GlobalLimit 100
+- Project [d_year#12L, ss_item_sk#40L]
   +- Join Inner, (d_date_sk#10L = ss_sold_date_sk#38L)
      :- Filter ((d_moy#18L = 11) AND (scalar-subquery#77 [] > 0))
      :  :  +- Aggregate [count(1) AS c#80L]
      :  :     +- Relation [x#81L] parquet
      :  +- SubqueryAlias global_temp.date_dim
      :     +- Relation [d_date_sk#10L,d_year#12L,d_moy#18L] parquet
      +- *(2) FileScan parquet [ss_sold_date_sk#38L,ss_item_sk#40L] Location: \
PreparedDeltaFileIndex(1 paths)[file:/work/bench/delta/store_sales], [plan_id=412]"""

GOVERNED = """GlobalLimit 100
+- Project [d_year#512L, ss_item_sk#540L]
   +- Join Inner, (d_date_sk#510L = ss_sold_date_sk#538L)
      :- Filter ((d_moy#518L = 11) AND (scalar-subquery#977 [] > 0))
      :  :  +- Aggregate [count(1) AS c#980L]
      :  :     +- Relation [x#981L] parquet
      :  +- SubqueryAlias global_temp.__lg_gv_0a1b2c3d4e5f_17
      :     +- Relation [d_date_sk#510L,d_year#512L,d_moy#518L] parquet
      +- *(7) FileScan parquet [ss_sold_date_sk#538L,ss_item_sk#540L] Location: \
PreparedDeltaFileIndex(1 paths)[file:/tmp/other/store_sales], [plan_id=9]"""


def test_ids_view_names_paths_and_stages_are_not_differences() -> None:
    assert normalise(FLOOR) == normalise(GOVERNED)
    assert compare(FLOOR, GOVERNED, 10) is None


def test_a_cross_join_where_the_other_plan_joins_inner_is_a_difference() -> None:
    """A' once joined with an explicit CROSS JOIN, which loses dynamic partition pruning:
    the join type is compared, not normalised away."""
    got = compare(FLOOR.replace("Join Inner", "Join Cross"), GOVERNED, 10)
    assert got is not None
    assert got["operators"] == {}
    assert got["diff"] == [
        "-   +- Join Cross, (d_date_sk# = ss_sold_date_sk#)",
        "+   +- Join Inner, (d_date_sk# = ss_sold_date_sk#)",
    ]


def test_an_extra_scan_and_filter_are_counted_by_kind() -> None:
    extra = GOVERNED.replace(
        "      +- *(7) FileScan",
        "      :  +- Filter isnotnull(d_date_sk#600L)\n"
        "      :     +- Relation [d_date_sk#600L] parquet\n"
        "      +- *(7) FileScan",
    )
    got = compare(FLOOR, extra, 10)
    assert got is not None
    assert got["operators"] == {"Filter": (1, 2), "Relation": (2, 3)}
    assert got["counts"]["A'"]["scans"] == 3
    assert got["counts"]["C"]["scans"] == 4
    assert got["counts"]["C"]["filters"] == 2
