"""`lakegate sql` and `lakegate explain` against the shared demo lakehouse's lakegate.yaml.

A `lakegate sql` that runs a statement starts its own Spark (~15 s), so those subprocesses
are few and all start at once in one fixture; `explain` and a denial decided before
execution start no Spark. The csv and table formats run the same `main()` in this process,
on the session's SparkSession (Spark's getOrCreate hands it back).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main

LAKEGATE = str(Path(sys.executable).with_name("lakegate"))
CAROL_ORDERS = "SELECT id, region, amount, order_date FROM main.sales.orders ORDER BY id"
CAROL_BAD_INSERT = "INSERT INTO main.sales.orders (id, region, is_test) VALUES (99, 'AMER', false)"
RUNS = {
    # name: argv after --config (the first two start Spark)
    "json": ["sql", "--user", "carol", "--format", "json", CAROL_ORDERS],
    "denied_at_run_time": ["sql", "--user", "carol", CAROL_BAD_INSERT],
    "denied_at_plan_time": ["sql", "--user", "frank", "SELECT * FROM main.sales.orders"],
    "explain": ["explain", "--user", "carol", "SELECT id FROM main.sales.orders"],
}


TERMINAL = "json"  # this run's stderr is a terminal, where long steps say what they do


@pytest.fixture(scope="module")
def cli(lakehouse) -> dict[str, subprocess.CompletedProcess]:
    config = str(lakehouse.config.path)
    terminal, tty = pty.openpty()
    procs = {
        name: subprocess.Popen(
            [LAKEGATE, "--config", config, *argv],
            stdout=subprocess.PIPE,
            stderr=tty if name == TERMINAL else subprocess.PIPE,
            text=True,
        )
        for name, argv in RUNS.items()
    }
    os.close(tty)
    done = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=600)
        if name == TERMINAL:
            err = _drain(terminal)
        done[name] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    os.close(terminal)
    return done


def _drain(fd: int) -> str:
    """What a finished process wrote to a pseudo-terminal (EIO marks the end on Linux)."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


CAROL_ORDERS_JSON = [
    {"id": 1, "region": "EMEA", "amount": "120.00", "order_date": "2026-01-05"},
    {"id": 4, "region": "EMEA", "amount": "42.00", "order_date": "2026-02-14"},
    {"id": 8, "region": "EMEA", "amount": "64.10", "order_date": "2026-04-02"},
]


def test_sql_json_prints_the_governed_rows(cli):
    run = cli["json"]
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == CAROL_ORDERS_JSON


def test_sql_json_stdout_is_only_the_json_document(cli):
    assert json.loads(cli["json"].stdout) == CAROL_ORDERS_JSON


def test_first_spark_start_says_so_on_a_terminal(cli):
    assert (
        "lakegate: starting Spark (20-60 s; a running gateway answers at once: --gateway)..."
        in cli[TERMINAL].stderr
    )


def test_explain_prints_the_rewritten_sql(cli, lakehouse):
    run = cli["explain"]
    location = lakehouse.catalog.table("main", "sales", "orders").location
    assert run.returncode == 0, run.stderr
    assert run.stdout == (
        f"SELECT id FROM (SELECT `id` FROM delta.`{location}` AS __lg_v "
        "WHERE ((region = 'EMEA')) AND (NOT is_test)) AS orders\n"
    )


def test_access_denied_exits_3_with_one_line_on_stderr(cli):
    run = cli["denied_at_plan_time"]
    assert (run.returncode, run.stdout, run.stderr) == (
        3,
        "",
        "lakegate: access denied: user frank has no SELECT privilege on table "
        "main.sales.orders (or it does not exist)\n",
    )


def test_access_denied_while_running_exits_3_and_says_why(cli, lakehouse):
    run = cli["denied_at_run_time"]
    assert run.returncode == 3
    assert run.stderr.splitlines()[-1] == (
        "lakegate: access denied: a row written by user carol is outside their row filter on "
        "main.sales.orders; nothing was written"
    )
    assert (
        lakehouse.session("root")
        .sql("SELECT count(*) FROM main.sales.orders WHERE id = 99")
        .collect()[0][0]
        == 0
    )


def test_access_denied_while_running_prints_only_the_one_line(cli):
    run = cli["denied_at_run_time"]
    assert (run.returncode, run.stdout, len(run.stderr.splitlines())) == (3, "", 1), run.stderr


@pytest.fixture
def in_process(lakehouse, spark):
    """Run `lakegate` in this process; undo the session conf its Spark builder sets."""
    keep = spark.conf.get("spark.sql.shuffle.partitions")

    def run(*argv: str) -> int:
        return main(["--config", str(lakehouse.config.path), *argv])

    yield run
    spark.conf.set("spark.sql.shuffle.partitions", keep)


def test_sql_csv_prints_a_header_and_the_governed_values(in_process, capsys):
    rc = in_process(
        "sql",
        "--user",
        "carol",
        "--format",
        "csv",
        "SELECT id, phone FROM main.sales.customers ORDER BY id",
    )
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")
    assert out == ("id,phone\r\n1,**********4567\r\n4,***********8910\r\n6,************0958\r\n")


def test_sql_table_prints_aligned_columns_nulls_and_a_row_count(in_process, capsys):
    rc = in_process(
        "sql",
        "--user",
        "carol",
        "--format",
        "table",
        "SELECT id, region, NULL AS note FROM main.sales.orders ORDER BY id",
    )
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")
    assert out == (
        "id | region | note\n"
        "---+--------+-----\n"
        "1  | EMEA   | NULL\n"
        "4  | EMEA   | NULL\n"
        "8  | EMEA   | NULL\n"
        "(3 rows)\n"
    )


def test_policy_test_require_spark_checks_every_case(in_process, capsys):
    policies = Path(__file__).resolve().parents[2] / "policies"
    assert in_process("policy", "test", str(policies), "--require-spark") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].endswith(" passed, 0 failed, 0 skipped")
    assert err == ""
