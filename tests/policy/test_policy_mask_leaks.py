"""`policy validate` warns where a custom mask reads a column denied to some of its users."""

from __future__ import annotations

import textwrap

import pytest

from governance.policy.validate import validate_policy_text

GROUPS = "groups:\n  analysts: [alice, bob]\n"


def _warnings(case: str) -> list:
    files = {"p/base.yaml": GROUPS, "p/case.yaml": textwrap.dedent(case)}
    return [p for p in validate_policy_text(files) if p.code == "mask-reads-denied-column"]


def _case(
    deny_principals: str,
    mask_principals: str,
    mask_on: str = "main.sales.orders",
    deny_on: str = "main.sales.orders",
    extra: str = "",
) -> str:
    return f"""
    grants:
      - id: no-custkey
        principals: {deny_principals}
        effect: deny
        privileges: [select]
        on: {deny_on}
        columns: [custkey]
    column_masks:
      - id: m-orderkey
        on: {mask_on}
        columns: [orderkey]
        mask: custom
        expression: "{{col}} * 0 + custkey"
        principals: {mask_principals}{extra}
    """


@pytest.mark.parametrize(
    ("deny", "mask", "mask_on"),
    [
        ("[alice]", "[alice]", "main.sales.orders"),
        ("[group:analysts]", "[bob]", "main.sales.orders"),
        ('["*"]', "[group:analysts]", "main.*.*"),
        ("[bob]", '["*"]', "main.sales.orders"),
    ],
)
def test_mask_reading_column_denied_to_a_shared_user_is_a_warning(
    deny: str,
    mask: str,
    mask_on: str,
) -> None:
    found = _warnings(_case(deny, mask, mask_on))
    assert len(found) == 1 and found[0].severity == "warning"
    assert "m-orderkey" in found[0].message and "no-custkey" in found[0].message


@pytest.mark.parametrize(
    ("deny", "mask", "deny_on", "extra"),
    [
        ("[alice]", "[bob]", "main.sales.orders", ""),
        ("[alice]", "[alice]", "main.sales.lineitem", ""),
        ("[bob]", '["*"]', "main.sales.orders", "\n        except: [bob]"),
    ],
)
def test_mask_and_deny_provably_disjoint_is_no_warning(
    deny: str,
    mask: str,
    deny_on: str,
    extra: str,
) -> None:
    assert _warnings(_case(deny, mask, deny_on=deny_on, extra=extra)) == []
