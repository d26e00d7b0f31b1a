"""The Spark edge of DDL: runs the declarative actions a plan carries (create a catalog or
schema, register a table Spark just created, drop a table and its managed files).

Planning decides and describes; only this module touches the catalog and the warehouse for
a statement, and only after the session has put the statement's intent on record.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from catalog.catalog import Catalog, CatalogError
from governance.errors import LakegateError
from governance.planning.planned import (
    Action,
    CreateCatalog,
    CreateSchema,
    DropTable,
    RegisterTable,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
            case RegisterTable(c, s, t, location, domain, comment):
                from catalog.delta import read_delta_table

                catalog.register_table(
                    read_delta_table(spark, c, s, t, location, domain=domain, comment=comment)
                )
            case DropTable(c, s, t, location):
                catalog.drop_table(c, s, t)
                if _owns_files(catalog, location, c, s, t):
                    remove_managed_files(catalog, location)
            case _:
                raise LakegateError(f"internal: unknown action {type(action).__name__}")


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
