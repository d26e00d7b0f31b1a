"""Pinned sources through the gateway (governance/execute/sources.py): the backend's sessions read
the driver's pins, and a schema change behind the catalog's back fails one statement with
its error class only, then the next statement loads the table again."""

from __future__ import annotations

import pytest


def test_a_connect_read_after_an_out_of_band_schema_change_fails_closed_then_reloads(
    connect_lakegate, remote, spark
) -> None:
    admin = connect_lakegate.session("root")
    admin.sql("CREATE TABLE main.sales.drift (id INT, note STRING)")
    admin.sql("INSERT INTO main.sales.drift VALUES (1, 'a'), (2, 'b')")
    alice = remote("alice")
    statement = "SELECT id FROM main.sales.drift"
    assert sorted(r.id for r in alice.sql(statement).collect()) == [1, 2]
    location = connect_lakegate.catalog.table("main", "sales", "drift").location
    spark.sql(
        f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.columnMapping.mode' = "
        "'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE delta.`{location}` DROP COLUMN note")
    spark.sql(f"ALTER TABLE delta.`{location}` ADD COLUMNS (note STRING)")
    with pytest.raises(Exception) as failed:
        alice.sql(statement).collect()
    assert "[DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS] (query " in str(failed.value)
    assert "note" not in str(failed.value)  # Spark's text (it lists the columns) stays home
    assert sorted(r.id for r in alice.sql(statement).collect()) == [1, 2]
