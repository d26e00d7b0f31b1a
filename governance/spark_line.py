"""The Spark line Lakegate runs on (4, the default, or 3.5) and everything that differs.

One codebase serves both lines: what differs (jars and where Spark's resolver caches them,
the Connect backend's session adapter, plan node and error-class names, the Connect
client's channel builder and retries) is data in one `SparkLine` per line, chosen once from
the installed pyspark (pyproject's `spark4` or `spark35` extra; docs/spark-lines.md). Code
asks `LINE` instead of checking versions. Reads package metadata only, so it imports
without a JVM; run as a script it prints the installed line (the Makefile's check that a
virtual environment holds the line it is named for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


class UnsupportedSparkLine(RuntimeError):
    """The installed pyspark is neither supported line (refused, never guessed)."""


@dataclass(frozen=True)
class SparkLine:
    """What one Spark line needs that the other does not."""

    name: str  # "3.5" or "4"
    scala: str  # Scala binary version of the line's jars
    # Maven artifact of delta-spark for this line ({delta}: delta-spark's own version)
    delta_artifact: str
    # Spark Connect's server classes: Maven coordinates, or None when pyspark ships them
    connect_package: str | None
    # Spark's resolver cache (spark.jars.ivy's default) holding the line's jars
    ivy_jars: Path
    # the jars a first start resolves, as named in ivy_jars ({delta} as above)
    resolved_jars: tuple[str, ...]
    # the Spark line's adapter appended to api/connect/ConnectBackend.java (the in-driver
    # Connect backend, compiled by Janino; see api/connect/backend.py): how the line finds,
    # makes and drops a Connect session, builds a planner and checks the gateway's token
    connect_sessions_source: str
    # the method naming a Spark error's class (SparkThrowable, PySparkException)
    error_class_method: str
    # the session and Dataset classes with `sessionState` and `Dataset.ofRows`, imported by
    # the Java Lakegate compiles in the driver (governance/verify/GovernedSql.java): Spark 4 moved
    # them to `classic`
    session_classes: tuple[str, ...]
    # write commands whose target (and source) are plan fields, not children
    # (governance/verify/plan.py); Delta's own commands, as Delta on this line names them
    command_plan_fields: tuple[tuple[str, tuple[tuple[str, bool], ...]], ...]
    # the line's Spark Connect client (`lakegate sql --gateway`): the channel builder class
    # in pyspark.sql.connect.client.core that takes an `sc://` URL (Spark 4 made
    # ChannelBuilder abstract), and what turns a client's retries off (the 3.5 client
    # retries UNAVAILABLE for ten minutes; for a one-shot command it is an answer)
    connect_channel_builder: str
    connect_no_retries: Callable[[Any], None]
    # the line's built-in function names (FunctionRegistry.builtin), a file beside this
    # module read by governance/sql/constructs.py; any other function is refused
    builtin_functions: str
    # the language features Spark 4 added that Lakegate governs on this line (see
    # governance/sql/spark4_syntax.py); on a line without one, it is refused by name
    language: frozenset[str] = frozenset()


def _no_retries_35(client: Any) -> None:
    client._retry_policy.update(max_retries=0)  # only a constructor argument on 3.5


def _no_retries_4(client: Any) -> None:
    client.set_retry_policies([])


_DELTA_COMMANDS: tuple[tuple[str, tuple[tuple[str, bool], ...]], ...] = (
    ("UpdateCommand", (("target", True),)),
    ("DeleteCommand", (("target", True),)),
    ("MergeIntoCommand", (("target", True), ("source", False))),
)

SPARK_35 = SparkLine(
    name="3.5",
    scala="2.12",
    delta_artifact="io.delta:delta-spark_2.12:{delta}",
    # 3.5.8 is not on Maven Central; 3.5.7 is the newest 3.5 there and runs in a 3.5.8
    # driver (see README).
    connect_package="org.apache.spark:spark-connect_2.12:3.5.7",
    ivy_jars=Path.home() / ".ivy2" / "jars",
    resolved_jars=(
        "io.delta_delta-spark_2.12-{delta}.jar",
        "io.delta_delta-storage-{delta}.jar",
        "org.antlr_antlr4-runtime-4.9.3.jar",
        "org.apache.spark_spark-connect_2.12-3.5.7.jar",
        "org.spark-project.spark_unused-1.0.0.jar",
    ),
    connect_sessions_source="LineSessions35.java",
    error_class_method="getErrorClass",
    session_classes=("org.apache.spark.sql.Dataset", "org.apache.spark.sql.SparkSession"),
    command_plan_fields=_DELTA_COMMANDS,
    connect_channel_builder="ChannelBuilder",
    connect_no_retries=_no_retries_35,
    builtin_functions="spark_functions.txt",
)

SPARK_4 = SparkLine(
    name="4",
    scala="2.13",
    # Delta 4.x publishes one artifact per Spark minor (delta-spark_4.2_2.13); the line's
    # pyspark pin (pyproject's spark4 extra) and this minor move together.
    delta_artifact="io.delta:delta-spark_4.2_2.13:{delta}",
    connect_package=None,  # pyspark 4 ships spark-connect_2.13 in its jars directory
    ivy_jars=Path.home() / ".ivy2.5.2" / "jars",
    resolved_jars=(
        "io.delta_delta-spark_4.2_2.13-{delta}.jar",
        "io.delta_delta-storage-{delta}.jar",
    ),
    connect_sessions_source="LineSessions4.java",
    # getErrorClass still answers on 4 but is deprecated (a FutureWarning per call)
    error_class_method="getCondition",
    session_classes=(
        "org.apache.spark.sql.classic.Dataset",
        "org.apache.spark.sql.classic.SparkSession",
    ),
    command_plan_fields=_DELTA_COMMANDS,
    connect_channel_builder="DefaultChannelBuilder",
    connect_no_retries=_no_retries_4,
    builtin_functions="spark_functions_4.txt",
    language=frozenset({"variant", "collation"}),
)

_LINES = {"3.5": SPARK_35, "4.2": SPARK_4}


def line_of(pyspark_version: str) -> SparkLine:
    """The line a pyspark version belongs to; any other version is refused."""
    minor = ".".join(pyspark_version.split(".")[:2])
    found = _LINES.get(minor)
    if found is None:
        raise UnsupportedSparkLine(
            f"pyspark {pyspark_version} is not a supported Spark line (3.5 or 4.2); install "
            "lakegate with its spark35 or spark4 extra"
        )
    return found


#: The one line a command that needs Spark says where pyspark is missing (cli/kit.py).
NO_SPARK = (
    "Spark is not installed here: install Lakegate with a Spark line's extra, e.g. "
    "pip install 'lakegate-0.1.0-py3-none-any.whl[spark4]' (or [spark35])"
)


def _installed() -> tuple[SparkLine, bool]:
    """The installed pyspark's line; without pyspark the default line (4), whose SQL the
    Spark-free commands (policy validate/test/explain/diff) check against, and False."""
    try:
        return line_of(version("pyspark")), True
    except PackageNotFoundError:
        return SPARK_4, False


#: The line of the installed pyspark (the default line when none is: PYSPARK says which).
LINE, PYSPARK = _installed()

if __name__ == "__main__":  # the Makefile asks which line a virtual environment holds
    if not PYSPARK:
        raise SystemExit(NO_SPARK)
    print(LINE.name)
