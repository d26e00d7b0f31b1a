"""A partial benchmark run keeps the figures of the steps it left out, and says whose."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.run_all import STEPS, carry  # noqa: E402


def _earlier() -> dict[str, Any]:
    return {
        "date": "2026-11-27T03:36:21+00:00",
        "rewrite": {"p50_ms": 2.1},
        "mapping": {"queries": {"old": {}}},
        "tpcds": {"queries": [], "probes": [], "summary": {"stale": True}},
        "steps": {"rewrite": {"ok": True}, "tpcds@3.5": {"ok": True}},
        "other_line": {"line": "3.5", "python": "py35", "tpcds": {"queries": [], "probes": []}},
    }


def _this_run(only: set[str]) -> dict[str, Any]:
    return {
        "steps": {},
        "caveats": [],
        "not_run": [s for s in STEPS if s not in only],
        "mapping": {"queries": {"new": {}}},
    }


def test_steps_left_out_are_carried_with_their_date_named() -> None:
    results = _this_run({"mapping"})
    carry(_earlier(), {"mapping"}, results)
    assert results["rewrite"] == {"p50_ms": 2.1}
    assert results["steps"]["rewrite"] == {"ok": True}
    assert results["steps"]["tpcds@3.5"] == {"ok": True}
    assert results["other_line"]["line"] == "3.5"
    assert "tpcds" in results["other_line"]
    assert results["caveats"] == [
        "Not measured again in this run; their figures are those of earlier runs: "
        "rewrite, tpcds, tpcds@3.5 of 2026-11-27T03:36:21+00:00."
    ]
    assert "rewrite" not in results["not_run"] and "scaling" in results["not_run"]


def test_a_step_run_again_is_never_replaced_by_the_earlier_figures() -> None:
    results = _this_run({"mapping"})
    carry(_earlier(), {"mapping"}, results)
    assert results["mapping"] == {"queries": {"new": {}}}


def test_carried_tpcds_summary_is_computed_again_by_this_code() -> None:
    results = _this_run({"mapping"})
    carry(_earlier(), {"mapping"}, results)
    summary = results["tpcds"]["summary"]
    assert "stale" not in summary
    assert summary["queries_measured"] == 0
    assert summary["targets"]["p90_query_c_over_a"]["met"] is None


def test_a_step_the_earlier_run_carried_keeps_its_own_date() -> None:
    earlier = _earlier() | {"carried_from": {"tpcds": "2026-11-26T22:00:00+00:00"}}
    results = _this_run({"mapping"})
    carry(earlier, {"mapping"}, results)
    assert results["carried_from"]["tpcds"] == "2026-11-26T22:00:00+00:00"
    assert results["carried_from"]["rewrite"] == "2026-11-27T03:36:21+00:00"
    assert results["caveats"] == [
        "Not measured again in this run; their figures are those of earlier runs: "
        "rewrite, tpcds@3.5 of 2026-11-27T03:36:21+00:00; tpcds of 2026-11-26T22:00:00+00:00."
    ]


def test_a_step_run_on_one_line_keeps_the_other_lines_figures() -> None:
    """`--only tpcds` without --other-line measures TPC-DS on the default line alone: the
    other line's TPC-DS figures are carried, not dropped."""
    results = _this_run({"tpcds"})
    results["tpcds"] = {"queries": [], "probes": []}
    carry(_earlier(), {"tpcds"}, results)
    assert results["tpcds"] == {"queries": [], "probes": []}
    assert results["other_line"]["tpcds"]["queries"] == []
    assert results["steps"]["tpcds@3.5"] == {"ok": True}
    assert "tpcds@3.5" in results["carried_from"] and "tpcds" not in results["carried_from"]


def test_a_step_run_on_both_lines_is_carried_on_neither() -> None:
    results = _this_run({"tpcds"})
    results["other_line"] = {"line": "3.5", "python": "py35", "tpcds": {"queries": ["new"]}}
    carry(_earlier(), {"tpcds"}, results)
    assert results["other_line"]["tpcds"] == {"queries": ["new"]}
    assert "tpcds@3.5" not in results.get("carried_from", {})
