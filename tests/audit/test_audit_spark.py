"""``system.access.audit``: the log parsed by Spark built-ins into typed, unescaped columns."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from audit.escape import escape_java
from audit.query import read_records
from audit.spark_table import AUDIT_SCHEMA, audit_dataframe

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

T0 = datetime(2026, 11, 22, 10, 0, 0, 123000, tzinfo=UTC)
TRICKY = [
    "tab\there",
    "new\nline",
    "a=b=c",
    "comma,inside",
    "colon:inside",
    'quote"and\\backslash',
    "née 日本 😀",
    "null",
    "\x01\x7f",
    "(paren) (auth:x)",
]


@pytest.fixture(scope="module")
def audit_spark(spark: SparkSession) -> SparkSession:
    """The suite's one shared session (a module-local session stopped at the end left later
    modules without Delta's catalog when this file ran first)."""
    return spark


@pytest.fixture(scope="module")
def tricky_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("audit-spark")
    with AuditLog(directory, max_bytes=3000, backup_count=50) as log:
        for i, value in enumerate(TRICKY):
            log.write(
                [
                    AuditEvent(
                        allowed=i % 3 != 0,
                        user=value,
                        cmd="select",
                        src=f"main.pii.{i}",
                        dst=value,
                        via="svc" if i % 2 else None,
                        caller_context=value,
                        succeeded=i % 2 == 0,
                        query_id=f"q{i}",
                        stmt_hash="sha256:" + "ab" * 32,
                        columns=(value, "email"),
                        masked=((value, value), ("email", "hash")),
                        row_filters=(value,),
                        policies=("p1", value),
                        reason=value,
                        duration_ms=i * 10,
                        ts=T0 + timedelta(minutes=i),
                    )
                ]
            )
        log.write([AuditEvent(allowed=False, user="bob", cmd="refused", ts=T0)])
    # A line torn by a killed writer is not a row.
    with open(directory / "audit.log", "ab") as handle:
        handle.write(b"2026-11-22 10:00:00,000 INFO lakegate.audit: allowed=true\tugi=x")
    return directory


@pytest.fixture(scope="module")
def audit_df(audit_spark: SparkSession, tricky_log: Path) -> Iterator[DataFrame]:
    """Parsed once and cached: the tests below query it several times."""
    df = audit_dataframe(audit_spark, tricky_log).cache()
    yield df
    df.unpersist()


def python_rows(directory: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Every record as Spark's row of it should read: each JSON key of the record (every
    field of the table), empty lists and an empty user NULL, the time in epoch millis."""
    rows = {}
    for record in read_records(directory):
        if record is None:
            continue
        row: dict[str, Any] = {"ms": int(record.ts.timestamp() * 1000)}
        for key, value in record.to_json().items():
            if isinstance(value, list):
                value = [(v["column"], v["mask"]) if isinstance(v, dict) else v for v in value]
            row[key] = value if value != [] else None
        del row["ts"], row["line"]
        row["user"] = record.user or None
        rows[(row.pop("writer"), row.pop("seq"))] = row
    return rows


def test_schema_and_no_python_udfs(audit_spark: SparkSession, tricky_log: Path) -> None:
    df = audit_dataframe(audit_spark, tricky_log)
    assert df.schema.simpleString() == AUDIT_SCHEMA.simpleString()
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "EvalPython" not in plan and "PythonUDF" not in plan


def test_rows_match_the_python_parser_exactly(audit_df: DataFrame, tricky_log: Path) -> None:
    spark_rows = {}
    for row in audit_df.selectExpr("unix_millis(ts) AS ms", "*").collect():
        data = row.asDict(recursive=True)
        data.pop("ts")
        data["masked"] = (
            None if data["masked"] is None else [(m["column"], m["mask"]) for m in data["masked"]]
        )
        spark_rows[(data.pop("writer"), data.pop("seq"))] = data
    expected = python_rows(tricky_log)
    assert len(spark_rows) == len(expected) == len(TRICKY) + 1
    assert spark_rows == expected
    first = next(r for r in spark_rows.values() if r["queryId"] == "q1")
    assert first["user"] == "new\nline" and first["columns"] == ["new\nline", "email"]
    assert first["ugi"] == "new\nline (auth:SIMPLE) via svc (auth:TOKEN)"


def test_saved_queries_run(audit_spark: SparkSession, audit_df: DataFrame) -> None:
    audit_df.createOrReplaceTempView("audit_log")
    pii_readers = audit_spark.sql(
        """
        SELECT user, count(DISTINCT queryId) AS statements FROM audit_log
        WHERE cmd = 'select' AND allowed AND src LIKE 'main.pii.%'
          AND ts >= timestamp'2026-11-22 00:00:00Z' - INTERVAL 7 DAYS
        GROUP BY user
        """
    ).collect()
    assert len(pii_readers) == sum(1 for i in range(len(TRICKY)) if i % 3 != 0)
    denials = audit_spark.sql(
        "SELECT user, count(*) AS n FROM audit_log WHERE NOT allowed GROUP BY user"
    ).collect()
    assert {r["user"]: r["n"] for r in denials}["bob"] == 1
    masked_email = audit_spark.sql(
        "SELECT count(*) AS n FROM audit_log WHERE exists(masked, m -> m.column = 'email')"
    ).collect()[0]["n"]
    assert masked_email == len(TRICKY)


def test_edited_escape_does_not_break_the_table(audit_spark: SparkSession, tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([AuditEvent(allowed=True, user="x", cmd="select", reason="é")])
    path = tmp_path / "audit.log"
    path.write_text(path.read_text().replace("reason=\\u00E9", "reason=\\u00Z9"))
    rows = audit_dataframe(audit_spark, tmp_path).select("reason").collect()
    assert rows[0]["reason"] == "\\u00Z9"  # left escaped, the query still runs


def test_empty_directory(audit_spark: SparkSession, tmp_path: Path) -> None:
    df = audit_dataframe(audit_spark, tmp_path)
    assert df.schema.simpleString() == AUDIT_SCHEMA.simpleString() and df.count() == 0


@pytest.mark.parametrize(
    "text", ["plain", 'q"b\\s', "t\tn\nr\rb\bf\f", "\x00\x1f", "é日", "😀", "\u2028", "a=b,c'/"]
)
def test_escaping_matches_commons_text(audit_spark: SparkSession, text: str) -> None:
    java = audit_spark._jvm.org.apache.commons.text.StringEscapeUtils  # type: ignore[union-attr]
    assert escape_java(text) == java.escapeJava(text)
    assert java.unescapeJava(escape_java(text)) == text
