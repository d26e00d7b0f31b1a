"""The command line users trust (issue 16 items 2-4): one rule per test.

Subprocess tests run the real `lakegate` entry point on a small configuration of their own
and start no Spark (each is about a second); tests on the demo lakehouse run `main()` in this
process, where nothing starts Spark either (catalog, policies and audit files only).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from api.auth import TokenAuth
from audit import AuditEvent, AuditLog
from cli import main
from governance.config import Config

LAKEGATE = str(Path(sys.executable).with_name("lakegate"))
REPO = Path(__file__).resolve().parents[2]


def lakegate(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The installed `lakegate` command, importing this checkout (PYTHONPATH is inherited)."""
    return subprocess.run(
        [LAKEGATE, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,  # a bound, not a timing: Spark starts in 20-60 s, minutes on a loaded machine
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A lakegate.yaml of its own: reference policies, empty catalog, audit under tmp."""
    config = tmp_path / "lakegate.yaml"
    config.write_text(f"policies: {REPO / 'policies'}\napi:\n  secret: {'s' * 32}\n")
    config.chmod(0o600)  # it holds a secret: doctor fails it otherwise
    return config


# ---- exit codes: one meaning each, and --help lists them


def test_help_lists_every_exit_code(tmp_path):
    run = lakegate("--help", cwd=tmp_path)
    assert run.returncode == 0
    codes = [
        line.split()[0]
        for line in run.stdout.split("Exit codes:")[1].splitlines()
        if line.strip()[:1].isdigit()
    ]
    assert codes == ["0", "1", "2", "3", "4", "5"]


def test_a_usage_error_exits_2(tmp_path):
    run = lakegate("sql", "SELECT 1", cwd=tmp_path)  # no --user and no gateway configured
    assert run.returncode == 2
    assert run.stderr == (
        "lakegate: no running gateway to send this to (no lakegate.yaml); give --user to run "
        "it here, starting Spark (20-60 s)\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["sql", "--user", "\u212aarl", "SELECT 1"],  # Kelvin sign K
        ["explain", "--user", "\uff43arol", "SELECT 1"],  # fullwidth c
        ["policy", "explain", "--user", "car\u200bol", "main.sales.orders"],  # zero-width space
        ["whoami", "--user", "\u0131van"],  # dotless i
    ],
)
def test_a_look_alike_user_name_is_a_usage_error(small, argv):
    """The one identity rule (governance/identity.py) holds on every --user: a look-alike
    never folds onto a real user, it is refused naming the code point."""
    run = lakegate("--config", str(small), *argv, cwd=small.parent)
    assert run.returncode == 2 and "is not allowed" in run.stderr, run.stderr


def test_a_broken_audit_chain_exits_1(tmp_path):
    with AuditLog(tmp_path) as log:
        log.write([AuditEvent(allowed=True, user="alice", cmd="select", src="main.s.t")])
    log_file = tmp_path / "audit.log"
    log_file.write_text(log_file.read_text().replace("cmd=select", "cmd=insert"))
    run = lakegate("audit", "verify", str(tmp_path), cwd=tmp_path)
    assert run.returncode == 1 and "BROKEN" in run.stdout


def test_a_statement_that_does_not_parse_exits_4_not_3(small):
    run = lakegate(
        "--config", str(small), "sql", "--user", "carol", "SELEC 1 FROM", cwd=small.parent
    )
    assert (run.returncode, run.stdout) == (4, "")
    assert run.stderr.startswith("lakegate: cannot parse statement")
    assert len(run.stderr.splitlines()) == 1


def test_serve_exits_5_in_one_line_when_the_port_is_taken(small):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        run = lakegate("--config", str(small), "serve", "--port", port, cwd=small.parent)
    assert (run.returncode, run.stdout) == (5, "")
    assert run.stderr.startswith(f"lakegate: cannot listen on 127.0.0.1:{port}: ")
    assert len(run.stderr.splitlines()) == 1


def test_spark_that_cannot_start_exits_5_in_one_line(small):
    run = lakegate(
        "--config",
        str(small),
        "sql",
        "-u",
        "carol",
        "SELECT 1",
        cwd=small.parent,
        env={"JAVA_HOME": str(small.parent / "no-java")},
    )
    assert (run.returncode, run.stdout) == (5, "")
    assert run.stderr == (
        "lakegate: Spark could not start (PySparkRuntimeError); see "
        f"{small.parent / 'lakegate-spark.log'}\n"
    )


# ---- never say OK about nothing


def test_audit_verify_without_a_configuration_fails_and_names_it(tmp_path):
    run = lakegate("audit", "verify", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert f"{tmp_path / 'lakegate.yaml'} not found" in run.stderr


def test_audit_verify_of_a_directory_without_log_files_fails_and_names_it(tmp_path, capsys):
    assert main(["audit", "verify", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err == f"lakegate: audit verify: no audit log files in {tmp_path}: nothing was verified\n"
    )


def test_policy_test_says_how_many_cases_it_did_not_check(capsys):
    assert main(["policy", "test", str(REPO / "policies")]) == 0
    out, err = capsys.readouterr()
    skipped = out.count("SKIPPED ")
    total = skipped + out.count("PASSED ")
    assert skipped > 0
    assert f"WARNING: {skipped} of {total} case(s) were NOT checked" in err


def test_policy_test_with_spark_keeps_the_jvm_off_the_terminal(small):
    """Ivy's resolution report and Spark's log lines go to lakegate-spark.log beside the
    config; stdout has the case results only."""
    run = lakegate("--config", str(small), "policy", "test", str(REPO / "policies"),
                   "--require-spark", cwd=small.parent)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    noise = [
        ln
        for ln in (run.stdout + run.stderr).splitlines()
        if ln.lstrip().startswith((":: ", "Ivy", "SLF4J", "log4j", "confs:", "found "))
        or re.search(r"\b(WARN|INFO|ERROR)\b", ln)
    ]
    assert noise == []
    assert "PASSED " in run.stdout and "SKIPPED " not in run.stdout
    assert (small.parent / "lakegate-spark.log").stat().st_size > 0


def _policies_with(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the reference policies with `old` replaced by `new` in sales.yaml."""
    copy = tmp_path / "policies"
    shutil.copytree(REPO / "policies", copy)
    sales = copy / "sales.yaml"
    assert old in sales.read_text()
    sales.write_text(sales.read_text().replace(old, new))
    return copy


WIDER = ("principals: [group:emea-analysts]", "principals: [dana]")
NARROWER = (
    "principals: [group:analysts]\n    privileges: [modify]",
    "principals: [dana]\n    privileges: [modify]",
)


@pytest.mark.parametrize(
    ("change", "fail_on", "code"),
    [
        (WIDER, None, 0),  # a report only, as before
        (WIDER, "widen", 1),  # carol loses the EMEA row filter
        (WIDER, "any", 1),
        (NARROWER, "widen", 0),  # analysts lose MODIFY: narrower only
        (NARROWER, "any", 1),
    ],
)
def test_policy_diff_fail_on_fails_ci_when_access_widens_or_changes(
    tmp_path, capsys, change, fail_on, code
):
    new = _policies_with(tmp_path, *change)
    argv = ["policy", "diff", str(REPO / "policies"), str(new)]
    assert main([*argv, "--fail-on", fail_on] if fail_on else argv) == code


def test_policy_validate_strict_fails_on_warnings(tmp_path, capsys):
    policies = _policies_with(tmp_path, "principals: [bob]", "principals: [bob, bob]")
    assert main(["policy", "validate", str(policies)]) == 0  # duplicate-entry: a warning
    assert "1 warning(s)" in capsys.readouterr().out
    assert main(["policy", "validate", "--strict", str(policies)]) == 1
    assert "error[duplicate-entry]" in capsys.readouterr().out


# ---- one line for everyday mistakes, before Spark starts


def _registered(config: Path) -> Path:
    """`main.sales.orders` in the small catalog (written through the catalog API), and a
    directory that looks like a Delta table."""
    from catalog.catalog import Catalog
    from catalog.model import ColumnInfo, TableInfo
    from catalog.store import open_store

    cfg = Config.load(config)
    cat = Catalog(open_store(cfg.catalog), cfg.warehouse)
    cat.create_catalog("main", if_not_exists=True)
    cat.create_schema("main", "sales", if_not_exists=True)
    cat.register_table(
        TableInfo(
            "main", "sales", "orders", str(config.parent / "t"), (ColumnInfo("id", "int", True, 0),)
        )
    )
    cat.store.close()
    (config.parent / "t" / "_delta_log").mkdir(parents=True)
    return config.parent / "t"


@pytest.mark.parametrize(
    ("name", "path", "message"),
    [
        (
            "main.sales.orders",
            "t",
            "table main.sales.orders already exists (--replace replaces it)",
        ),
        ("main.sales.events", ".", "{dir} is not a Delta table (no _delta_log)"),
        ("main.sales.events", "missing", "{dir}/missing: no such directory"),
        ("events", "t", "'events' is not a three-part name catalog.schema.table"),
    ],
)
def test_catalog_register_answers_everyday_mistakes_in_one_line_without_spark(
    small, name, path, message
):
    _registered(small)
    run = lakegate("--config", str(small), "catalog", "register", name, path, cwd=small.parent)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "lakegate: " + message.format(dir=small.parent) + "\n"
    assert not (small.parent / "lakegate-spark.log").exists()  # Spark never started


# ---- the conventions users know


def test_version_prints_the_package_version(tmp_path):
    from importlib.metadata import version

    run = lakegate("--version", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (0, f"lakegate {version('lakegate')}\n")


def test_config_is_accepted_before_after_and_from_the_environment(small, tmp_path):
    _registered(small)
    (tmp_path / "elsewhere").mkdir()
    runs = [
        lakegate("--config", str(small), "catalog", "list", cwd=tmp_path / "elsewhere"),
        lakegate("catalog", "list", "--config", str(small), cwd=tmp_path / "elsewhere"),
        lakegate("catalog", "--config", str(small), "list", cwd=tmp_path / "elsewhere"),
        lakegate(
            "catalog", "list", cwd=tmp_path / "elsewhere", env={"LAKEGATE_CONFIG": str(small)}
        ),
    ]
    assert [r.returncode for r in runs] == [0, 0, 0, 0], [r.stderr for r in runs]
    assert all("main.sales.orders" in r.stdout for r in runs)


def test_a_typed_config_wins_over_the_environment(small, tmp_path):
    run = lakegate(
        "catalog",
        "list",
        "--config",
        str(small),
        cwd=tmp_path,
        env={"LAKEGATE_CONFIG": str(tmp_path / "nosuch.yaml")},
    )
    assert run.returncode == 0, run.stderr


def test_shell_completion_completes_sub_commands(tmp_path):
    script = lakegate("completion", "bash", cwd=tmp_path)
    assert script.returncode == 0 and "_LAKEGATE_COMPLETE=bash_complete" in script.stdout
    run = lakegate(
        cwd=tmp_path,
        env={"_LAKEGATE_COMPLETE": "bash_complete", "COMP_WORDS": "lakegate au", "COMP_CWORD": "1"},
    )
    assert run.stdout.split() == ["plain,audit"]


def test_token_create_prints_a_token_and_the_config_line_that_accepts_it(small, capsys):
    assert main(["--config", str(small), "token", "create", "--user", "Alice"]) == 0
    token, comment, line = capsys.readouterr().out.splitlines()
    assert comment.startswith("# add under api: tokens: in lakegate.yaml")
    small.write_text(small.read_text() + "  tokens:\n  " + line + "\n")
    auth = TokenAuth(Config.load(small).api)
    assert auth.authenticate(f"Bearer {token}").user == "alice"


def test_token_create_with_ttl_signs_a_token_that_expires(small, capsys):
    assert (
        main(["--config", str(small), "token", "create", "-u", "bob", "--ttl", "2h", "-o", "json"])
        == 0
    )
    made = json.loads(capsys.readouterr().out)
    principal = TokenAuth(Config.load(small).api).authenticate(f"Bearer {made['token']}")
    assert (principal.user, principal.method, principal.expires) == (
        "bob",
        "signed",
        made["expires"],
    )


def test_token_create_with_ttl_and_no_secret_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "lakegate.yaml").write_text("{}\n")
    assert (
        main(
            [
                "--config",
                str(tmp_path / "lakegate.yaml"),
                "token",
                "create",
                "-u",
                "bob",
                "--ttl",
                "60",
            ]
        )
        == 2
    )
    assert "has none" in capsys.readouterr().err


@pytest.mark.parametrize("user", ["bob; rm -rf /", "", "a b"])
def test_a_hostile_user_name_is_refused_before_use(small, capsys, user):
    assert main(["--config", str(small), "whoami", "--user", user]) == 2
    assert "invalid user name" in capsys.readouterr().err


def test_doctor_gives_a_verdict_on_a_working_setup(small, capsys):
    assert main(["--config", str(small), "doctor"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["check", "|", "status", "|", "detail"]
    assert [line.split(" | ")[0].strip() for line in out.splitlines()[2:9]] == [
        "config",
        "java",
        "delta jars",
        "catalog",
        "policies",
        "tags",
        "audit",
    ]
    assert out.endswith("lakegate doctor: all checks passed\n")


def test_doctor_fails_on_an_audit_directory_it_cannot_write(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    (tmp_path / "lakegate.yaml").write_text(f"policies: {REPO / 'policies'}\naudit: afile/audit\n")
    assert main(["--config", str(tmp_path / "lakegate.yaml"), "doctor", "-o", "json"]) == 1
    out, err = capsys.readouterr()
    audit = next(c for c in json.loads(out) if c["check"] == "audit")
    assert audit["status"] == "FAIL"
    assert err == "lakegate doctor: 1 check(s) failed: audit\n"


def test_doctor_without_a_configuration_fails(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "nosuch.yaml"), "doctor"]) == 1
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("|")] for line in out.splitlines()]
    assert ["config", "FAIL"] in [r[:2] for r in rows]
    assert out.endswith("1 check(s) failed: config\n")


# ---- on the demo lakehouse (no Spark starts: catalog, policies and audit files only)


def test_whoami_names_groups_and_owned_domains(lakehouse, capsys):
    assert main(["--config", str(lakehouse.config.path), "whoami", "-u", "erin", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "user": "erin",
        "groups": ["sales-owners"],
        "domains_owned": ["sales"],
    }


def test_tables_lists_only_what_the_user_may_read(lakehouse, capsys):
    config = str(lakehouse.config.path)
    assert main(["--config", config, "tables", "-u", "carol", "-o", "json"]) == 0
    carol = {t["table"]: t for t in json.loads(capsys.readouterr().out)}
    assert main(["--config", config, "tables", "-u", "frank", "-o", "json"]) == 0
    frank = [t["table"] for t in json.loads(capsys.readouterr().out)]
    assert sorted(carol) == ["main.hr.employees", "main.sales.customers", "main.sales.orders"]
    assert carol["main.sales.orders"]["row_filter"] is True
    assert "ssn" not in carol["main.sales.customers"]["masked"]  # hidden, not masked
    assert frank == ["system.access.audit"]


# -o/--output is the same word on every command that prints data; --format still works
DATA_COMMANDS = [
    ["catalog", "list"],
    ["whoami", "-u", "carol"],
    ["tables", "-u", "carol"],
    ["doctor"],
    ["audit", "query"],
    ["audit", "verify"],
    ["policy", "validate", str(REPO / "policies")],
    ["policy", "explain", "-u", "carol", "--dir", str(REPO / "policies"), "main.sales.orders"],
    ["policy", "who-can-see", "--dir", str(REPO / "policies"), "main.sales.orders"],
    ["policy", "diff", str(REPO / "policies"), str(REPO / "policies")],
    ["token", "create", "-u", "carol"],
]


@pytest.mark.parametrize("spelling", ["--output", "--format", "-o"])
@pytest.mark.parametrize("argv", DATA_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_output_json_is_the_same_word_on_every_data_command(lakehouse, capsys, argv, spelling):
    assert main(["--config", str(lakehouse.config.path), *argv, spelling, "json"]) == 0
    json.loads(capsys.readouterr().out)


def test_catalog_list_prints_a_table_with_a_header(lakehouse, capsys):
    assert main(["--config", str(lakehouse.config.path), "catalog", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["table", "|", "domain", "|", "location"]
    assert any(line.startswith("main.sales.orders ") for line in lines[2:])
