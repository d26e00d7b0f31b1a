"""A benchmark verdict without measurements says "not measured", never "met"."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.report_kit import met  # noqa: E402
from benchmarks.tpcds_summary import p90_without_difference, summarize  # noqa: E402


def test_no_query_and_no_probe_measured_is_not_measured_for_every_target() -> None:
    targets = summarize([], [])["targets"]
    assert {name: t["met"] for name, t in targets.items()} == dict.fromkeys(targets, None)


def test_report_prints_not_measured_for_a_verdict_of_none() -> None:
    assert met(None) == "not measured"
    assert met(True) == "**met**"
    assert met(False) == "**NOT met**"


def _rounds(*per_query: list[float]) -> list[dict[str, object]]:
    return [{"times": {"A": list(a)}} for a in per_query]


def test_p90_resolution_is_exactly_one_when_raw_rounds_do_not_vary() -> None:
    steady = _rounds(*([1.0, 1.0, 1.0] for _ in range(20)))
    assert p90_without_difference(steady) == {
        "median": 1.0,
        "p5": 1.0,
        "p95": 1.0,
        "share_over_target": 0.0,
        "queries": 20,
    }


def test_p90_resolution_exceeds_the_target_when_raw_rounds_spread_widely() -> None:
    noisy = _rounds(*([0.8, 1.0, 1.4] for _ in range(20)))
    nd = p90_without_difference(noisy)
    assert nd is not None
    assert nd["median"] > 1.10 and nd["share_over_target"] > 0.5


def test_p90_resolution_is_not_measured_with_one_round_per_query() -> None:
    assert p90_without_difference(_rounds([1.0], [2.0])) is None
