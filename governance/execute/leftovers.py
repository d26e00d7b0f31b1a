"""Crash leftovers in the warehouse: directories no registered table owns.

A CREATE TABLE killed between Delta's commit and its registration leaves a Delta table at a
managed location the catalog does not know ("unregistered"); the next CREATE of the name
moves it to `<location>.orphan-<time>-<id>` ("set aside", governance/execute/actions.py). Nothing
deletes either by itself: `lakegate doctor` lists them and `lakegate catalog leftovers
--remove` removes them after confirmation, each removal an audited admin act.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from catalog.catalog import Catalog

#: The name `_set_aside` gives a moved leftover: `<table>.orphan-<UTC time>-<8 hex>`.
SET_ASIDE = re.compile(r"^[a-z0-9_]+\.orphan-\d{8}T\d{6}Z-[0-9a-f]{8}$")


@dataclass(frozen=True)
class Leftover:
    path: Path
    kind: str  # "set aside" | "unregistered"


def find_leftovers(catalog: Catalog) -> list[Leftover]:
    """Every `warehouse/catalog/schema/<dir>` that is a set-aside leftover, or a Delta table
    at a managed location no registered table owns."""
    warehouse = catalog.warehouse
    if not warehouse.is_dir():
        return []
    owned = {Path(t.location.removeprefix("file:")).resolve() for t in catalog.tables()}
    found: list[Leftover] = []
    for path in sorted(warehouse.glob("*/*/*")):
        if path.is_symlink() or not path.is_dir() or path.resolve() in owned:
            continue
        if SET_ASIDE.match(path.name):
            found.append(Leftover(path, "set aside"))
        elif (path / "_delta_log").is_dir():
            found.append(Leftover(path, "unregistered"))
    return found
