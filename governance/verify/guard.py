"""Spark runs the text Lakegate checked: no substitution, no drifted parser settings.

Spark's parser rewrites a statement before parsing it (`${env:X}`, `${system:x}`,
`${spark.x}`: `spark.sql.variable.substitute`, on by default), and parser, legacy and ANSI
settings change what a text means. Every governed statement is therefore parsed through
`GovernedSql.java` (compiled in the driver's JVM, as the plan walker is), which in the same
JVM call checks that the session's settings in those families are exactly the governed ones
(`governance.runtime.spark.GOVERNED_CONF`) and parses under a private copy of them: nothing in the
process can turn substitution back on between the check and the parse. A changed setting is
put back and the statement refused with one line naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from governance.errors import Refused
from governance.runtime.java import compiled
from governance.spark_line import LINE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Setting families that change how Spark reads a statement's text or resolves it; in a
#: session Lakegate runs statements in, only GOVERNED_CONF's entries may be set.
GUARDED_FAMILIES = (
    "spark.sql.variable.",
    "spark.sql.parser.",
    "spark.sql.legacy.",
    "spark.sql.ansi.",
)


class SettingChanged(Refused):
    """A governed Spark setting was changed in the session; it is put back."""


def governed_pins() -> dict[str, str]:
    """The guarded families' governed values (the rest of each family stays unset)."""
    from governance.runtime.spark import GOVERNED_CONF

    return {k: v for k, v in GOVERNED_CONF.items() if k.startswith(GUARDED_FAMILIES)}


def jvm_guard(spark: SparkSession) -> Any:
    """The JVM's GovernedSql, compiled and pinned once per JVM."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    assert jvm is not None and gateway is not None

    def source() -> str:
        imports = "".join(f"import {c};\n" for c in LINE.session_classes)
        return imports + Path(__file__).with_name("GovernedSql.java").read_text()

    def pin(guard: Any) -> None:
        flat = [s for kv in governed_pins().items() for s in kv]
        guard.pin(_strings(gateway, jvm, flat), _strings(gateway, jvm, GUARDED_FAMILIES))

    return compiled(jvm, gateway, "GovernedSql", source, ready=pin)


def _strings(gateway: Any, jvm: Any, items: list[str] | tuple[str, ...]) -> Any:
    arr = gateway.new_array(jvm.java.lang.String, len(items))
    for i, s in enumerate(items):
        arr[i] = s
    return arr


def secure(spark: SparkSession) -> list[str]:
    """Put the governed settings in place in `spark`'s session; the keys that were not."""
    out = str(jvm_guard(spark).secure(spark._jsparkSession))
    return out.split(",") if out else []


def checked(answer: Any, where: str = "session") -> Any:
    """The value of a guarded JVM answer [drift key or "", value]; refused on drift."""
    refuse_drift(str(answer[0]), where)
    return answer[1]


#: GovernedSql.VARIABLES: the session held SQL session variables (Spark 4), now dropped
VARIABLES = " session variables"


def refuse_drift(key: str, where: str = "session") -> None:
    """SettingChanged when the JVM found a governed setting changed (`key` not empty), or
    session variables declared in the Spark session outside Lakegate."""
    if key == VARIABLES:
        raise SettingChanged(
            f"session variables were declared in the Spark {where} outside Lakegate; "
            "Lakegate governs none (they are dropped); statement refused"
        )
    if key:
        raise SettingChanged(
            f"Spark setting {key} was changed in the {where}; Lakegate governs it (it is put "
            "back); statement refused"
        )


def query_frame(spark: SparkSession, sql: str) -> DataFrame:
    """A governed query's DataFrame, parsed as checked (analysed, nothing run yet)."""
    from pyspark.sql import DataFrame

    return DataFrame(checked(jvm_guard(spark).query(spark._jsparkSession, sql)), spark)


def analyzed_command(spark: SparkSession, sql: str) -> Any:
    """A governed command's analyzed plan, parsed as checked; nothing runs."""
    return checked(jvm_guard(spark).command(spark._jsparkSession, sql))


#: Settings the commands this thread (or task) runs get on top of their session's, set by
#: `commands_with`; a context variable, so concurrent statements never see each other's.
_COMMAND_SETTINGS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar(
    "lakegate_command_settings", default=()
)


@contextlib.contextmanager
def commands_with(settings: dict[str, str]) -> Iterator[None]:
    """Meanwhile, each command `run_analyzed` runs on this thread runs in a clone of its
    session (same SparkContext, shared state, settings and temp views; a few ms) with
    `settings` set in the clone only: Delta reads a commit's settings from the session
    running the command (`SparkSession.active`), so a setting per statement needs no
    process-wide lock, and the session itself is never changed."""
    token = _COMMAND_SETTINGS.set(tuple(settings.items()))
    try:
        yield
    finally:
        _COMMAND_SETTINGS.reset(token)


def run_analyzed(spark: SparkSession, plan: Any) -> DataFrame:
    """Run an analyzed (verified) plan as it is: a command runs now (in a clone of the
    session with the settings of `commands_with`, when set)."""
    from pyspark.sql import DataFrame

    session = spark._jsparkSession
    settings = _COMMAND_SETTINGS.get()
    if settings:
        session = session.cloneSession()  # Spark's own copy (private[sql], public in the JVM)
        conf = session.conf()
        for key, value in settings:
            conf.set(key, value)
    return DataFrame(jvm_guard(spark).run(session, plan), spark)
