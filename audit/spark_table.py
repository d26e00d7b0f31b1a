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
from pyspark.sql.types import StructType

from audit.format import RECORD_FIELDS, Field
from audit.handler import log_files

_UNESCAPER = "org.apache.commons.text.StringEscapeUtils"


def _schema() -> StructType:
    """One column per record field (``audit.format.FIELDS``, typed by its kind), then the
    file the line was read from."""
    columns = [(f.key, f.kind.spark_type) for f in RECORD_FIELDS] + [("file", "string")]
    return StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": name, "type": kind, "nullable": True, "metadata": {}}
                for name, kind in columns
            ],
        }
    )


#: Column names and types of ``system.access.audit`` (nullability aside).
AUDIT_SCHEMA = _schema()


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


def _user(ugi: Column) -> Column:
    """The acting user: the ``ugi`` value's text before `` (auth:``."""
    return _text(F.regexp_extract(ugi, "^([^(]*) \\(auth:", 1))


#: How a raw field of each kind (``audit.format.Kind.name``) becomes its typed column.
_COLUMN_OF_KIND = {
    "bool": lambda raw: raw == "true",
    "text": _text,
    "name": _text,
    "ip": _text,
    "user": _user,
    "time": lambda raw: F.try_to_timestamp(raw, F.lit("yyyy-MM-dd'T'HH:mm:ss.SSSX")),
    "long": _long,
    "hash": _nullable,
    "list": _list,
    "pairs": _masks,
}
#: The line keys the table reads (each once, in stage 1).
_RAW_KEYS = tuple(dict.fromkeys(f.reads or f.key for f in RECORD_FIELDS))


def _column(f: Field) -> Column:
    return _COLUMN_OF_KIND[f.kind.name](F.col(f.reads or f.key)).alias(f.key)


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
    return raw.select(*[_column(f) for f in RECORD_FIELDS], F.col("file"))
