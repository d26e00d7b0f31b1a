"""Cluster mode: the governed session on a real Spark standalone cluster gives what local
mode gives (filters, masks, joins, refusals, time travel, writes under row filters).

The cluster is what the pyspark wheel ships: one Master and two Workers started with
`bin/spark-class` on loopback, stopped by their process groups even when a test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_scenarios import SCENARIOS, run_scenarios

from governance.runtime.local_cluster import ClusterDidNotStart, standalone_cluster
from governance.tools.demo import build_demo

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        with standalone_cluster(tmp_path_factory.mktemp("cluster")) as url:
            yield url
    except ClusterDidNotStart as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def on_cluster(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("cluster-lakehouse")
    out = root.parent / f"{root.name}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(HERE.parents[1]), str(HERE), os.environ.get("PYTHONPATH", "")]
        ),
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "cluster_scenarios.py"), str(root), cluster, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0 and out.exists(), done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def on_local(spark, tmp_path_factory: pytest.TempPathFactory) -> list:
    lg = build_demo(tmp_path_factory.mktemp("local-lakehouse"), spark=spark)
    try:
        return run_scenarios(lg)
    finally:
        lg.close()


def test_cluster_runs_on_the_standalone_master_with_two_executors(on_cluster, cluster):
    assert on_cluster["master"] == cluster
    assert on_cluster["executors"] == 2


@pytest.mark.parametrize("i", range(len(SCENARIOS)))
def test_governed_result_on_the_cluster_equals_local_mode(on_cluster, on_local, i):
    assert on_cluster["results"][i] == on_local[i]


def test_scenarios_cover_denials_refusals_and_writes(on_local):
    assert on_local[4]["error"] == "AccessDenied"  # a denied column
    assert on_local[5]["error"] == "Refused"  # a path read
    assert on_local[7] == {"rows": []}  # carol's EMEA insert went in
    assert on_local[8]["error"] == "AccessDenied"  # her AMER insert is outside her filter
    ids = [int(r[0]) for r in on_local[11]["rows"]]
    assert 20 in ids and 21 not in ids and 4 not in ids
