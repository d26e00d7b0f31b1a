"""Reading what the catalog needs to know about a Delta table from its log, through Spark."""

from __future__ import annotations

import json
from typing import Any

from catalog.model import ColumnInfo, TableInfo


class NotADeltaTable(Exception):
    """The path holds no Delta log."""


def read_delta_table(
    spark: Any,
    catalog: str,
    schema: str,
    name: str,
    location: str,
    *,
    domain: str | None = None,
    comment: str | None = None,
) -> TableInfo:
    """Columns and partitioning from the table's current Delta snapshot."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, location):
        raise NotADeltaTable(f"{location} is not a Delta table (no _delta_log)")
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{location.replace('`', '``')}`").first()
    struct = spark.read.format("delta").load(location).schema
    columns = tuple(
        ColumnInfo(
            name=f.name,
            type_text=f.dataType.simpleString(),
            nullable=f.nullable,
            position=i,
            comment=(f.metadata or {}).get("comment"),
            type_json=json.dumps(f.jsonValue()),
        )
        for i, f in enumerate(struct.fields)
    )
    return TableInfo(
        catalog=catalog.lower(),
        schema=schema.lower(),
        name=name.lower(),
        location=location,
        columns=columns,
        domain=domain,
        comment=comment or (detail["description"] if detail else None),
        partition_columns=tuple(detail["partitionColumns"] or ()) if detail else (),
    )
