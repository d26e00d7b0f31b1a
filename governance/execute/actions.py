"""The Spark edge of DDL: runs the declarative actions a plan carries (create a catalog or
schema, register a table Spark just created, alter one, drop a table and its managed
files), and
reads a table's Delta history for DESCRIBE HISTORY.

Planning decides and describes; only this module touches the catalog and the warehouse for
a statement, and only after the session has put the statement's intent on record.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from catalog.catalog import Catalog, CatalogError
from governance.errors import LakegateError
from governance.planning.planned import (
    Action,
    AlterTable,
    CreateCatalog,
    CreateSchema,
    DropTable,
    PropagateTags,
    ReadHistory,
    RegisterTable,
    SetAside,
)
from governance.policy.tag_state import with_governed_state
from governance.verify.guard import analyzed_command, run_analyzed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def execute_actions(actions: Sequence[Action], catalog: Catalog, spark: SparkSession) -> None:
    """Run `actions` in order; the first failure stops the rest."""
    for action in actions:
        match action:
            case CreateCatalog(name, if_not_exists):
                catalog.create_catalog(name, if_not_exists=if_not_exists)
            case CreateSchema(c, s, if_not_exists):
                try:
                    catalog.create_schema(c, s, if_not_exists=if_not_exists)
                except CatalogError as e:
                    raise LakegateError(str(e)) from None
            case RegisterTable(c, s, t, location, domain, comment, tags):
                from catalog.delta import read_delta_table

                info = read_delta_table(spark, c, s, t, location, domain=domain, comment=comment)
                if tags:  # propagated by CTAS: governed from the first read on
                    props = with_governed_state(info.properties, tags, merge=True)
                    info = replace(info, properties=props)
                try:
                    catalog.register_table(info)
                except CatalogError as e:  # e.g. a table registered over it since planning
                    raise LakegateError(str(e)) from None
            case PropagateTags(c, s, t, tags):
                old = catalog.table(c, s, t)
                if old is None:
                    raise LakegateError(f"table {c}.{s}.{t} is gone")
                props = with_governed_state(old.properties, tags, merge=True)
                catalog.register_table(replace(old, properties=props), replace=True)
            case DropTable(c, s, t, location):
                catalog.drop_table(c, s, t)
                if _owns_files(catalog, location, c, s, t):
                    remove_managed_files(catalog, location)
            case AlterTable():
                _alter_table(action, catalog, spark)
            case SetAside(location):
                _set_aside(catalog, location)
            case _:
                raise LakegateError(f"internal: unknown action {type(action).__name__}")


def _alter_table(action: AlterTable, catalog: Catalog, spark: SparkSession) -> None:
    """ALTER the Delta table, then re-register it as it now is: the next statement (of any
    server: the catalog generation moves) sees the new columns and comments."""
    from catalog.delta import read_delta_table

    if action.statement is not None:
        run_analyzed(spark, analyzed_command(spark, action.statement))  # parsed as generated
    old = catalog.table(action.catalog, action.schema, action.name)
    if old is None:
        raise LakegateError(f"table {action.catalog}.{action.schema}.{action.name} is gone")
    comment = action.comment if action.set_comment else old.comment
    info = read_delta_table(
        spark, old.catalog, old.schema, old.name, old.location, domain=old.domain
    )
    properties = old.properties
    if action.tags is not None:  # a steward moved tags: the table's new governed state
        properties = with_governed_state(properties, action.tags, merge=False)
    catalog.register_table(replace(info, comment=comment, properties=properties), replace=True)


def _set_aside(catalog: Catalog, location: str) -> None:
    """Move an orphaned managed location out of the new table's way (see SetAside)."""
    loc = catalog.check_managed(location)
    if not loc.exists():
        return
    if any(Path(t.location).resolve() == loc for t in catalog.tables()):
        raise LakegateError(f"{location} belongs to a registered table")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    loc.rename(loc.with_name(f"{loc.name}.orphan-{stamp}-{uuid.uuid4().hex[:8]}"))


def remove_managed_files(catalog: Catalog, location: str) -> None:
    """DROP TABLE deletes data only for tables inside the warehouse (managed tables)."""
    loc = Path(location).resolve()
    if catalog.warehouse in loc.parents and loc.is_dir():
        shutil.rmtree(loc)


def _owns_files(catalog: Catalog, location: str, c: str, s: str, t: str) -> bool:
    """DROP deletes files only at the table's own managed location, resolved strictly
    inside the warehouse: never another table's directory, never outside through a link."""
    try:
        own = catalog.check_managed(catalog.managed_location(c, s, t))
        return catalog.check_managed(location) == own
    except CatalogError:
        return False


#: DESCRIBE HISTORY's columns, in Delta's order; who may not learn them gets NULL. Left
#: out: userId, userName, job, notebook, clusterId (who and where wrote, not the table's).
_HISTORY_COLUMNS = (
    ("version", None),
    ("timestamp", None),
    ("operation", None),
    ("operationParameters", "parameters"),
    ("readVersion", None),
    ("isolationLevel", None),
    ("isBlindAppend", None),
    ("operationMetrics", "metrics"),
    ("userMetadata", "parameters"),
    ("engineInfo", None),
)


def read_history(history: ReadHistory, spark: SparkSession) -> DataFrame:
    """The Delta commits of `history.location`, newest first, columns withheld as planned."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    df = DeltaTable.forPath(spark, history.location).history()
    types = dict(df.dtypes)
    cols = []
    for name, needs in _HISTORY_COLUMNS:
        shown = needs is None or getattr(history, needs)
        col = F.col(name) if shown else F.lit(None).cast(types[name])
        cols.append(col.alias(name))
    return df.select(*cols)
