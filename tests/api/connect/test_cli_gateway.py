"""`lakegate sql --gateway`: the statement goes to the running gateway, which governs it as the
token's user; output and exit codes are the local `lakegate sql`'s, and no Spark starts here.

The gateway runs are new processes (a client machine has no JVM), all started at once in one
fixture, with SPARK_HOME pointing nowhere: a local Spark start there fails, which the
`local_in_trap` run proves. The local runs for comparison are `main()` in this process on a
lakegate.yaml naming the gateway's own catalog and policies.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from connect_testkit import token_of

from cli import main

ROOT = Path(__file__).resolve().parents[3]
CAROL_ORDERS = "SELECT id, region, amount, order_date FROM main.sales.orders ORDER BY id"
CAROL_CUSTOMERS = "SELECT id, phone FROM main.sales.customers ORDER BY id"
CAROL_BAD_INSERT = "INSERT INTO main.sales.orders (id, region, is_test) VALUES (99, 'AMER', false)"
MIRA_REGIONS = "SELECT DISTINCT region FROM main.sales.orders ORDER BY region"
# runs `lakegate` and exits 99 when this process started a JVM or opened Lakegate
NO_LOCAL_SPARK = """
import sys
from cli import main
rc = main(sys.argv[1:])
from pyspark import SparkContext
governed = "governance.session.governed" in sys.modules
sys.exit(99 if SparkContext._gateway is not None or governed else rc)
"""


@pytest.fixture(scope="module")
def client(gateway, connect_lakegate, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What an analyst's machine holds: the gateway URL, the CA, token files."""
    root = tmp_path_factory.mktemp("cli-gateway")
    tokens = {}
    for name, token in [
        ("carol", token_of("carol")),
        ("mira", token_of("mira")),
        ("wrong", token_of("carol") + "x"),
    ]:
        path = root / f"{name}.token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        tokens[name] = str(path)
    return {
        "url": f"sc://127.0.0.1:{gateway.port}",
        "ca": str(connect_lakegate.ca),
        "tokens": tokens,
        "root": root,
    }


def _gateway_argv(client: dict[str, Any], token: str, *argv: str) -> list[str]:
    return [
        "sql",
        "--gateway",
        client["url"],
        "--ca-file",
        client["ca"],
        "--token-file",
        client["tokens"][token],
        *argv,
    ]


def _config_naming(gateway_port: int, tls_cert: Path, tls_key: Path, lakehouse: Any) -> dict:
    """A lakegate.yaml whose `connect:` section names a gateway (as on the gateway's host)."""
    cfg = yaml.safe_load(Path(lakehouse.config.path).read_text())
    cfg["connect"] = {
        "host": "127.0.0.1",
        "port": gateway_port,
        "tls_cert": str(tls_cert),
        "tls_key": str(tls_key),
    }
    return cfg


@pytest.fixture(scope="module")
def runs(client, lakehouse, gateway, connect_lakegate) -> dict[str, subprocess.CompletedProcess]:
    tls = connect_lakegate.config.connect
    default_cfg = client["root"] / "lakegate.yaml"  # read by default from the run's cwd
    default_cfg.write_text(
        yaml.safe_dump(_config_naming(gateway.port, tls.tls_cert, tls.tls_key, lakehouse))
    )
    trap = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LAKEGATE_", "GRPC_"))},
        "PYTHONPATH": str(ROOT),
        "SPARK_HOME": str(client["root"] / "no-spark-here"),
    }
    argvs = {
        "carol_json": _gateway_argv(client, "carol", "-o", "json", CAROL_ORDERS),
        "carol_table": _gateway_argv(client, "carol", "-o", "table", CAROL_CUSTOMERS),
        "carol_csv": _gateway_argv(client, "carol", "-o", "csv", CAROL_CUSTOMERS),
        "mira_json": _gateway_argv(client, "mira", "-o", "json", MIRA_REGIONS),
        "carol_insert": _gateway_argv(client, "carol", CAROL_BAD_INSERT),
        "wrong_token": _gateway_argv(client, "wrong", CAROL_ORDERS),
        # no --gateway, no --user: the config's running gateway, carol's token from the env
        "carol_by_default": ["-o", "json", CAROL_ORDERS],
        "local_in_trap": [
            "--config",
            str(lakehouse.config.path),
            "sql",
            "--user",
            "carol",
            CAROL_ORDERS,
        ],
    }
    envs = {"carol_by_default": {**trap, "LAKEGATE_TOKEN": token_of("carol")}}
    # The commands run at once to save time: 6 one-shot commands of carol's beside mira's
    # would be held to carol's fair share (on by default; tested in test_fair_share.py and
    # test_connect_limits.py), queued and, on a loaded machine, refused as busy.
    limits = gateway.service.limits
    slots, limits.fair_share_slots = limits.fair_share_slots, 0
    try:
        return _ran(argvs, envs, trap, client)
    finally:
        limits.fair_share_slots = slots


def _ran(
    argvs: dict[str, list[str]], envs: dict[str, Any], trap: dict[str, str], client: Any
) -> dict[str, subprocess.CompletedProcess]:
    procs = {
        name: subprocess.Popen(
            [
                sys.executable,
                *(["-m", "cli"] if "--user" in argv else ["-c", NO_LOCAL_SPARK]),
                *(["sql", *argv] if name == "carol_by_default" else argv),
            ],
            cwd=client["root"],
            env=envs.get(name, trap),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, argv in argvs.items()
    }
    done = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=600)  # bytes: csv's \r\n stays as printed
        done[name] = subprocess.CompletedProcess(p.args, p.returncode, out.decode(), err.decode())
    return done


@pytest.fixture(scope="module")
def local_config(connect_lakegate, lakehouse, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A lakegate.yaml on the gateway's catalog, policies and audit directory."""
    cfg = yaml.safe_load(Path(lakehouse.config.path).read_text())
    c = connect_lakegate.config
    cfg.update(
        catalog=str(c.catalog),
        policies=str(c.policies),
        audit=str(c.audit),
        warehouse=str(c.warehouse),
    )
    path = tmp_path_factory.mktemp("cli-local") / "lakegate.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture
def local(local_config, spark, capsys):
    """`lakegate sql` here (on the session's Spark): (exit code, stdout, stderr)."""
    keep = spark.conf.get("spark.sql.shuffle.partitions")
    capsys.readouterr()

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main(["--config", local_config, "sql", *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    yield run
    spark.conf.set("spark.sql.shuffle.partitions", keep)


@pytest.mark.parametrize(
    ("run", "argv"),
    [
        ("carol_json", ["-o", "json", CAROL_ORDERS]),
        ("carol_table", ["-o", "table", CAROL_CUSTOMERS]),
        ("carol_csv", ["-o", "csv", CAROL_CUSTOMERS]),
    ],
)
def test_gateway_sql_prints_what_local_sql_prints_for_the_same_user(runs, local, run, argv):
    got = runs[run]
    assert (got.returncode, got.stderr) == (0, ""), got.stderr
    assert got.stdout == local("--user", "carol", *argv)[1]


def test_gateway_applies_the_row_filter_of_the_tokens_user(runs, embedded):
    got = runs["mira_json"]
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == [{"region": "APAC"}, {"region": "EMEA"}]
    assert [(r["region"],) for r in json.loads(got.stdout)] == embedded("mira", MIRA_REGIONS)


def test_gateway_refusal_is_the_local_line_and_exit_code(runs, local):
    got = runs["carol_insert"]
    rc, out, err = local("--user", "carol", CAROL_BAD_INSERT)
    assert (rc, out) == (3, "")
    assert (got.returncode, got.stdout, got.stderr) == (rc, "", err)


def test_wrong_token_is_one_line_exit_3_and_never_printed(runs, client):
    got = runs["wrong_token"]
    assert (got.returncode, got.stdout, got.stderr) == (3, "", "lakegate: invalid token\n")
    assert token_of("carol") not in got.stdout + got.stderr


def test_gateway_sql_starts_no_local_spark(runs):
    assert runs["carol_json"].returncode == 0  # 99: a JVM started or Lakegate was opened
    trapped = runs["local_in_trap"]  # the same environment stops a local Spark start
    assert trapped.returncode == 5
    assert trapped.stderr.startswith("lakegate: Spark could not start"), trapped.stderr


def test_user_with_gateway_is_refused_without_contacting_it(client, capsys):
    rc = main([*_gateway_argv(client, "carol", CAROL_ORDERS), "--user", "carol"])
    assert (rc, capsys.readouterr()) == (
        2,
        (
            "",
            "lakegate: --user (or LAKEGATE_USER) cannot go with --gateway: the gateway acts "
            "as the token's user\n",
        ),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("argv", "env_token", "code", "line"),
    [
        (
            ["--gateway", "sc://127.0.0.1:1"],
            None,
            2,
            "--gateway needs a token: --token-file FILE or LAKEGATE_TOKEN (`lakegate token "
            "create` on the gateway's host makes one)",
        ),
        (
            ["--gateway", "sc://127.0.0.1:1/;token=secret-in-url"],
            "t",
            2,
            "--gateway takes sc://host:port only; give the token with --token-file or "
            "LAKEGATE_TOKEN and the CA with --ca-file",
        ),
        (["--gateway", "http://127.0.0.1:1"], "t", 2, "--gateway must be sc://host:port"),
        (
            ["--gateway", "sc://127.0.0.1:99999"],
            "t",
            2,
            "--gateway port must be a number from 1 to 65535",
        ),
        (
            ["--gateway", "sc://127.0.0.1:1"],
            "to ken",
            2,
            "LAKEGATE_TOKEN is not a bearer token (spaces or control characters)",
        ),
        (
            ["--gateway", "sc://127.0.0.1:1", "--token-file", "/nonexistent/t"],
            None,
            2,
            "cannot read the token file /nonexistent/t: No such file or directory",
        ),
        (
            ["--token-file", "/nonexistent/t", "--user", "carol"],
            None,
            2,
            "--token-file and --ca-file go with --gateway",
        ),
    ],
)
def test_gateway_usage_mistakes_are_one_line_exit_2(
    monkeypatch, capsys, argv, env_token, code, line
):
    monkeypatch.delenv("LAKEGATE_TOKEN", raising=False)
    if env_token is not None:
        monkeypatch.setenv("LAKEGATE_TOKEN", env_token)
    rc = main(["sql", *argv, "SELECT 1"])
    assert (rc, capsys.readouterr()) == (code, ("", f"lakegate: {line}\n"))


def test_unreachable_gateway_is_one_line_exit_5(monkeypatch, capsys):
    monkeypatch.setenv("LAKEGATE_TOKEN", token_of("carol"))
    port = _free_port()
    rc = main(["sql", "--gateway", f"sc://127.0.0.1:{port}", "SELECT 1"])
    out, err = capsys.readouterr()
    assert (rc, out) == (5, "")
    assert err == f"lakegate: cannot reach the gateway at 127.0.0.1:{port} (Connection refused)\n"


def test_untrusted_gateway_certificate_is_one_line_exit_5(client, monkeypatch, capsys):
    monkeypatch.setenv("LAKEGATE_TOKEN", token_of("carol"))
    rc = main(["sql", "--gateway", client["url"], "SELECT 1"])  # no --ca-file: system roots
    out, err = capsys.readouterr()
    assert (rc, out) == (5, "")
    assert err.startswith(
        f"lakegate: TLS: the gateway at {client['url'][5:]} has a certificate this client "
        "does not trust ("
    ), err
    assert err.count("\n") == 1 and token_of("carol") not in err


def test_statement_that_does_not_parse_exits_4_as_locally(client, monkeypatch, capsys):
    monkeypatch.setenv("LAKEGATE_TOKEN", token_of("carol"))
    rc = main(["sql", "--gateway", client["url"], "--ca-file", client["ca"], "SELEC 1 FROM"])
    out, err = capsys.readouterr()
    assert (rc, out) == (4, "")
    assert err.startswith("lakegate: cannot parse statement") and err.count("\n") == 1


def test_sql_without_user_goes_to_the_configured_running_gateway(runs, local):
    """The config's `connect:` gateway answers and a token is at hand: no Spark starts here
    (the run exits 99 if it did) and the answer is the token's user's."""
    got = runs["carol_by_default"]
    assert (got.returncode, got.stderr) == (0, ""), got.stderr
    assert got.stdout == local("--user", "carol", "-o", "json", CAROL_ORDERS)[1]


def test_sql_without_user_and_no_running_gateway_says_so_in_one_line(
    lakehouse, connect_lakegate, tmp_path, monkeypatch, capsys
):
    tls = connect_lakegate.config.connect
    port = _free_port()
    cfg = tmp_path / "lakegate.yaml"
    cfg.write_text(yaml.safe_dump(_config_naming(port, tls.tls_cert, tls.tls_key, lakehouse)))
    monkeypatch.setenv("LAKEGATE_TOKEN", token_of("carol"))
    rc = main(["--config", str(cfg), "sql", "SELECT 1"])
    assert (rc, capsys.readouterr()) == (
        2,
        (
            "",
            f"lakegate: no running gateway to send this to (cannot reach the gateway at "
            f"127.0.0.1:{port} (Connection refused)); give --user to run it here, starting "
            "Spark (20-60 s)\n",
        ),
    )


def test_local_with_gateway_is_refused_without_contacting_it(client, capsys):
    rc = main([*_gateway_argv(client, "carol", CAROL_ORDERS), "--local"])
    assert (rc, capsys.readouterr()) == (
        2,
        ("", "lakegate: --local cannot go with --gateway: the gateway acts as the token's user\n"),
    )
