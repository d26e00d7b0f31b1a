"""Delta log facts (version, history, row count) read by delta-rs from tables delta-spark wrote:
right after checkpoints and log cleanup, and under deletion vectors; unknown, never guessed,
where the log does not say."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from api.delta_log import read_log


@pytest.fixture(scope="module")
def checkpointed(spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A table checkpointed every 2 commits, with a DELETE that wrote deletion vectors;
    returns its location and the row count Spark reads."""
    path = tmp_path_factory.mktemp("delta_log") / "t"
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES ("
        "'delta.checkpointInterval' = '2', 'delta.enableDeletionVectors' = 'true')"
    )
    spark.range(0, 1000, 1, 2).write.format("delta").mode("append").save(str(path))  # v1
    spark.range(1000, 1010, 1, 1).write.format("delta").mode("append").save(str(path))  # v2
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")  # v3: deletion vectors
    rows = spark.sql(f"SELECT count(*) FROM delta.`{path}`").collect()[0][0]
    return path, rows


def test_version_history_and_last_commit_come_from_the_log(checkpointed: tuple[Path, int]) -> None:
    path, _ = checkpointed
    log = read_log(str(path))
    assert (log.version, log.history_complete) == (3, True)
    assert [(c.version, c.operation) for c in log.commits] == [
        (3, "DELETE"),
        (2, "WRITE"),
        (1, "WRITE"),
        (0, "CREATE TABLE"),
    ]
    assert log.last_commit_ms == log.commits[0].timestamp_ms
    assert all(c.timestamp_ms for c in log.commits)
    assert read_log("file:" + str(path)).version == 3


def test_row_count_subtracts_rows_removed_by_deletion_vectors(
    checkpointed: tuple[Path, int],
) -> None:
    path, rows = checkpointed
    assert (path / "_delta_log" / f"{3:020d}.json").read_text().count('"deletionVector"')
    assert read_log(str(path)).row_count == rows == 1010 - 145


def test_row_count_is_known_after_a_checkpoint_and_log_cleanup(
    checkpointed: tuple[Path, int], tmp_path: Path
) -> None:
    path, rows = checkpointed
    copy = tmp_path / "t"
    shutil.copytree(path, copy)
    for version in (0, 1):  # what log cleanup removes once the checkpoint at 2 exists
        for suffix in ("json", "crc"):
            (copy / "_delta_log" / f"{version:020d}.{suffix}").unlink(missing_ok=True)
    log = read_log(str(copy))
    assert (log.version, log.row_count, log.history_complete) == (3, rows, False)
    assert [c.version for c in log.commits] == [3, 2]


def test_row_count_is_unknown_when_a_file_has_no_stats(spark, tmp_path: Path) -> None:
    path = tmp_path / "nostats"
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        spark.range(0, 5).write.format("delta").save(str(path))
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    log = read_log(str(path))
    assert (log.version, log.row_count) == (0, None)  # unknown, not 0


def test_a_log_delta_rs_cannot_read_keeps_its_version_and_nothing_else(tmp_path: Path) -> None:
    log_dir = tmp_path / "t" / "_delta_log"
    log_dir.mkdir(parents=True)
    (log_dir / f"{0:020d}.json").write_text("not json\n")
    (log_dir / f"{1:020d}.json").write_text("{}\n")
    log = read_log(str(tmp_path / "t"))
    assert (log.version, log.commits, log.row_count, log.history_complete) == (1, (), None, False)


@pytest.mark.parametrize("location", ["s3://bucket/t", "abfss://c@a.dfs.core.windows.net/t"])
def test_object_store_locations_are_not_read(location: str) -> None:
    assert read_log(location).version is None


def test_a_location_without_a_log_has_no_version(tmp_path: Path) -> None:
    assert read_log(str(tmp_path / "nothing")).version is None
