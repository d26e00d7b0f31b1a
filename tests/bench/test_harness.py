"""The benchmark harness's rules (issue 11): percentiles and interleaving on table-driven
cases, and a scenario whose measurement raises fails the run loudly instead of recording
an error string. No Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks import harness, run_all  # noqa: E402


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 0.5, 5.0),
        ([3.0, 1.0, 2.0], 0.5, 2.0),  # unsorted input
        ([1.0, 2.0, 3.0, 4.0], 0.5, 3.0),  # nearest rank: index round(1.5) = 2
        ([float(i) for i in range(1, 101)], 0.99, 99.0),
        ([float(i) for i in range(1, 101)], 0.0, 1.0),
        ([float(i) for i in range(1, 101)], 1.0, 100.0),
        ([10.0, 1.0], 0.99, 10.0),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert harness.percentile(values, q) == expected


@pytest.mark.parametrize("q", [-0.1, 1.5, 50])
def test_percentile_outside_unit_interval_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="outside"):
        harness.percentile([1.0, 2.0], q)


def test_percentile_of_no_measurements_fails_the_scenario() -> None:
    with pytest.raises(harness.ScenarioFailed, match="no measurements"):
        harness.percentile([], 0.5)


@pytest.mark.parametrize(
    ("modes", "rounds", "expected"),
    [
        ("ABC", 3, ["ABC", "BCA", "CAB"]),
        ("ABC", 4, ["ABC", "BCA", "CAB", "ABC"]),
        ("AFBC", 4, ["AFBC", "FBCA", "BCAF", "CAFB"]),
        ("AB", 1, ["AB"]),
        ("AB", 0, []),
    ],
)
def test_interleaving_rotates_the_order_each_round(
    modes: str, rounds: int, expected: list[str]
) -> None:
    got = ["".join(r) for r in harness.rotations(list(modes), rounds)]
    assert got == expected
    # over a multiple of len(modes) rounds every mode runs in every position once
    if rounds and rounds % len(modes) == 0:
        for pos in range(len(modes)):
            assert sorted(r[pos] for r in got) == sorted(modes) * (rounds // len(modes))


def test_scenario_that_raises_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    def breakdown() -> int:
        raise TypeError(
            "breakdown_ms.<locals>.<lambda>() takes 1 positional argument but 2 were given"
        )

    assert harness.main("tpcds", breakdown) == harness.FAILED != 0
    err = capsys.readouterr().err
    assert "BENCHMARK FAILED: scenario tpcds: TypeError: breakdown_ms" in err


def test_scenario_that_succeeds_keeps_its_exit_code() -> None:
    assert harness.main("ok", lambda: 0) == 0
    assert harness.main("ok", lambda: None) == 0


def test_scenario_script_whose_measurement_raises_exits_non_zero() -> None:
    """The scaling scenario with no repetitions has nothing to take a percentile of: the
    process exits non-zero and says so, instead of recording an error row and exiting 0."""
    proc = subprocess.run(
        [sys.executable, "benchmarks/scaling.py", "--tables", "1", "--depths", "1", "--reps", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == harness.FAILED, proc.stdout + proc.stderr
    assert (
        "BENCHMARK FAILED: scenario scaling: ScenarioFailed: percentile of no "
        "measurements" in proc.stderr
    )


@pytest.mark.parametrize(
    ("rcs", "expected"),
    [
        ({"rewrite": 0, "tpcds": 0}, 0),
        ({"rewrite": 0, "tpcds": 2}, 1),  # tpcds's measurement raised
        ({"decisions": 1}, 1),
        ({"api": -9}, 1),  # timed out
    ],
)
def test_run_all_fails_when_any_scenario_fails(
    rcs: dict[str, int], expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = {name: {"rc": rc, "ok": rc == 0} for name, rc in rcs.items()}
    assert run_all.verdict(steps) == expected
    err = capsys.readouterr().err
    if expected:
        assert "BENCHMARK RUN FAILED" in err
        for name, rc in rcs.items():
            assert (f"{name} (exit {rc})" in err) == (rc != 0)
    else:
        assert err == ""


@pytest.mark.parametrize(
    ("name", "stdout"),
    [
        ("decisions", "no figures at all\n"),
        ("audit", "audit benchmark: nothing measured\n"),
    ],
)
def test_scenario_exiting_zero_without_figures_fails_the_run(
    name: str, stdout: str, tmp_path: Path
) -> None:
    with pytest.raises(harness.ScenarioFailed, match="printed no figures"):
        run_all.collect(name, stdout, tmp_path, {})
