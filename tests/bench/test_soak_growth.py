"""The soak's plateau rule (issue 39 item 4, benchmarks/load.py `growth`): the last tenth of
a run's samples against the highest level reached before the last half. No Spark."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.load import growth  # noqa: E402
from benchmarks.load_soak import verdict  # noqa: E402


def _steps(*levels: float, each: int = 10) -> list[float]:
    return [float(v) for v in levels for _ in range(each)]


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        ("flat", _steps(*[100] * 10), 0.0),
        ("a steady climb shows as growth", _steps(*range(100, 200, 10)), 190 / 145 - 1),
        ("a climb in the last half only", _steps(*[100] * 5, 100, 104, 108, 112, 116), 0.16),
        (
            "a dip mid-run that comes back is not growth",
            _steps(612, 611, 639, 619, 526, 522, 559, 611, 632, 584),
            584 / 639 - 1,
        ),
        ("falling after a peak", _steps(100, 120, 110, 100, 100, 90, 90, 90, 90, 90), -0.25),
    ],
)
def test_growth_over_the_last_half(name: str, values: list[float], expected: float) -> None:
    assert growth(values) == pytest.approx(expected), name


def test_too_few_samples_have_no_growth() -> None:
    assert growth([1.0] * 9) is None


def test_growth_past_five_percent_or_a_cache_past_its_bound_is_not_met() -> None:
    series = {
        "heap_mb": _steps(*[100] * 5, 100, 102, 104, 106, 108),  # +8 %
        "threads_jvm": _steps(100, 100, 100, 100, 80, 80, 90, 100, 100, 100),  # came back
        "sessions": _steps(*[10] * 9, 20),  # flat, then past its bound of 16
    }
    rows = verdict(
        {"series": series, "growth": {k: growth(v) for k, v in series.items()}}, {"sessions": 16}
    )
    assert {r["measure"]: r["met"] for r in rows} == {
        "heap_mb": False,
        "threads_jvm": True,
        "sessions": False,
    }
