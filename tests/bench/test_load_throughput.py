"""The load run's throughput rule (issue 39 item 2, benchmarks/load.py `summarize`): a side
is credited with the statements that ended by its clients' deadline, over the window; those
still running at the deadline count in the latencies only. No Spark."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks.load import against_floor, merge, side_targets, summarize  # noqa: E402

NOTHING = {"py": {"cpu_s": 0.0, "rss_mb": 0.0, "threads": 0}, "jvm": {"cpu_s": 0.0, "rss_mb": 0.0}}
PEAKS = {"py": 0.0, "jvm": 0.0, "heap": 0.0}


def _client(until: float | None, ends: list[float], ok: bool = True) -> dict[str, Any]:
    ops = [(end, "lookup", 100.0, ok) for end in ends]
    return {"until": until, "ops": ops, "times": {"lookup": [100.0] * len(ends)}, "errors": []}


def _row(clients: list[dict[str, Any]], seconds: float = 10.0) -> dict[str, Any]:
    n = len(clients)
    return summarize("gateway", n, seconds, clients, NOTHING, NOTHING, 1.0, PEAKS, [1.0], 1)


@pytest.mark.parametrize(
    ("name", "clients", "in_window", "throughput"),
    [
        ("every statement inside the window", [_client(110.0, [101, 105, 109])], 3, 0.3),
        (
            "a statement ending after the deadline is not credited",
            [_client(110.0, [104, 108, 125])],
            2,
            0.2,
        ),
        ("one ending exactly at the deadline is", [_client(110.0, [105, 110])], 2, 0.2),
        (
            "each client's own deadline",
            [_client(110.0, [109, 111]), _client(112.0, [109, 111])],
            3,
            0.3,
        ),
        ("a failed statement is not throughput", [_client(110.0, [105], ok=False)], 0, 0.0),
        ("a client with no deadline on record counts every one", [_client(None, [5, 50])], 2, 0.2),
    ],
)
def test_throughput_counts_what_ended_by_the_deadline(
    name: str, clients: list[dict[str, Any]], in_window: int, throughput: float
) -> None:
    row = _row(clients)
    assert row["ops_in_window"] == in_window, name
    assert row["throughput"] == pytest.approx(throughput), name


def test_late_statements_still_count_in_the_latencies() -> None:
    row = _row([_client(110.0, [105, 125])])
    assert row["ops"] == 2 and row["ops_in_window"] == 1


def test_repetitions_pool_their_windows() -> None:
    reps = [_row([_client(110.0, [101, 109, 130])]), _row([_client(210.0, [201, 250])])]
    row = merge(reps)
    assert row["ops_in_window"] == 3 and row["throughput"] == pytest.approx(3 / 20)


def test_repetitions_keep_each_ones_throughput() -> None:
    reps = [_row([_client(110.0, [101, 109, 130])]), _row([_client(210.0, [201, 250])])]
    assert merge(reps)["throughput_reps"] == pytest.approx([0.2, 0.1])
    assert merge(reps[:1])["throughput_reps"] == pytest.approx([0.2])


def _pair(gateway: list[float], plain: list[float]) -> dict[str, Any]:
    """The throughput target of a gateway and a plain row with these repetitions."""
    rows = []
    for side, reps in (("gateway", gateway), ("plain", plain)):
        row = {**_side(side, 8, sum(reps) / len(reps), 100.0), "errors": {}}
        rows.append({**row, "throughput_reps": reps})
    return side_targets(8, "gateway", rows[0], rows[1])[0]


@pytest.mark.parametrize(
    ("name", "gateway", "plain", "ratio_reps"),
    [
        ("each repetition against plain's of the same turn", [4.0, 6.0], [5.0, 5.0], [0.8, 1.2]),
        ("one repetition: its ratio alone", [4.5], [5.0], [0.9]),
        ("a plain repetition that finished nothing gives no ratio", [4.0, 5.0], [0.0, 5.0], [1.0]),
    ],
)
def test_the_throughput_target_shows_each_repetitions_ratio(
    name: str, gateway: list[float], plain: list[float], ratio_reps: list[float]
) -> None:
    t = _pair(gateway, plain)
    assert t["ratio_reps"] == pytest.approx(ratio_reps), name


def test_an_older_row_without_repetitions_is_its_own_one() -> None:
    g, p = _side("gateway", 8, 4.5, 100.0), _side("plain", 8, 5.0, 100.0)
    t = side_targets(8, "gateway", {**g, "errors": {}}, {**p, "errors": {}})[0]
    assert t["ratio_reps"] == pytest.approx([0.9]) and t["met"]


def _side(side: str, n: int, throughput: float, p99: float | None) -> dict[str, Any]:
    return {"side": side, "n": n, "throughput": throughput, "p99": p99}


@pytest.mark.parametrize(
    ("name", "rows", "expected"),
    [
        (
            "each side over the floor at the same N",
            [
                _side("gateway", 8, 4.5, 500.0),
                _side("plain", 8, 6.0, 400.0),
                _side("floor", 8, 5.0, 500.0),
            ],
            [(8, "gateway", 0.9, 1.0), (8, "plain", 1.2, 0.8)],
        ),
        ("no floor row: nothing to judge", [_side("gateway", 8, 4.5, 500.0)], []),
        (
            "a floor that finished nothing gives no ratio",
            [_side("gateway", 1, 1.0, None), _side("floor", 1, 0.0, None)],
            [(1, "gateway", None, None)],
        ),
    ],
)
def test_against_floor(
    name: str, rows: list[dict[str, Any]], expected: list[tuple[Any, ...]]
) -> None:
    got = [(f["n"], f["side"], f["throughput_ratio"], f["p99_ratio"]) for f in against_floor(rows)]
    assert got == [pytest.approx(e) if e[2] is not None else e for e in expected], name
