"""Spark runs the text Lakegate checked (issue 24): no `${...}` substitution, no parser or
legacy setting changed behind the layer's back, and no secret readable by a statement.

Embedded (`s.sql`) and command-line (`lakegate sql`) entry points; REST, Connect SQL and
Connect DataFrames have their own files (tests/api/test_api_substitution.py,
tests/api/connect/test_connect_settings.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from governance.runtime.spark import GOVERNED_CONF
from governance.verify.guard import SettingChanged

#: Each would read the server's environment, JVM properties or Spark settings if Spark
#: substituted it; with substitution off each is just the text it is.
REFERENCES = (
    "${env:HOME}",
    "${env:PATH}",
    "${system:user.name}",
    "${system:java.home}",
    "${spark.app.name}",
    "${sparkconf:spark.app.name}",
    "${hiveconf:spark.app.name}",
    "${spark.hadoop.fs.azure.account.key.lgtest.dfs.core.windows.net}",
)
AZURE_KEY = "spark.hadoop.fs.azure.account.key.lgtest.dfs.core.windows.net"


@pytest.fixture
def storage_key(lakehouse):
    """A storage key in the session's Spark settings, as a deployment would hold one."""
    spark = lakehouse.spark
    spark.conf.set(AZURE_KEY, "azure-storage-key-must-stay-secret")
    yield
    spark.conf.unset(AZURE_KEY)


def _select(refs: tuple[str, ...]) -> str:
    return "SELECT " + ", ".join(f"'{r}' AS c{i}" for i, r in enumerate(refs))


def test_variable_references_in_a_statement_stay_text(lakehouse, storage_key) -> None:
    row = lakehouse.session("carol").sql(_select(REFERENCES)).collect()[0]
    assert tuple(row) == REFERENCES


def test_variable_references_in_a_comment_inject_nothing(lakehouse) -> None:
    """A substituted value would end the comment (sqlglot writes it back as a block
    comment) and add SQL of its own."""
    spark = lakehouse.spark
    spark.conf.set("lg.test.comment", "*/ UNION ALL SELECT 2 AS a /*")
    try:
        rows = lakehouse.session("carol").sql("SELECT 1 AS a -- ${lg.test.comment}\n").collect()
    finally:
        spark.conf.unset("lg.test.comment")
    assert [tuple(r) for r in rows] == [(1,)]


def test_substitution_turned_back_on_is_refused_and_put_back(lakehouse) -> None:
    spark, s = lakehouse.spark, lakehouse.session("carol")
    s.sql("SELECT 1").collect()
    spark.conf.set("spark.sql.variable.substitute", "true")
    with pytest.raises(SettingChanged) as e:
        s.sql("SELECT '${system:user.name}' AS u")
    assert str(e.value) == (
        "Spark setting spark.sql.variable.substitute was changed in the session; Lakegate "
        "governs it (it is put back); statement refused"
    )
    assert spark.conf.get("spark.sql.variable.substitute") == "false"
    assert tuple(s.sql("SELECT '${system:user.name}' AS u").collect()[0]) == (
        "${system:user.name}",
    )


@pytest.mark.parametrize(
    "key,value",
    [
        ("spark.sql.parser.escapedStringLiterals", "true"),
        ("spark.sql.parser.quotedRegexColumnNames", "true"),
        ("spark.sql.ansi.doubleQuotedIdentifiers", "true"),
        ("spark.sql.legacy.setopsPrecedence.enabled", "true"),
        ("spark.sql.legacy.ctePrecedencePolicy", "LEGACY"),
    ],
)
def test_a_changed_parser_or_legacy_setting_is_refused_and_put_back(lakehouse, key, value):
    spark, s = lakehouse.spark, lakehouse.session("carol")
    spark.conf.set(key, value)
    with pytest.raises(SettingChanged) as e:
        s.sql("SELECT id FROM main.sales.orders")
    assert str(e.value).startswith(f"Spark setting {key} was changed in the session;")
    if key in GOVERNED_CONF:
        assert spark.conf.get(key) == GOVERNED_CONF[key]
    else:  # the family holds only the governed entries: anything else is unset again
        assert key not in dict(
            spark.sparkContext._jvm.scala.collection.JavaConverters.mapAsJavaMap(
                spark._jsparkSession.conf().getAll()
            )
        )
    assert {r.id for r in s.sql("SELECT id FROM main.sales.orders").collect()} == {1, 4, 8}


def test_a_command_is_parsed_as_checked(lakehouse, tmp_path) -> None:
    """A command's text (an INSERT's values, a column comment ALTER TABLE sets on the Delta
    table) is stored as written, never substituted."""
    from dataclasses import replace

    from governance.session.governed import Lakegate

    cfg = replace(
        lakehouse.config,
        catalog=str(tmp_path / "catalog.db"),
        warehouse=tmp_path / "warehouse",
        audit=tmp_path / "audit",
    )
    lg = Lakegate(cfg, spark=lakehouse.spark)
    try:
        s = lg.session("root")
        s.sql("CREATE CATALOG c")
        s.sql("CREATE SCHEMA c.s")
        s.sql("CREATE TABLE c.s.t (id INT, note STRING) COMMENT '${system:user.name}'")
        s.sql("INSERT INTO c.s.t VALUES (1, '${env:HOME}')")
        s.sql("ALTER TABLE c.s.t ADD COLUMNS (extra STRING COMMENT '${system:user.name}')")
        rows = [tuple(r) for r in s.sql("SELECT id, note FROM c.s.t").collect()]
        table = lg.catalog.table("c", "s", "t")
    finally:
        lg.close()
    assert rows == [(1, "${env:HOME}")]
    assert table.comment == "${system:user.name}"
    schema = lakehouse.spark.read.format("delta").load(table.location).schema
    assert schema["extra"].metadata["comment"] == "${system:user.name}"


def test_a_handed_in_session_gets_substitution_turned_off(lakehouse, tmp_path) -> None:
    from governance.session.governed import Lakegate

    spark = lakehouse.spark
    spark.conf.set("spark.sql.variable.substitute", "true")
    spark.conf.set("spark.sql.legacy.setopsPrecedence.enabled", "true")
    lg = Lakegate(lakehouse.config, spark=spark)
    try:
        row = lg.session("carol").sql("SELECT '${spark.app.name}' AS a").collect()[0]
    finally:
        lg.close()
    assert row.a == "${spark.app.name}"
    assert spark.conf.get("spark.sql.variable.substitute") == "false"


@pytest.mark.parametrize(
    "statement,refusal",
    [
        (
            "SELECT * FROM IDENTIFIER('main.hr.employees')",
            "IDENTIFIER(...) is not governed by Lakegate: the name it makes is only known "
            "when the statement runs; write the name itself",
        ),
        (
            "SELECT IDENTIFIER('salary') FROM main.sales.orders",
            "IDENTIFIER(...) is not governed by Lakegate: the name it makes is only known "
            "when the statement runs; write the name itself",
        ),
        (
            "SELECT :x AS a",
            "parameters and variables (:x) in a statement are not governed; inline the value",
        ),
        (
            "SELECT ? AS a",
            "parameters and variables (?) in a statement are not governed; inline the value",
        ),
        (
            "SET spark.sql.variable.substitute=true",
            "statement kind SET is not governed by Lakegate",
        ),
    ],
)
def test_text_spark_resolves_after_parsing_is_refused(lakehouse, statement, refusal) -> None:
    from governance.errors import LakegateError

    with pytest.raises(LakegateError) as e:
        lakehouse.session("carol").sql(statement)
    assert str(e.value) == refusal


def test_an_api_secret_from_the_environment_is_taken_out_of_it(monkeypatch) -> None:
    from governance.config import env_secret

    monkeypatch.setenv("LAKEGATE_TEST_SIGNING_KEY", "signing-key-0123456789abcdef")
    assert env_secret("LAKEGATE_TEST_SIGNING_KEY") == "signing-key-0123456789abcdef"
    assert "LAKEGATE_TEST_SIGNING_KEY" not in os.environ
    assert env_secret("LAKEGATE_TEST_SIGNING_KEY") == "signing-key-0123456789abcdef"


CLI_PROBE = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from cli import main
    rc = main(sys.argv[1:])
    jvm = SparkSession.getActiveSession().sparkContext._jvm
    print("JVM-ENV", jvm.java.lang.System.getenv("LAKEGATE_API_SECRET"), file=sys.stderr)
    sys.exit(rc)
    """
)


def test_lakegate_sql_reads_no_secret_back(lakehouse, tmp_path: Path) -> None:
    """`lakegate sql` with the token-signing key in its environment: the statement reads its
    reference as text, and the Spark driver it starts never had the key."""
    cfg = yaml.safe_load(Path(lakehouse.config.path).read_text())
    base = Path(lakehouse.config.path).parent
    for key in ("warehouse", "catalog", "policies", "audit"):
        if key in cfg and not Path(str(cfg[key])).is_absolute() and "://" not in str(cfg[key]):
            cfg[key] = str(base / cfg[key])
    cfg["audit"] = str(tmp_path / "audit")
    cfg["api"] = {"secret_env": "LAKEGATE_API_SECRET"}
    config = tmp_path / "lakegate.yaml"
    config.write_text(yaml.safe_dump(cfg))
    statement = "SELECT '${env:LAKEGATE_API_SECRET}' AS h, '${system:user.name}' AS u"
    env = {**os.environ, "LAKEGATE_API_SECRET": "cli-signing-key-0123456789abcdef"}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            CLI_PROBE,
            "--config",
            str(config),
            "sql",
            "--user",
            "carol",
            "--format",
            "json",
            statement,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout) == [
        {"h": "${env:LAKEGATE_API_SECRET}", "u": "${system:user.name}"}
    ]
    assert "JVM-ENV None" in run.stderr
    assert "cli-signing-key" not in run.stdout + run.stderr
