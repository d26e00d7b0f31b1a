"""A benchmark verdict without measurements says "not measured", never "met"."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.report_kit import met  # noqa: E402
from benchmarks.tpcds_summary import summarize  # noqa: E402


def test_no_query_and_no_probe_measured_is_not_measured_for_every_target() -> None:
    targets = summarize([], [])["targets"]
    assert {name: t["met"] for name, t in targets.items()} == dict.fromkeys(targets, None)


def test_report_prints_not_measured_for_a_verdict_of_none() -> None:
    assert met(None) == "not measured"
    assert met(True) == "**met**"
    assert met(False) == "**NOT met**"
