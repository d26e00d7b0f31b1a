"""Whole policy directories: the valid fixture, its broken copy, and one-edit breakages."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from governance.policy.loader import PolicyError, load_policy_dir
from governance.policy.validate import validate_policy_dir

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("name", ["reference", "valid"])
def test_valid_fixture_dirs_have_no_problems(name: str) -> None:
    assert validate_policy_dir(FIXTURES / name) == []


def test_broken_copy_reports_every_error_with_file_and_line() -> None:
    found = [(p.file, p.line, p.code) for p in validate_policy_dir(FIXTURES / "broken")]
    assert found == [
        ("broken/central.yaml", 5, "group-cycle"),
        ("broken/central.yaml", 39, "unknown-key"),
        ("broken/central.yaml", 50, "unknown-group"),
        ("broken/finance/finance.yml", 9, "mask-overlap"),
        ("broken/finance/finance.yml", 13, "custom-mask-no-col"),
        ("broken/sales/sales.yaml", 8, "outside-domain"),
        ("broken/sales/sales.yaml", 14, "filter-reads-path"),
    ]


def test_broken_copy_is_refused_as_a_whole() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(FIXTURES / "broken")
    assert len(str(caught.value).splitlines()) == 7


# (file, text to replace, replacement, expected code, 1-based line of the problem)
EDITS = [
    ("central.yaml", "privileges: [SELECT]", "privileges: [SELECT, drop]", "unknown-privilege", 39),
    ("central.yaml", "mask: hash", "mask: sha256", "unknown-mask", 47),
    (
        "central.yaml",
        "schemas: [main.sales]",
        "schemas: [main.sales, main.finance]",
        "schema-in-two-domains",
        20,
    ),
    ("sales/sales.yaml", "domain: sales", "domain: marketing", "unknown-domain", 2),
    ("sales/sales.yaml", "on: main.sales.orders", "on: main.finance.ledger", "outside-domain", 12),
    ("sales/sales.yaml", "current_user()", "current_user('erin')", "identity-arity", 19),
    ("sales/sales.yaml", "id: emea-only", "id: sales-owners-manage", "duplicate-id", 11),
    ("sales/sales.yaml", "priority: 10", "priority: 0", "mask-overlap", 24),
    ("finance/finance.yml", "{col}, 4))", "{col}, 4)) AS x", "not-one-expression", 13),
    (
        "finance/finance.yml",
        "except: [group:finance-owners]",
        "exempt: [group:finance-owners]",
        "unknown-key",
        15,
    ),
]


@pytest.mark.parametrize(("file", "old", "new", "code", "line"), EDITS)
def test_one_edit_to_the_valid_set_is_caught(
    tmp_path: Path, file: str, old: str, new: str, code: str, line: int
) -> None:
    root = tmp_path / "policies"
    shutil.copytree(FIXTURES / "valid", root)
    path = root / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(root)
    found = [(p.file, p.line, p.code) for p in caught.value.errors]
    assert found == [(f"policies/{file}", line, code)]
