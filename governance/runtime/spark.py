"""Spark at the edge: building the embedded SparkSession with Delta Lake.

The Delta jars (and on Spark 3.5 the Spark Connect server classes `lakegate connect` serves
from inside this JVM; pyspark 4 ships them) come from Maven Central through Spark's own
`spark.jars.packages` resolver on first start (cached afterwards), so a fresh machine needs
nothing else. Which jars is the Spark line's (governance/spark_line.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from governance.files import owner_only, owner_only_umask
from governance.runtime.spark_launch import Launch
from governance.spark_line import LINE

# Settings the layer relies on; user-supplied conf cannot override these.
GOVERNED_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Non-ANSI casts return NULL instead of raising errors that echo (possibly hidden) values;
    # likewise the datetime parser's "fail to parse '<value>'" upgrade exception.
    "spark.sql.ansi.enabled": "false",
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",
    # Spark rewrites `${env:X}`, `${system:x}` and `${<setting>}` in a statement's text before
    # parsing it: text Lakegate checked would not be the text that runs
    # (governance/verify/guard.py).
    "spark.sql.variable.substitute": "false",
    # Both change what a checked text means: backslashes in literals, and backquoted names as
    # column regexes.
    "spark.sql.parser.escapedStringLiterals": "false",
    "spark.sql.parser.quotedRegexColumnNames": "false",
    # "x" stays a string literal, as sqlglot's Spark dialect reads it.
    "spark.sql.ansi.doubleQuotedIdentifiers": "false",
}
#: Static settings a handed-in SparkSession must have been built with.
STATIC_CONF = ("spark.sql.extensions", "spark.sql.catalog.spark_catalog")
# A local session talks only to itself, on loopback.
LOCAL_CONF = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
#: Generated classes Spark keeps compiled (spark.sql.codegen.cache.maxEntries; Spark's own
#: default is 100), sized for per-persona code (see DEFAULT_CONF).
CODEGEN_CACHE_ENTRIES = 2000
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    # Warehouse files and folders are readable by the service's own user only (600/700), as
    # the audit log is: raw values must not be readable around the layer by other local
    # users (delta-rs, DuckDB's delta_scan). A platform that wants a service group may set it.
    "spark.hadoop.fs.permissions.umask-mode": "077",
    # Spark keeps 100 compiled classes of generated code by default. A row filter's or a
    # mask's values are literals in that code, so every persona's plan is code of its own:
    # at 8 analysts the load benchmark loaded about 15 new classes a second, each compiled
    # by Janino and again by the JIT. With 2,000 it loaded 0.3 a second, and every side ran
    # 20-41 % faster (benchmarks/REPORT.md, issue 39). A deployment may set its own.
    "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
    # No spark.scheduler.mode: Spark's own FIFO, as plain Spark Connect. The gateway names
    # a pool per user (api/connect/ConnectBackend.java `pool`), used once a deployment sets
    # FAIR; not the default, since Spark's FAIR breaks ties between pools by name: with
    # fewer task slots than users with work, the first names by hash keep every slot
    # (measured, docs/connect.md "Scheduling between users").
}


def _delta_version() -> str:
    from importlib.metadata import version

    return version("delta-spark")


def cached_delta_jars() -> list[str] | None:
    """The jars Spark's resolver left in its cache for this line and delta-spark, if all
    there. Using them directly skips Ivy on later starts: faster, and nothing printed."""
    v = _delta_version()
    paths = [LINE.ivy_jars / n.format(delta=v) for n in LINE.resolved_jars]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else None


def line_packages() -> str:
    """The line's Maven packages for spark.jars.packages (Delta, and Connect on 3.5)."""
    packages = [LINE.delta_artifact.format(delta=_delta_version())]
    if LINE.connect_package:
        packages.append(LINE.connect_package)
    return ",".join(packages)


@contextmanager
def _jvm_output_to(log: Path | None) -> Iterator[None]:
    """Point the JVM's inherited stdout/stderr at a log file while it starts (it keeps
    them), so command-line output stays the command's own."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    owner_only(log)  # Spark's console output may quote rows
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def build_spark(
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    app_name: str = "lakegate",
    *,
    log: Path | None = None,
    workdir: Path | None = None,
) -> SparkSession:
    """`log`: where the JVM's own console output goes (None: this process's console);
    `workdir`: the state directory Spark's relative scratch goes to (spark_launch.py)."""
    owner_only_umask()  # the JVM inherits it: everything Spark writes is owner-only
    # Python workers must run this interpreter (and its packages), not whatever `python3`
    # comes first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    local = LOCAL_CONF if master.startswith("local") else {}
    launch = Launch(
        {**DEFAULT_CONF, **local, **(conf or {}), **GOVERNED_CONF},
        workdir,
        local=master.startswith("local"),
    )
    for k, v in launch.public.items():  # secret settings go through a file (spark_launch.py)
        builder = builder.config(k, v)
    jars = cached_delta_jars()
    with launch, _jvm_output_to(log):
        if jars and "spark.jars.packages" not in (conf or {}):
            spark = builder.config("spark.jars", ",".join(jars)).getOrCreate()
        else:
            spark = builder.config("spark.jars.packages", line_packages()).getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def check_spark(spark: SparkSession) -> None:
    """A SparkSession handed in must have Delta (its governed runtime settings are put in
    place by governance.verify.guard.secure, as a built one's are)."""
    for key in STATIC_CONF:
        actual = spark.conf.get(key, None)
        if actual is None or GOVERNED_CONF[key] not in actual:
            raise RuntimeError(
                f"SparkSession lacks {key}={GOVERNED_CONF[key]}; build it with "
                "governance.runtime.spark.build_spark or set it yourself"
            )


def task_slots(spark: SparkSession) -> int:
    """The tasks Spark can run at once now (local[N]: N; a cluster: its executors' cores per
    task's CPUs), not `defaultParallelism`, which Lakegate's own default sets to 4. 0 when
    no executor has registered yet."""
    sc = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    return int(sc.maxNumConcurrentTasks(sc.resourceProfileManager().defaultResourceProfile()))
