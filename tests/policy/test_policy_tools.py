"""Policy review tools: explain, who-can-see, diff (dirs and git revisions), policy tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cli import main
from governance.policy.analysis import (
    diff_policies,
    effective_access,
    load_policies,
    tables_from_policies,
)
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir, load_policy_text
from governance.tools.policytests import run_tests

REFERENCE = Path(__file__).resolve().parents[2] / "policies"

BASE = """
groups:
  analysts: [alice, group:emea]
  emea: [carol]
tags:
  main.s.t.email: [pii]
grants:
  - id: read
    principals: [group:analysts]
    privileges: [select]
    on: main.s.t
    columns: [id, email, region]
row_filters:
  - id: emea-rows
    on: main.s.t
    principals: [group:emea]
    where: "region = 'EMEA'"
column_masks:
  - id: pii
    on: main.*.*
    tags: [pii]
    mask: hash
"""


def _diff(old: str, new: str) -> list[tuple[str, str, bool]]:
    d = diff_policies(load_policy_text({"p.yaml": old}), load_policy_text({"p.yaml": new}))
    return [(c.user, c.detail, c.flagged) for c in d.changes]


def test_explain_reports_privileges_masks_filters_and_deciding_policies() -> None:
    e = PolicyEnforcer(load_policy_text({"p.yaml": BASE}))
    tables = {t.full_name: t for t in tables_from_policies(e.policy_set)}
    acc = effective_access(e, "carol", tables["main.s.t"])
    assert acc.privileges == ("select",)
    assert acc.columns == ("id", "email", "region")
    assert acc.masks == (("email", "hash", "pii"),)
    assert acc.row_filters == (("emea-rows", "permissive", "region = 'EMEA'"),)
    assert acc.decided_by == ("read", "emea-rows", "pii")


def test_diff_no_change_is_empty() -> None:
    assert _diff(BASE, BASE) == []


def test_diff_gaining_select_lists_the_user() -> None:
    new = BASE.replace("analysts: [alice, group:emea]", "analysts: [alice, bob, group:emea]")
    changes = _diff(BASE, new)
    assert ("bob", "gains SELECT", False) in changes
    assert all(u == "bob" for u, _, _ in changes)


def test_diff_removing_a_mask_on_a_tagged_column_is_flagged() -> None:
    new = BASE.replace("    mask: hash\n", "    mask: hash\n    except: [carol]\n")
    assert _diff(BASE, new) == [("carol", "mask hash removed from email", True)]


def test_diff_new_clear_tagged_column_is_flagged_and_masked_one_is_not() -> None:
    old = BASE.replace("columns: [id, email, region]", "columns: [id, region]")
    changes = _diff(old, BASE)
    assert ("alice", "column email newly visible (masked)", False) in changes
    unmasked = old.replace("tags: [pii]\n    mask: hash", "columns: [nothing]\n    mask: hash")
    widened = BASE.replace("tags: [pii]\n    mask: hash", "columns: [nothing]\n    mask: hash")
    assert ("alice", "column email newly visible", True) in _diff(unmasked, widened)


def test_diff_row_filter_changes() -> None:
    new = BASE.replace("region = 'EMEA'", "region IN ('EMEA', 'APAC')")
    assert _diff(BASE, new) == [
        (
            "carol",
            "row filter emea-rows changed: region = 'EMEA' -> region IN ('EMEA', 'APAC')",
            False,
        )
    ]
    assert _diff(new, BASE)[0][0] == "carol"


def test_diff_markdown_flags_pii() -> None:
    new = BASE.replace("    mask: hash\n", "    mask: hash\n    except: [carol]\n")
    md = diff_policies(
        load_policy_text({"p.yaml": BASE}), load_policy_text({"p.yaml": new})
    ).to_markdown()
    assert ":warning:" in md and "| carol | main.s.t | mask hash removed from email |" in md


def test_diff_between_git_revisions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "policies").mkdir(parents=True)
    (repo / "policies" / "p.yaml").write_text(BASE)

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=repo,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "base")
    (repo / "policies" / "p.yaml").write_text(
        BASE.replace("[alice, group:emea]", "[alice, bob, group:emea]")
    )
    git("commit", "-qam", "add bob")
    monkeypatch.chdir(repo)
    old = load_policies("HEAD~1", policy_dir="policies")
    new = load_policies("HEAD", policy_dir="policies")
    assert ("bob", "gains SELECT", False) in [
        (c.user, c.detail, c.flagged) for c in diff_policies(old, new).changes
    ]
    with pytest.raises(ValueError, match="neither a directory nor a git revision"):
        load_policies("no-such-rev", policy_dir="policies")


def test_reference_policy_tests_pass_offline() -> None:
    results = run_tests(REFERENCE, sorted((REFERENCE / "tests").glob("*.yaml")), spark=False)
    assert [r.message for r in results if r.status == "failed"] == []
    assert {r.status for r in results} == {"passed", "skipped"}


def test_a_wrong_expectation_fails_with_a_reason(tmp_path: Path) -> None:
    t = tmp_path / "t.yaml"
    t.write_text("""
tables:
  main.sales.orders: {columns: {id: int, region: string, is_test: boolean}}
cases:
  - name: wrong
    user: carol
    sql: SELECT * FROM main.sales.orders
    expect: {allowed: false, row_filters: {main.sales.orders: [emea-only]}}
""")
    [r] = run_tests(REFERENCE, [t], spark=False)
    assert r.status == "failed"
    assert "expected denied, got allowed" in r.message
    assert "expected ['emea-only'], got ['emea-only', 'no-test-orders']" in r.message


def test_cli_policy_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no lakegate.yaml here: tables come from the policies
    shutil.copytree(REFERENCE, tmp_path / "policies")
    assert main(["policy", "validate", "policies"]) == 0
    assert main(["policy", "explain", "--user", "bob", "main.sales.customers"]) == 0
    out = capsys.readouterr().out
    assert "bob (groups: analysts)" in out and "phone" not in out.split("columns")[1].split("\n")[0]
    assert main(["policy", "who-can-see", "main.sales.customers.phone"]) == 0
    out = capsys.readouterr().out
    assert "dana" in out and "clear" in out and "bob" not in out
    (tmp_path / "policies" / "broken.yaml").write_text("grants: [{principals: [x]}]\n")
    assert main(["policy", "validate", "policies"]) == 1
    assert main(["policy", "test", "policies"]) == 1  # a broken set fails its tests too
    assert "broken.yaml" in capsys.readouterr().err


def test_policy_set_for_review_loads_reference() -> None:
    assert load_policy_dir(REFERENCE).domains.keys() == {"sales", "hr", "marketing"}
