"""Resolving intents whose outcome never reached the audit log (audit/landing.py): where a
table lives comes from the catalog, which the `audit` package may not import.

Every statement kind gets an outcome that agrees with the catalog and the Delta logs
(`CatalogJudge`): a write by its table's log; a CREATE the catalog lacks by its managed
location (committed there but never registered: not landed; its commit in a set-aside
`<location>.orphan-*`: set aside; nothing: not landed); a DROP, a registration or a
catalog-only CREATE (CREATE CATALOG and SCHEMA included) by whether the catalog holds the
name; a statement's extra lines (policyRead, tagPropagate) by its own outcome.

A write or CREATE whose table was dropped after its intent has no Delta log left to ask
(DROP deletes a managed table's files): when the audit log holds a DROP of the name that
took effect after the intent, or a write's table is no longer in the catalog at all, the
outcome is `dropped` (`succeeded=false`): whether the write landed cannot be told, and
nothing it may have written is left in any registered table. Its commit found in the
table's current log still says `landed` (a table created again under the name)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from audit import AuditWriteError
from audit.format import AuditRecord
from audit.landing import (
    COMMITTING_CMDS,
    Landing,
    Locate,
    Recovered,
    commit_ms,
    earliest_commit_ms,
    find_commit,
    landing,
    local_path,
    recover,
)
from audit.query import read_records
from catalog.catalog import Catalog
from catalog.store import open_store
from governance.config import Config

if TYPE_CHECKING:
    from governance.session.governed import Lakegate

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


def config_judge(config: Config) -> CatalogJudge:
    return CatalogJudge(Catalog(open_store(config.catalog), config.warehouse), config.audit)


#: Lines a statement writes beside its own (same query id): their outcome is the statement's.
EXTRA_LINES = frozenset({"policyRead", "tagPropagate"})
#: Statements whose effect is a catalog entry (a DROP removes one).
CATALOG_CMDS = frozenset({"create", "drop", "registerTable"})
#: Statements whose effect a later DROP of their table takes away (and its Delta log).
DROPPABLE_CMDS = (COMMITTING_CMDS | {"registerTable"}) - {"drop"}


def drops_on_record(directory: Path) -> dict[str, list[tuple[datetime, str]]]:
    """Table name -> (time, query id) of each DROP of it that took effect: an outcome or a
    recovered line with `succeeded=true`."""
    found: dict[str, list[tuple[datetime, str]]] = {}
    for record in read_records(directory, phased=True):
        if (
            record is not None
            and record.cmd == "drop"
            and record.phase in ("outcome", "recovered")
            and record.succeeded
            and record.src
        ):
            found.setdefault(record.src, []).append((record.ts, record.query_id or "?"))
    return found


class CatalogJudge:
    """`intent -> Landing` from the table's Delta log and the catalog (see the module).
    Keeps each query's outcome, so the extra lines of a statement follow its own."""

    def __init__(self, catalog: Catalog, audit: Path | None = None) -> None:
        self.catalog = catalog
        self.locate = table_locator(catalog)
        self.decided: dict[str, Landing] = {}
        self.audit = audit  # where later DROPs are on record (None: not asked)
        self._drops: dict[str, list[tuple[datetime, str]]] | None = None

    def __call__(self, record: AuditRecord) -> Landing:
        qid = record.query_id
        if record.cmd in EXTRA_LINES and qid is not None and qid in self.decided:
            return self.decided[qid]
        answer = self._judge(record)
        if qid is not None and record.cmd not in EXTRA_LINES and answer.state != "unknown":
            self.decided.setdefault(qid, answer)
        return answer

    def _judge(self, record: AuditRecord) -> Landing:
        if record.cmd == "removeLeftover" and record.src:  # an admin's removal: is it gone?
            gone = not Path(record.src).exists()
            return Landing(
                "landed" if gone else "not landed",
                record.src,
                detail=f"{record.src} is {'gone' if gone else 'still there'}",
            )
        cmd = "insert" if record.cmd in EXTRA_LINES else record.cmd  # a commit on dst
        name = record.dst or record.src
        parts = name.split(".") if name else []
        if cmd in COMMITTING_CMDS:
            found = landing(record if cmd == record.cmd else _as(record, cmd), self.locate)
        else:
            found = Landing("unknown", name, detail=f"cmd={record.cmd} makes no Delta commit")
        if name is None or record.query_id is None or cmd not in COMMITTING_CMDS | CATALOG_CMDS:
            return found
        if found.state == "landed":
            return self._catalog_behind(parts, found) if cmd == "alter" else found
        if len(parts) == 3:
            aside = self._set_aside(parts, record)
            if aside is not None:
                return aside
            if cmd in DROPPABLE_CMDS:
                dropped = self._dropped(parts, record, cmd)
                if dropped is not None:
                    return dropped
        if found.state == "not landed" or cmd not in CATALOG_CMDS:
            return found
        held = self._holds(parts)
        if held is None:
            return found
        if cmd == "drop":
            return Landing(
                "not landed" if held else "landed",
                name,
                detail=f"{name} is {'still' if held else 'no longer'} in the catalog",
            )
        if held:  # a catalog-only CREATE or a registration: the entry is its effect
            return Landing("landed", name, detail=f"{name} is in the catalog")
        if len(parts) == 3:
            return self._never_registered(parts, record)
        return Landing("not landed", name, detail=f"{name} is not in the catalog")

    def _dropped(self, parts: list[str], record: AuditRecord, cmd: str) -> Landing | None:
        """The table the intent wrote to, dropped since (see the module), or None."""
        name = ".".join(parts)
        if self._drops is None:
            self._drops = {} if self.audit is None else drops_on_record(self.audit)
        later = [(ts, q) for ts, q in self._drops.get(name, ()) if ts >= record.ts]
        if later:
            _, query = min(later)
            return Landing(
                "dropped",
                name,
                detail=f"{name} was dropped after it (query {query}), its Delta log with it: "
                "whether it landed cannot be told, and nothing it wrote is left in a "
                "registered table",
            )
        if cmd not in CATALOG_CMDS and self._holds(parts) is False:
            return Landing(
                "dropped",
                name,
                detail=f"{name} is no longer in the catalog and no Delta log of it is left: "
                "whether it landed cannot be told, and nothing it wrote is left in a "
                "registered table",
            )
        return None

    def _catalog_behind(self, parts: list[str], found: Landing) -> Landing:
        """An ALTER's Delta commit is half its effect: the catalog re-reads the table after
        it, and governance (columns, tags) is the catalog's. Killed in between, the ALTER
        did not land: the catalog entry is older than the commit."""
        info = self.catalog.table(*parts)
        where = local_path(info.location) if info is not None else None
        stamp = commit_ms(where, found.version) if where and found.version is not None else None
        if info is None or stamp is None or info.updated_at * 1000 >= stamp:
            return found
        return Landing(
            "not landed",
            found.table,
            found.version,
            detail=f"committed to {found.table} (version {found.version}) but the catalog "
            "never re-read it: governance sees the table as before the ALTER (repeat it; "
            "any later ALTER of the table re-reads it)",
        )

    def _holds(self, parts: list[str]) -> bool | None:
        try:
            if len(parts) == 3:
                return self.catalog.table(*parts) is not None
            if len(parts) == 2:
                return self.catalog.has_schema(*parts)
            if len(parts) == 1:
                return self.catalog.has_catalog(parts[0])
        except Exception:  # a name no catalog entry can have: nothing to say
            return None
        return None

    def _managed(self, parts: list[str]) -> Path | None:
        try:
            return Path(self.catalog.managed_location(*parts))
        except Exception:  # not a valid managed name
            return None

    def _never_registered(self, parts: list[str], record: AuditRecord) -> Landing:
        """A CREATE the catalog lacks: did its commit reach the managed location?"""
        name = ".".join(parts)
        where = self._managed(parts)
        if where is not None and (where / "_delta_log").is_dir():
            version = find_commit(where, record.query_id or "", earliest_commit_ms(record))
            if version is not None:
                return Landing(
                    "not landed",
                    name,
                    version,
                    detail=f"committed to {where} (version {version}) but never registered; "
                    "the next CREATE of the name sets it aside (lakegate doctor lists it)",
                )
        return Landing("not landed", name, detail=f"{name} was never registered")

    def _set_aside(self, parts: list[str], record: AuditRecord) -> Landing | None:
        """Its commit in a leftover a later CREATE moved aside (`<location>.orphan-*`)."""
        where = self._managed(parts)
        if where is None or not where.parent.is_dir():
            return None
        for leftover in sorted(where.parent.glob(f"{where.name}.orphan-*")):
            if not (leftover / "_delta_log").is_dir():
                continue
            version = find_commit(leftover, record.query_id or "", earliest_commit_ms(record))
            if version is not None:
                return Landing(
                    "set aside",
                    ".".join(parts),
                    version,
                    detail=f"committed to {leftover} (version {version}), never registered",
                )
        return None


def _as(record: AuditRecord, cmd: str) -> AuditRecord:
    return replace(record, cmd=cmd)


def recover_outcomes(lg: Lakegate) -> list[Recovered]:
    """On a server's start: write the outcomes (`phase=recovered`) that dead writers left
    out, where the tables' Delta logs tell whether the write landed. Never stops the start:
    a failure goes to `lakegate.errors` and the intents stay pending."""
    try:
        judge = CatalogJudge(lg.catalog, lg.audit.directory)
        return recover(lg.audit, table_locator(lg.catalog), judge)
    except (OSError, ValueError, AuditWriteError) as e:
        ERROR_LOG.error("recovering lost audit outcomes failed: %s", e)
        return []
