"""Smoke run of the load harness (issue 39, benchmarks/load.py): four stock Spark Connect
clients through the gateway and on plain Spark Connect for two seconds, as two client
processes (two users) of two analysts each, so both of the harness's ways of running
clients (a process each, threads in one) are used and a side starts two Python processes,
not four, two REST clients (the REST path, kept cheap) and the floor (plain Spark Connect
over each user's governed views, which return what the governed session returns), served
over the suite's shared demo lakehouse (building a demo of the server's own was 115 s of a
290 s run on a loaded machine; a side's clients' start and warm-up, bound by the server's
Spark, are the rest); the figures have the report's structure, the report section renders
them, and every request the clients sent has its audit line, none twice. No timing
assertions: performance targets live in the benchmark."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks import load  # noqa: E402
from benchmarks.load_server import RAW, USERS, analyst  # noqa: E402
from benchmarks.report_load import TITLE, load_section, splice  # noqa: E402

SECONDS = 2.0
ROW_KEYS = {
    "side",
    "n",
    "throughput",
    "p50",
    "p95",
    "p99",
    "errors",
    "cpu_py",
    "cpu_jvm",
    "rss_py_mb",
    "rss_jvm_mb",
    "client_rss_mb",
    "by_op",
}


@pytest.fixture(scope="module")
def server(
    spark: Any, lakehouse: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[load.LocalServer]:
    # the shared demo lakehouse (tests/conftest.py), not a demo of the server's own: its
    # set-up statements were most of this test's time, and the suite builds it anyway
    server = load.LocalServer(tmp_path_factory.mktemp("load"), spark, lakehouse=lakehouse)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def figures(server: load.LocalServer) -> dict[str, Any]:
    result = load.measure(
        server, [4], SECONDS, max_processes=2, log=lambda _: None, rest=2, floor=True
    )
    result.update(line="Spark test", seconds=SECONDS, reps=1, machine={}, server={})
    return result


def test_load_run_has_one_row_per_side_with_every_figure(figures: dict[str, Any]) -> None:
    rows = figures["rows"]
    assert [(r["n"], r["side"]) for r in rows] == [
        (4, "gateway"),
        (4, "plain"),
        (4, "rest"),
        (4, "floor"),
    ]
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert r["ops"] > 0
        assert r["errors"] == {}, r["error_samples"]
    shapes = [(r["client_processes"], r["clients_per_process"]) for r in rows]
    assert shapes[:2] == [(2, 2), (2, 2)] and shapes[2][0] * shapes[2][1] == 2
    assert shapes[3] == (2, 2)
    assert rows[0]["heap_mb"] > 0


def test_every_gateway_request_has_its_audit_lines_none_lost_or_duplicated(
    figures: dict[str, Any],
) -> None:
    audit = figures["rows"][0]["audit"]
    assert audit["requests"] > 0
    assert (audit["lost"], audit["duplicated"]) == (0, 0)


def test_every_rest_request_has_its_line_and_its_statements_lines(
    figures: dict[str, Any],
) -> None:
    audit = figures["rows"][2]["audit"]
    # the warm-up's requests are audited too: at least every timed one
    assert audit["requests"] >= figures["rows"][2]["ops"] > 0
    assert (audit["lost"], audit["duplicated"], audit["wrong_hash"]) == (0, 0, 0)


def test_targets_are_judged_for_every_n(figures: dict[str, Any]) -> None:
    assert [(t["n"], t["target"]) for t in figures["targets"]] == [
        (4, "throughput >= 0.9x plain"),
        (4, "p99 <= 1.2x plain"),
        (4, "no error plain does not also give"),
        (4, "zero lost or duplicated audit lines"),
        (4, "REST: throughput >= 0.9x plain"),
        (4, "REST: p99 <= 1.2x plain"),
        (4, "REST: no error plain does not also give"),
        (4, "REST: zero lost or duplicated audit lines"),
    ]
    assert figures["targets"][3]["met"] and figures["targets"][7]["met"]


def test_every_side_is_set_against_the_floor_at_every_n(figures: dict[str, Any]) -> None:
    ratios = figures["against_floor"]
    assert [(f["n"], f["side"]) for f in ratios] == [(4, "gateway"), (4, "rest"), (4, "plain")]
    floor = figures["rows"][3]
    for f in ratios:
        row = next(r for r in figures["rows"] if r["side"] == f["side"])
        assert f["throughput_ratio"] == pytest.approx(row["throughput"] / floor["throughput"])


@pytest.mark.parametrize("table", ["orders", "customers"])
def test_the_floor_returns_what_the_governed_session_returns(
    server: load.LocalServer, spark: Any, table: str
) -> None:
    """Each persona's floor view, over plain's raw view of the table, gives the rows and
    values the governed session gives that user: the floor evaluates the same policies."""
    floor = load.floor_views(server.info["floor"])
    raw = RAW.format(table)
    spark.read.format("delta").load(server.info["tables"][table]).createOrReplaceTempView(raw)
    try:
        for user in (analyst(i) for i in range(len(USERS))):
            governed = server.served.lg.session(user).sql(f"SELECT * FROM main.sales.{table}")
            got = spark.sql(floor[user][table])
            assert got.columns == governed.columns, user
            assert sorted(map(tuple, got.collect())) == sorted(map(tuple, governed.collect())), user
    finally:
        spark.catalog.dropTempView(raw)


def test_report_section_shows_both_sides_and_the_verdicts(
    figures: dict[str, Any], tmp_path: Path
) -> None:
    lines: list[str] = []
    load_section({"load": figures}, lines.append, lambda name, alt: f"[{name}]")
    table = [ln for ln in lines if ln.startswith("| 4 |")]
    assert [ln.split(" | ")[1] for ln in table] == [
        "gateway",
        "plain",
        "REST (2 clients)",
        "floor",
    ]
    assert sum(ln.startswith("- N=4, ") and "/floor:" not in ln for ln in lines) == 8
    assert [ln.split(":")[0] for ln in lines if "/floor:" in ln] == [
        "- N=4, gateway/floor",
        "- N=4, REST (2 clients)/floor",
        "- N=4, plain/floor",
    ]
    report = tmp_path / "REPORT.md"
    report.write_text("# Report\n\n## Other\n\ntext\n\nEvery figure above, ...\n")
    splice(report, {"load": figures}, tmp_path / "charts")
    text = report.read_text()
    assert text.index("## Other") < text.index(TITLE) < text.index("Every figure above")
    assert (tmp_path / "charts" / "load.png").is_file()


def test_report_tables_fairness_by_the_heavy_tasks_length(figures: dict[str, Any]) -> None:
    """The fairness sweep's rows (load.py --heavy-rows): what each heavy query took alone
    and the lookup's loaded/idle ratio on both sides, the first one also judged."""

    def run(rows: int, alone: float, ratio: float, plain: float) -> dict[str, Any]:
        side = {"idle": {"p50": 100.0}, "loaded": {"p50": 100.0 * ratio, "p99": 400.0}}
        return {
            **side,
            "count": 64,
            "rows": rows,
            "heavy_alone": {"p50": alone},
            "ratio": ratio,
            "met": ratio <= 2,
            "heavy": {"done": 9, "busy": 3, "failed": 0},
            "plain": {**side, "ratio": plain, "heavy": {"done": 30, "busy": 0, "failed": 0}},
        }

    sweep = [run(3_000_000, 2600.0, 16.6, 90.4), run(30_000, 41.0, 1.4, 3.2)]
    lines: list[str] = []
    load_section(
        {"load": {**figures, "fairness": sweep[0], "fairness_by_task_length": sweep}},
        lines.append,
        lambda name, alt: f"[{name}]",
    )
    assert any("16.60x idle, target <= 2x: **NOT met**" in ln for ln in lines)
    assert [
        ln for ln in lines if ln.startswith("| 3,000,000 |") or ln.startswith("| 30,000 |")
    ] == [
        "| 3,000,000 | 2600 ms | 16.60x | 90.40x |",
        "| 30,000 | 41 ms | 1.40x | 3.20x |",
    ]
