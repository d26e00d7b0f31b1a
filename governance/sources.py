"""Pinned sources: the Delta table under a query's governed view, loaded once (issue 14).

Spark resolves `delta.`<location>`` afresh for every reference in every analysis (a Delta
log lookup, a snapshot, its schema), which made Spark's analysis of the governed text cost
10-35 ms more than the raw text at TPC-DS sf 1. A query's views therefore read a global
temp view over `spark.read.format("delta").load(location)`, a DataFrame made once per
table registration. Nothing is frozen by that but the schema: Delta lists the newest
snapshot every time a plan over the DataFrame runs (its file index updates per scan), so
reads stay current and file skipping keeps working; a schema change Delta cannot read
through fails the statement with DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS and drops the pin, so
the next statement loads the table again. Time travel and TABLESAMPLE keep
`delta.`<location>`` (a version is its own snapshot); writes, CTAS and view definitions
keep it too (a stored definition must not depend on a view of this process).

The views live in Spark's global temp database, which every session of the driver shares,
so the Connect backend's sessions see them. Their names carry a per-process random token;
no analyst reaches them by name anyway: a statement's names resolve only through the
catalog, and the plan verifier accepts a read only under a projection that is, by Spark's
`sameResult`, the governed view the rewriter generated. Only the embedded (trusted)
process can read them directly, as it can read any table.

The planner only names a pin (no JVM); `ensure` makes it at the Spark edge, before the
statement is analysed.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sqlglot import exp

from catalog.model import TableInfo
from governance.errors import Refused

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Delta's error class when a pinned DataFrame's schema no longer matches its table.
SCHEMA_CHANGED = "DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS"
GLOBAL_TEMP = "global_temp"  # Spark's default spark.sql.globalTempDatabase


class PinnedSources:
    """Pin names by table registration, and the pins made in Spark so far. Thread-safe:
    REST and the Connect gateway plan and run statements on pool threads."""

    def __init__(self, database: str = GLOBAL_TEMP) -> None:
        self.database = database
        self._token = secrets.token_hex(6)
        # (table id, location, registration) -> pin name (SQL text); one entry per
        # registration and Delta table seen, which grows only with DDL and replaced tables
        # (old pins stay valid for plans still holding them)
        self._names: dict[tuple, str] = {}
        self._views: dict[str, tuple[str, str]] = {}  # pin name -> (bare view, location)
        self._made: set[str] = set()  # pins whose view exists in Spark
        self._lock = threading.Lock()

    def name(self, table: TableInfo, table_id: str | None) -> str:
        """The pin of a table as SQL text; a new registration (location, columns, creation
        or update time) is a new pin, so a plan never reads one made for another schema, and
        so is another Delta table at the same place (`table_id`, its `metaData.id`: dropped
        and created again, or replaced behind the catalog's back), so a plan never reads a
        DataFrame made over the table that was there before. Not the version: a pin lists
        the newest snapshot at every scan (a pin per commit would load the table again)."""
        key = (
            table_id,
            table.location,
            tuple((c.name, c.type_text) for c in table.columns),
            table.created_at,
            table.updated_at,
        )
        with self._lock:
            pin = self._names.get(key)
            if pin is None:
                view = f"__lg_src_{self._token}_{len(self._names)}"
                pin = exp.Table(
                    this=exp.to_identifier(view), db=exp.to_identifier(self.database)
                ).sql("spark")
                self._names[key] = pin
                self._views[pin] = (view, table.location)
            return pin

    def ensure(self, spark: SparkSession, pins: Mapping[str, str]) -> None:
        """Make every pin of a statement (pin name -> Delta location) that is not made yet;
        the location loaded is the one the pin was named for, and the plan must agree."""
        missing = [p for p in pins if p not in self._made]
        if not missing:
            return
        database = spark.conf.get("spark.sql.globalTempDatabase", GLOBAL_TEMP)
        if database.lower() != self.database:
            raise Refused(
                f"pinned sources need Spark's global temp database {self.database!r}, not "
                f"{database!r}; set pinned_sources: false in the config"
            )
        with self._lock:
            for pin in missing:
                if pin in self._made:
                    continue
                made = self._views.get(pin)
                if made is None or made[1] != pins[pin]:
                    raise Refused("a plan names a pinned source this process did not make")
                view, location = made
                spark.read.format("delta").load(location).createOrReplaceGlobalTempView(view)
                self._made.add(pin)

    def failed(self, error_class: str, pins: Mapping[str, str] | None = None) -> None:
        """A statement over `pins` (None: unknown) failed with `error_class`: a schema
        change behind the catalog's back unpins them (see `forget`)."""
        if error_class == SCHEMA_CHANGED:
            self.forget(pins)

    def forget(self, pins: Mapping[str, str] | None = None) -> None:
        """Drop a statement's pins (None: every pin, when the failed statement's are not
        known) after their table's schema changed out of band: the next statement that names
        them loads the table again."""
        with self._lock:
            if pins is None:
                self._made.clear()
            else:
                self._made.difference_update(pins)


def ensure_pins(
    sources: PinnedSources | None, spark: SparkSession, pins: Mapping[str, str]
) -> None:
    """Make a plan's pins before Spark analyses it (every entry point that runs a plan)."""
    if not pins:
        return
    if sources is None:
        raise Refused("a plan reads pinned sources but none are configured")
    sources.ensure(spark, pins)
