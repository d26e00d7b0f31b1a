"""Spark's cache of generated code is sized for per-persona plans (issue 39).

A row filter's or mask's values are literals inlined in Spark's generated code, so each
persona's plan compiles to classes of its own; with Spark's default of 100 kept classes, a
few dozen personas evict each other's code and every statement compiles again (Janino,
then the JIT). The rule: code compiled for more personas than Spark's default keeps is
still cached when each persona's statement runs again.
"""

from __future__ import annotations

from typing import Any

from governance.runtime.spark import CODEGEN_CACHE_ENTRIES, DEFAULT_CONF

SPARK_DEFAULT_ENTRIES = 100  # spark.sql.codegen.cache.maxEntries when unset


def _compilations(spark: Any) -> int:
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def _compile(spark: Any, value: int) -> None:
    """The generated code of a filter on `value`, as a persona's row filter would inline
    it: planned and compiled on the driver, no job run."""
    df = spark.range(4).where(f"id <> {value}").selectExpr(f"id * {value} AS v")
    df._jdf.queryExecution().executedPlan().execute()


def test_default_conf_keeps_more_generated_classes_than_spark() -> None:
    assert CODEGEN_CACHE_ENTRIES > SPARK_DEFAULT_ENTRIES
    assert DEFAULT_CONF["spark.sql.codegen.cache.maxEntries"] == str(CODEGEN_CACHE_ENTRIES)


def test_built_session_has_the_codegen_cache_size(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.sql.codegen.cache.maxEntries") == str(CODEGEN_CACHE_ENTRIES)


def test_code_of_more_personas_than_spark_keeps_is_not_compiled_again(spark: Any) -> None:
    personas = range(10_001, 10_001 + SPARK_DEFAULT_ENTRIES + 50)
    for value in personas:
        _compile(spark, value)
    before = _compilations(spark)
    for value in personas:
        _compile(spark, value)
    # under Spark's default every class here would have been evicted by the next ones (a
    # JVM built with 100 fails this; the count is Spark's own, of Janino compilations)
    assert _compilations(spark) - before == 0
