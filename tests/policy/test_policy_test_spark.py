"""`lakegate policy test --spark` checks rows on real Delta tables built from the fixtures."""

from __future__ import annotations

from pathlib import Path

from governance.config import IdentityConfig, OidcProvider
from governance.identity import GroupMapping
from governance.tools.policytests import run_tests

REFERENCE = Path(__file__).resolve().parents[2] / "policies"


def test_reference_policy_tests_pass_on_spark(spark) -> None:  # reuses the shared session
    results = run_tests(REFERENCE, sorted((REFERENCE / "tests").glob("*.yaml")), spark=True)
    assert [(r.case.name, r.message) for r in results if r.status != "passed"] == []
    assert len(results) == 12


def test_a_wrong_row_expectation_fails_on_spark(spark, tmp_path: Path) -> None:
    t = tmp_path / "t.yaml"
    t.write_text("""
tables:
  main.sales.orders:
    columns: {id: int, region: string, is_test: boolean}
    rows: [[1, EMEA, false], [2, AMER, false]]
cases:
  - name: carol sees AMER (wrong on purpose)
    user: carol
    sql: SELECT id FROM main.sales.orders
    expect: {rows: [[2]]}
""")
    [r] = run_tests(REFERENCE, [t], spark=True)
    assert r.status == "failed"
    assert r.message == "rows: expected [[2]], got [[1]]"


def test_token_groups_of_a_case_decide_its_rows_on_spark(spark, tmp_path: Path) -> None:
    """A group only the identity provider sends (no `groups:` entry) filters real rows."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text("""
grants:
  - {id: read, principals: [group:analysts], privileges: [select], on: main.s.t}
row_filters:
  - {id: eu, on: main.s.t, principals: [group:analysts], where: "region = 'EU'"}
""")
    t = tmp_path / "t.yaml"
    t.write_text("""
tables:
  main.s.t:
    columns: {id: int, region: string}
    rows: [[1, EU], [2, US]]
cases:
  - {name: an analyst by token, user: alice, groups: [analysts], sql: SELECT id FROM main.s.t,
     expect: {rows: [[1]]}}
  - {name: no token groups, user: alice, sql: SELECT id FROM main.s.t, expect: {allowed: false}}
""")
    identity = IdentityConfig(
        providers=(
            OidcProvider(
                "https://idp.example/realms/corp",
                ("lakegate",),
                groups=GroupMapping((("kc-analysts", "analysts"),)),
            ),
        )
    )
    results = run_tests(policies, [t], spark=True, identity=identity)
    assert [(r.status, r.message) for r in results] == [("passed", ""), ("passed", "")]
