"""Issue 31's Connect targets as benchmarks/connect.py judges them (time to first row within
50 ms of plain Spark Connect; query p50 ratio at most 1.05, over the sum of the queries'
p50s), and the report showing each verdict with its figures. No Spark."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.connect import targets  # noqa: E402
from benchmarks.report_sections import connect_section  # noqa: E402


def _figures(first: tuple[float, float], queries: dict[str, tuple[float, float]]) -> dict[str, Any]:
    def s(p50: float) -> dict[str, float]:
        return {"p50": p50, "p99": p50, "max": p50, "mean": p50, "n": 1.0}

    return {
        "first_row": {"gateway": s(first[0]), "plain": s(first[1])},
        "query": {q: {"gateway": s(g), "plain": s(p)} for q, (g, p) in queries.items()},
    }


@pytest.mark.parametrize(
    ("first", "met"),
    [((150.0, 100.0), True), ((150.5, 100.0), False), ((90.0, 100.0), True)],
)
def test_first_row_target_is_met_within_50_ms_of_plain(
    first: tuple[float, float], met: bool
) -> None:
    verdict = targets(_figures(first, {"q": (1.0, 1.0)}))[0]
    assert (verdict["met"], verdict["difference_ms"]) == (met, first[0] - first[1])


def test_query_ratio_target_is_judged_on_the_sum_of_the_queries_p50s() -> None:
    # q1 alone is 1.5x, but the two queries together are 1.05x: met
    verdict = targets(_figures((1.0, 1.0), {"q1": (15.0, 10.0), "q2": (90.0, 90.0)}))[1]
    assert (verdict["met"], verdict["gateway_ms"], verdict["plain_ms"]) == (True, 105.0, 100.0)


def test_query_ratio_over_1_05_is_not_met() -> None:
    verdict = targets(_figures((1.0, 1.0), {"q1": (106.0, 100.0)}))[1]
    assert (verdict["met"], round(verdict["ratio"], 2)) == (False, 1.06)


def test_report_shows_each_target_with_its_verdict_and_figures() -> None:
    result = _figures((180.0, 100.0), {"q3": (100.0, 100.0)})
    result.update(line="Spark 4.2.0", data="tpcds", rounds=5, targets=targets(result))
    lines: list[str] = []
    connect_section({"connect_tpcds": result}, lines.append, lambda *a: "")
    verdicts = [ln for ln in lines if ln.startswith("- ")]
    assert verdicts == [
        "- time to first row within 50 ms of plain Spark Connect: **NOT MET** (gateway 180 ms, "
        "plain 100 ms, difference +80 ms)",
        "- query p50 ratio gateway / plain <= 1.05: **MET** (gateway 100 ms, plain 100 ms, "
        "ratio 1.000)",
    ]
