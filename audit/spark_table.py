"""The audit log as a Spark DataFrame (to be exposed as ``system.access.audit``).

Parsed entirely with Spark built-ins (``spark.read.text``, regular expressions, higher-order
functions), so it scales to large logs and needs no Python workers. Values are unescaped in the
JVM with Commons Text ``StringEscapeUtils.unescapeJava`` (shipped with Spark) through the
built-in ``reflect`` function, and only for values that contain a backslash.

Only complete lines (ending in a 64-hex ``hash``) become rows; a line cut short by a killed
writer is left out (``audit verify`` reports it). The chain is not checked here.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from audit.format import KEYS_READ
from audit.handler import log_files

_UNESCAPER = "org.apache.commons.text.StringEscapeUtils"

_MASK = StructType([StructField("column", StringType()), StructField("mask", StringType())])

#: Column names and types of ``system.access.audit`` (nullability aside).
AUDIT_SCHEMA = StructType(
    [
        StructField("ts", TimestampType()),
        StructField("allowed", BooleanType()),
        StructField("user", StringType()),
        StructField("ugi", StringType()),
        StructField("ip", StringType()),
        StructField("cmd", StringType()),
        StructField("src", StringType()),
        StructField("dst", StringType()),
        StructField("proto", StringType()),
        StructField("callerContext", StringType()),
        StructField("succeeded", BooleanType()),
        StructField("eventId", StringType()),
        StructField("queryId", StringType()),
        StructField("stmtHash", StringType()),
        StructField("columns", ArrayType(StringType())),
        StructField("masked", ArrayType(_MASK)),
        StructField("rowFilters", ArrayType(StringType())),
        StructField("policies", ArrayType(StringType())),
        StructField("reason", StringType()),
        StructField("durationMs", LongType()),
        StructField("policyVersion", StringType()),
        StructField("phase", StringType()),
        StructField("readVersion", LongType()),
        StructField("writer", StringType()),
        StructField("seq", LongType()),
        StructField("prevHash", StringType()),
        StructField("hash", StringType()),
        StructField("file", StringType()),
    ]
)


# Escapes unescapeJava accepts without throwing (it throws on a bad \\u); anything else, which
# only an edited line can hold, is returned still escaped rather than failing the whole query.
_VALID_ESCAPES = r"^(?:[^\\]|\\[^u]|\\u+\+?[0-9A-Fa-f]{4})*\\?$"


def _unescape(value: Column) -> Column:
    """Java-unescape in the JVM; plain values (no backslash) skip the reflective call."""
    return (
        F.when(F.instr(value, "\\") == 0, value)
        .when(
            value.rlike(_VALID_ESCAPES),
            F.call_function("reflect", F.lit(_UNESCAPER), F.lit("unescapeJava"), value),
        )
        .otherwise(value)
    )


def _long(raw: Column) -> Column:
    """Digits to ``long``, anything else NULL (also under ANSI mode, where casts throw)."""
    return F.when(raw.rlike("^-?[0-9]{1,18}$"), raw.cast("long"))


def _nullable(raw: Column) -> Column:
    """The token ``null`` (or a missing field) is SQL NULL."""
    return F.when((raw == "null") | (raw == ""), F.lit(None).cast("string")).otherwise(raw)


def _text(raw: Column) -> Column:
    return _unescape(_nullable(raw))


def _list(raw: Column) -> Column:
    """Comma-separated, each item escaped on its own (commas inside items are ``\\u002C``)."""
    return F.when(_nullable(raw).isNull(), F.lit(None)).otherwise(
        F.transform(F.split(raw, ","), _unescape)
    )


def _masks(raw: Column) -> Column:
    """``column:mask`` pairs; ``:`` inside either side is escaped, so the first one splits."""

    def pair(item: Column) -> Column:
        column = F.substring_index(item, ":", 1)
        mask = F.regexp_extract(item, "^[^:]*:(.*)$", 1)
        return F.struct(_unescape(column).alias("column"), _text(mask).alias("mask"))

    return F.when(_nullable(raw).isNull(), F.lit(None)).otherwise(
        F.transform(F.split(raw, ","), pair)
    )


_RAW_KEYS = tuple(k for k in KEYS_READ if k != "perm")


def _field(body: Column, key: str) -> Column:
    return F.regexp_extract(body, f"(?:^|\\t){key}=([^\\t]*)", 1)


def _empty(spark: SparkSession) -> DataFrame:
    """An empty frame with the audit schema, built in the JVM (no Python workers)."""
    return spark.range(0).select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in AUDIT_SCHEMA.fields]
    )


def audit_dataframe(spark: SparkSession, directory: str | Path) -> DataFrame:
    """All retained audit files of ``directory`` as typed rows (schema :data:`AUDIT_SCHEMA`).

    The file list is taken when this is called; a rotation while a job runs can make Spark
    miss or re-read one file's lines, so treat it as a snapshot and re-run if a file vanished.
    """
    paths = [str(p.resolve()) for p in log_files(directory)]
    if not paths:
        return _empty(spark)
    body = F.expr("substr(value, instr(value, ': ') + 2)")
    # Stage 1 extracts each raw field once; stage 2 types and unescapes them (Catalyst keeps
    # the stages apart because the regex extraction is not cheap to duplicate).
    raw = (
        spark.read.text(paths)
        .where(F.col("value").rlike("\\thash=[0-9a-f]{64}$"))
        .select(
            *[_field(body, key).alias(key) for key in _RAW_KEYS],
            F.col("_metadata.file_name").alias("file"),
        )
    )
    c = F.col
    return raw.select(
        F.try_to_timestamp(c("ts"), F.lit("yyyy-MM-dd'T'HH:mm:ss.SSSX")).alias("ts"),
        (c("allowed") == "true").alias("allowed"),
        _text(F.regexp_extract(c("ugi"), "^([^(]*) \\(auth:", 1)).alias("user"),
        _text(c("ugi")).alias("ugi"),
        *[_text(c(key)).alias(key) for key in ("ip", "cmd", "src", "dst", "proto")],
        _text(c("callerContext")).alias("callerContext"),
        (c("succeeded") == "true").alias("succeeded"),
        *[_text(c(key)).alias(key) for key in ("eventId", "queryId", "stmtHash")],
        _list(c("columns")).alias("columns"),
        _masks(c("masked")).alias("masked"),
        _list(c("rowFilters")).alias("rowFilters"),
        _list(c("policies")).alias("policies"),
        _text(c("reason")).alias("reason"),
        _long(c("durationMs")).alias("durationMs"),
        _text(c("policyVersion")).alias("policyVersion"),
        _text(c("phase")).alias("phase"),
        _long(c("readVersion")).alias("readVersion"),
        _text(c("writer")).alias("writer"),
        _long(c("seq")).alias("seq"),
        _nullable(c("prevHash")).alias("prevHash"),
        c("hash"),
        c("file"),
    )
