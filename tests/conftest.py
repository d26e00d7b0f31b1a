"""One SparkSession per test run (starting Spark is the slow part) and one demo lakehouse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from governance.spark import build_spark

    session = build_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The demo lakehouse with the reference policies; tests must not change its tables."""
    from governance.demo import build_demo

    root: Path = tmp_path_factory.mktemp("lakehouse")
    lg = build_demo(root, spark=spark)
    yield lg
    lg.close()
