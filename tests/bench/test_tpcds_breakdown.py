"""The TPC-DS scenario end to end at a tiny scale factor on real Spark and Delta (issue 14):
every query's breakdown has all its parts as numbers (it used to record a TypeError for
every query), and the A' floor answers what the governed session answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks import tpcds_delta  # noqa: E402
from benchmarks.breakdown import PARTS  # noqa: E402

QUERIES = (3, 96)  # six small tables between them: store_sales, date_dim, item, ...


@pytest.fixture(scope="module")
def result(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tpcds")
    out = root / "tpcds.json"
    rc = tpcds_delta.main(
        [
            "--sf",
            "0.01",
            "--queries",
            ",".join(map(str, QUERIES)),
            "--rounds",
            "1",
            "--no-probes",
            "--recheck-rounds",
            "0",
            "--fact-files",
            "2",
            "--dir",
            str(root / "work"),
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    return json.loads(out.read_text())


def test_breakdown_has_every_part_as_a_number(result: dict[str, Any]) -> None:
    queries = {q["id"]: q for q in result["queries"]}
    assert sorted(queries) == list(QUERIES)
    for n in QUERIES:
        bd = queries[n]["breakdown"]
        assert "error" not in bd, bd
        for part in PARTS:
            assert isinstance(bd[part], float) and bd[part] > 0, (n, part, bd)
    medians = result["summary"]["breakdown"]
    assert set(medians) == set(PARTS)
    assert all(isinstance(v["median"], float) for v in medians.values())


def test_floor_answers_like_the_governed_session(result: dict[str, Any]) -> None:
    """A' (filters and masks by hand for the bench user) returns C's rows: C/A' compares
    the same work."""
    for q in result["queries"]:
        assert q["floor_c_same_answer"] is True, q["checksum"]
        assert q["c_over_floor"] > 0
    s = result["summary"]
    assert s["c_over_floor"] > 0 and isinstance(s["overhead_ms_median"], float)
    assert set(s["targets"]) >= {
        "total_c_over_a",
        "total_c_over_floor",
        "overhead_ms_median",
        "verify_ms_median",
    }
