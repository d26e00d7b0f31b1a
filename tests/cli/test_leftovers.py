"""Set-aside leftovers are visible (issue 42, item 3): the directories a crashed CREATE
leaves in the warehouse, set aside (`<table>.orphan-<time>-<id>`) or not yet (a Delta table
no registered table owns), are listed by `doctor` with the command that removes them, and
`lakegate catalog leftovers --remove` deletes them only after confirmation, each removal on
record as an admin act. Real Delta tables (delta-rs, no JVM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner
from deltalake import write_deltalake

from cli.app import cli
from governance.tools.demo import write_config

ROOT = Path(__file__).resolve().parents[2]


def _lakehouse(tmp_path: Path) -> tuple[Path, Path, Path]:
    config = write_config(tmp_path)
    schema = tmp_path / "warehouse" / "main" / "sales"
    aside = schema / "copy.orphan-20261206T000102Z-0123abcd"
    stray = schema / "stray"
    for where in (aside, stray):
        write_deltalake(str(where), pa.table({"id": [1, 2]}))
    return config, aside, stray


def _lakegate(argv: list[str], answer: str) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it, answering its question on stdin."""
    env = {k: v for k, v in os.environ.items() if k != "LAKEGATE_CONFIG"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        input=answer,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _doctor(runner: CliRunner, config: Path) -> dict[str, dict[str, str]]:
    out = runner.invoke(cli, ["--config", str(config), "doctor", "-o", "json"]).stdout
    return {c["check"]: c for c in json.loads(out)}


def test_doctor_lists_crash_leftovers_and_names_the_command_that_removes_them(
    tmp_path: Path,
) -> None:
    config, aside, stray = _lakehouse(tmp_path)
    runner = CliRunner()
    check = _doctor(runner, config)["leftovers"]
    assert check["status"] == "warn"
    assert f"{aside} (set aside)" in check["detail"]
    assert f"{stray} (unregistered)" in check["detail"]
    assert "'lakegate catalog leftovers --remove' removes them" in check["detail"]


def test_leftovers_are_removed_only_after_confirmation_and_each_removal_is_audited(
    tmp_path: Path,
) -> None:
    config, aside, stray = _lakehouse(tmp_path)
    runner = CliRunner()
    base = ["--config", str(config), "catalog", "leftovers"]
    listed = runner.invoke(cli, [*base, "-o", "json"])
    assert listed.exit_code == 0
    assert {r["leftover"] for r in json.loads(listed.stdout)} == {str(aside), str(stray)}
    declined = _lakegate([*base, "--remove"], "n\n")
    assert declined.returncode == 1 and "nothing removed" in declined.stderr
    assert aside.is_dir() and stray.is_dir()
    removed = _lakegate([*base, "--remove"], "y\n")
    assert removed.returncode == 0, removed.stderr
    assert not aside.exists() and not stray.exists()
    lines = [
        line
        for log in (tmp_path / "audit").glob("audit.log*")
        for line in log.read_text().splitlines()
        if "\tcmd=removeLeftover\t" in line
    ]
    for where in (aside, stray):
        mine = [line for line in lines if f"\tsrc={where}\t" in line]
        # the intent before the deletion, the outcome after it
        assert ["\tphase=intent" in x for x in mine] == [True, False], mine
        assert "\tphase=outcome" in mine[1] and "\tsucceeded=true" in mine[1], mine
    assert _doctor(runner, config)["leftovers"]["status"] == "ok"
