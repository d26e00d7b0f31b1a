"""Resolving intents whose outcome never reached the audit log (audit/landing.py): where a
table lives comes from the catalog, which the `audit` package may not import."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from audit import AuditWriteError
from audit.landing import Locate, Recovered, recover
from catalog.catalog import Catalog
from catalog.store import open_store
from governance.config import Config

if TYPE_CHECKING:
    from governance.session import Lakegate

ERROR_LOG = logging.getLogger("lakegate.errors")


def table_locator(catalog: Catalog) -> Locate:
    """`catalog.schema.table` -> the table's location, None for any other name."""

    def locate(name: str) -> str | None:
        parts = name.split(".")
        if len(parts) != 3:
            return None
        info = catalog.table(*parts)
        return None if info is None else info.location

    return locate


def config_locator(config: Config) -> Locate:
    return table_locator(Catalog(open_store(config.catalog), config.warehouse))


def recover_outcomes(lg: Lakegate) -> list[Recovered]:
    """On a server's start: write the outcomes (`phase=recovered`) that dead writers left
    out, where the tables' Delta logs tell whether the write landed. Never stops the start:
    a failure goes to `lakegate.errors` and the intents stay pending."""
    try:
        return recover(lg.audit, table_locator(lg.catalog))
    except (OSError, ValueError, AuditWriteError) as e:
        ERROR_LOG.error("recovering lost audit outcomes failed: %s", e)
        return []
