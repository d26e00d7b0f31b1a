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

A query's governed view over a pin is made once too (issue 31): its body (masks, row
filters, the policies' inlined lookups, all for one user) is the same text statement after
statement, yet Spark analysed it again in every statement that read the table, which on
short queries over many references cost more than the query's own analysis (q88 at sf 1:
179 ms against 75 ms for the raw text). `view` names a global temp view per distinct body
(content-addressed: the same text is the same view, whoever's statement asks; a body
projects the columns a statement can name, so statements naming the same columns share
it), made from the body parsed as checked (governance/verify/guard.py), so Spark analyses each
body once per process and a statement reads it by name. The verifier is unchanged: the
view's stored plan is the body's analysis, and the projection over the pinned relation
must still be, by `sameResult`, the governed view the rewriter generated. A governed view
holds its pin's plan, so unpinning a table (a schema change) unmakes its governed views as
well.

The planner only names pins and views (no JVM); `ensure` makes them at the Spark edge,
before the statement is analysed.
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
#: Distinct governed view bodies made per process (one per user, table registration,
#: policy state and set of columns statements name); past it a statement's views are
#: inlined as text again (analysed per statement, as before), so a process serving very
#: many users trades speed, not memory.
MAX_GOVERNED_VIEWS = 20_000


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
        # governed view body -> its name; name -> (bare view, body, the pin it reads)
        self._governed: dict[str, str] = {}
        self._bodies: dict[str, tuple[str, str, str]] = {}
        self._made: set[str] = set()  # pins and governed views that exist in Spark
        #: how many times pins were dropped: a plan analysed before a drop holds the old
        #: DataFrames, so what keeps analysed plans (api/connect/verified.py) keys on it
        self.epoch = 0
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

    def view(self, pin: str, body: str) -> str | None:
        """The governed view whose definition is `body` (a view body reading `pin`), as SQL
        text; None past MAX_GOVERNED_VIEWS (the caller inlines the body)."""
        with self._lock:
            name = self._governed.get(body)
            if name is None:
                if pin not in self._views:
                    raise Refused("internal: a governed view over a pin this process did not name")
                if len(self._governed) >= MAX_GOVERNED_VIEWS:
                    return None
                view = f"__lg_gv_{self._token}_{len(self._governed)}"
                name = exp.Table(
                    this=exp.to_identifier(view), db=exp.to_identifier(self.database)
                ).sql("spark")
                self._governed[body] = name
                self._bodies[name] = (view, body, pin)
            return name

    def location(self, name: str) -> str | None:
        """The Delta location a pin or governed view reads (None: not one of this process)."""
        made = self._views.get(name)
        if made is not None:
            return made[1]
        governed = self._bodies.get(name)
        return self._views[governed[2]][1] if governed is not None else None

    def ensure(self, spark: SparkSession, pins: Mapping[str, str]) -> None:
        """Make every pin and governed view of a statement (name -> Delta location) not made
        yet, each pin before the views over it; the location read is the one the name was
        made for, and the plan must agree."""
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
            for name in missing:
                if self.location(name) != pins[name]:
                    raise Refused("a plan names a pinned source this process did not make")
                self._make(spark, name)

    def _make(self, spark: SparkSession, name: str) -> None:
        """Make one pin or governed view (a governed view's pin first); under the lock."""
        from governance.verify.guard import query_frame

        if name in self._made:
            return
        governed = self._bodies.get(name)
        if governed is None:
            view, location = self._views[name]
            spark.read.format("delta").load(location).createOrReplaceGlobalTempView(view)
        else:
            view, body, pin = governed
            self._make(spark, pin)
            query_frame(spark, body).createOrReplaceGlobalTempView(view)
        self._made.add(name)

    def failed(self, error_class: str, pins: Mapping[str, str] | None = None) -> None:
        """A statement over `pins` (None: unknown) failed with `error_class`: a schema
        change behind the catalog's back unpins them (see `forget`)."""
        if error_class == SCHEMA_CHANGED:
            self.forget(pins)

    def forget(self, pins: Mapping[str, str] | None = None) -> None:
        """Drop a statement's pins (None: every pin, when the failed statement's are not
        known) after their table's schema changed out of band, and the governed views over
        them (they hold the pin's plan): the next statement that names them makes them
        again, loading the table afresh."""
        with self._lock:
            self.epoch += 1
            if pins is None:
                self._made.clear()
                return
            gone = set(pins)
            gone |= {self._bodies[n][2] for n in pins if n in self._bodies}
            gone |= {n for n, (_, _, pin) in self._bodies.items() if pin in gone}
            self._made.difference_update(gone)


def ensure_pins(
    sources: PinnedSources | None, spark: SparkSession, pins: Mapping[str, str]
) -> None:
    """Make a plan's pins before Spark analyses it (every entry point that runs a plan)."""
    if not pins:
        return
    if sources is None:
        raise Refused("a plan reads pinned sources but none are configured")
    sources.ensure(spark, pins)
