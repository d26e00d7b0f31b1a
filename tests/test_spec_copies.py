"""The repository's copies of the binding contracts (docs/spec/) keep the contract word for
word: extensions are added after it, never edited into it. Checked against ../shared/spec
where a checkout has it (a clone for users does not: then there is nothing to compare)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "spec"
SPECS = ("policy-format.md", "audit-format.md")


@pytest.mark.parametrize("name", SPECS)
def test_repository_spec_starts_with_the_binding_contract_unchanged(name: str) -> None:
    binding = SHARED / name
    if not binding.is_file():
        pytest.skip("no ../shared/spec beside this checkout")
    ours = (ROOT / "docs" / "spec" / name).read_text(encoding="utf-8")
    assert ours.startswith(binding.read_text(encoding="utf-8"))
