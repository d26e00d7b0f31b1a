"""Reviewing policies with the groups an identity provider sends (issue 37, item 6): validate
knows which groups a source can send, who-can-see and explain answer for a group's member,
and diff reports a provider group's change. No Spark, no provider: all offline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cli import main
from governance.config import Config, IdentityConfig, LdapConfig, OidcProvider, ScimConfig
from governance.errors import ConfigError
from governance.identity import GroupMapping
from governance.policy.analysis import (
    diff_policies,
    effective_access,
    groups_who_can_see,
    tables_from_policies,
)
from governance.policy.build import parse_policy_text
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import PolicyError, load_policy_text
from governance.policy.validate import validate_parsed
from governance.tools.policytests import PolicyTestError, load_suite, run_tests

ISSUER = "https://idp.example/realms/corp"

# kc-analysts -> analysts (mapping); data-eng is declared as sent (keep); scim sends hr
IDENTITY = IdentityConfig(
    providers=(
        OidcProvider(
            issuer=ISSUER,
            audience=("lakegate",),
            groups=GroupMapping((("kc-analysts", "analysts"),)),
            known_groups=("data-eng", "/Full/Path"),
        ),
    ),
    scim=ScimConfig(known_groups=("HR",)),
    ldap=LdapConfig(
        "ldaps://ldap.example",
        "ou=groups,dc=example",
        groups=GroupMapping((), "drop"),
        known_groups=("finance",),
    ),
)

POLICY = """
groups:
  admins: [root]
grants:
  - id: read
    principals: [group:{principal}]
    privileges: [select]
    on: main.s.t
    columns: [id, email, region]
"""


def _problems(text: str, identity: IdentityConfig | None = IDENTITY) -> list[tuple[str, str]]:
    groups = None if identity is None else identity.provider_groups()
    parsed = parse_policy_text({"p.yaml": text})
    found = parsed.problems + validate_parsed(parsed, None, groups)
    return [(p.severity, p.message) for p in found]


def test_provider_groups_are_mapping_targets_and_known_groups_through_the_mapping() -> None:
    assert IDENTITY.provider_groups() == {
        "analysts": ISSUER,  # a mapping entry's target
        "data-eng": ISSUER,  # known, kept as is
        "hr": "scim",  # known, kept, canonical spelling
        # /Full/Path is no valid group name (kept names must be); ldap drops unmapped names
    }
    assert IdentityConfig().provider_groups() is None  # no source: today's rule


@pytest.mark.parametrize(
    ("principal", "expected"),
    [
        ("admins", []),  # defined under groups:
        ("analysts", []),  # a mapping target
        ("data-eng", []),  # a provider's known_groups
        ("hr", []),  # scim's known_groups
        (
            "finance",  # ldap drops unmapped names: finance never arrives
            [
                (
                    "warning",
                    "group 'finance' is named by grant 'read' but no identity source sends "
                    "it and groups: does not define it",
                )
            ],
        ),
    ],
)
def test_a_grant_naming_a_group_no_source_sends_is_a_warning(
    principal: str, expected: list[tuple[str, str]]
) -> None:
    assert _problems(POLICY.format(principal=principal)) == expected


def test_without_identity_sources_an_undefined_group_stays_an_error() -> None:
    assert _problems(POLICY.format(principal="analysts"), None) == [
        ("error", "grant 'read' names group:analysts, which is not defined")
    ]


RESTRICTING = {
    "row filter principals": """
row_filters:
  - {id: f, on: main.s.t, principals: [group:ghost], where: "region = 'EU'"}
""",
    "column mask principals": """
column_masks:
  - {id: m, on: main.s.t, columns: [email], principals: [group:ghost], mask: hash}
""",
    "nested membership": """
groups:
  analysts: [group:ghost]
""",
    "is_member in a filter": """
row_filters:
  - {id: f, on: main.s.t, principals: ['*'], where: "is_member('ghost') OR region = 'EU'"}
""",
    "a deny grant": """
grants:
  - {id: d, effect: deny, principals: [group:ghost], privileges: [select], on: main.s.t}
""",
}


@pytest.mark.parametrize("where", sorted(RESTRICTING))
def test_an_unknown_group_that_decides_who_is_restricted_stays_an_error(where: str) -> None:
    severities = {s for s, _ in _problems(RESTRICTING[where])}
    assert severities == {"error"}


def test_an_unknown_group_in_a_mask_except_list_is_a_warning() -> None:
    text = """
column_masks:
  - {id: m, on: main.s.t, columns: [email], mask: hash, except: [group:ghost]}
"""
    assert [s for s, _ in _problems(text)] == ["warning"]


def test_a_restricting_rule_may_name_a_group_a_source_sends() -> None:
    text = RESTRICTING["row filter principals"].replace("ghost", "analysts")
    text += (
        RESTRICTING["is_member in a filter"]
        .replace("ghost", "data-eng")
        .replace("id: f", "id: g")
        .replace("row_filters:\n", "")
    )
    assert _problems(text) == []


def test_the_loader_accepts_provider_groups_only_when_told_them() -> None:
    text = POLICY.format(principal="analysts")
    with pytest.raises(PolicyError, match="group:analysts, which is not defined"):
        load_policy_text({"p.yaml": text})
    ps = load_policy_text({"p.yaml": text}, IDENTITY.provider_groups())
    assert [g.id for g in ps.grants] == ["read"]


REVIEW = """
groups:
  stewards: [dana]
grants:
  - {id: read, principals: [group:analysts, group:stewards], privileges: [select], on: main.s.t,
     columns: [id, email, region]}
row_filters:
  - {id: eu, on: main.s.t, principals: [group:analysts], where: "region = 'EU'"}
column_masks:
  - {id: pii, on: main.s.t, columns: [email], mask: hash, except: [group:stewards]}
"""
PROVIDED = {"analysts": ISSUER, "data-eng": ISSUER}


def _review(text: str = REVIEW) -> tuple[PolicyEnforcer, dict]:
    e = PolicyEnforcer(load_policy_text({"p.yaml": text}, PROVIDED))
    return e, {t.full_name: t for t in tables_from_policies(e.policy_set)}


def test_who_can_see_lists_groups_a_provider_sends_with_a_members_access() -> None:
    e, tables = _review()
    rows = [
        (g, src, acc.masks, [f[0] for f in acc.row_filters])
        for g, src, acc in groups_who_can_see(e, tables["main.s.t"], None, PROVIDED)
    ]
    assert rows == [
        ("analysts", "provider", (("email", "hash", "pii"),), ["eu"]),
        ("stewards", "yaml", (), []),
    ]  # data-eng is sent but reads nothing: not listed


def test_who_can_see_a_column_lists_only_groups_whose_member_sees_it() -> None:
    e, tables = _review(REVIEW.replace("columns: [id, email, region]}", "columns: [id]}"))
    assert groups_who_can_see(e, tables["main.s.t"], "email", PROVIDED) == []


@pytest.mark.parametrize(
    ("groups", "privileges", "filters", "masked"),
    [
        (frozenset(), (), [], []),
        (frozenset({"analysts"}), ("select",), ["eu"], ["email"]),
        (frozenset({"stewards"}), ("select",), [], []),
        (frozenset({"analysts", "stewards"}), ("select",), ["eu"], []),
    ],
)
def test_explain_with_token_groups_is_what_the_member_gets(
    groups: frozenset[str], privileges: tuple[str, ...], filters: list[str], masked: list[str]
) -> None:
    e, tables = _review()
    acc = effective_access(e, "alice", tables["main.s.t"], groups)
    assert acc.privileges == privileges
    assert [f[0] for f in acc.row_filters] == filters
    assert [m[0] for m in acc.masks] == masked


def test_diff_reports_a_provider_groups_members_change() -> None:
    old = load_policy_text({"p.yaml": REVIEW}, PROVIDED)
    new = load_policy_text(
        {"p.yaml": REVIEW.replace("where: \"region = 'EU'\"", "where: \"region <> 'XX'\"")},
        PROVIDED,
    )
    d = diff_policies(old, new, None, sorted(PROVIDED))
    assert [(c.user, c.detail, c.widens) for c in d.changes] == [
        ("group:analysts", "row filter eu changed: region = 'EU' -> region <> 'XX'", True)
    ]
    assert "| group:analysts | main.s.t | row filter eu changed" in d.to_markdown()
    # without the provider's groups the change is invisible: nobody named is an analyst
    assert diff_policies(old, new).changes == []


def _setup(tmp_path: Path, identity: str, policy: str) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(policy)
    (tmp_path / "lakegate.yaml").write_text(
        f"warehouse: wh\ncatalog: cat.db\npolicies: policies\naudit: audit\n{identity}"
    )


IDENTITY_YAML = f"""identity:
  providers:
    - issuer: {ISSUER}
      audience: lakegate
      groups: {{map: {{kc-analysts: analysts}}}}
      known_groups: [data-eng]
"""


def test_cli_validate_warns_with_file_and_line_and_strict_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _setup(tmp_path, IDENTITY_YAML, POLICY.format(principal="ghost"))
    assert main(["policy", "validate", "policies"]) == 0
    out = capsys.readouterr().out
    assert "policies/p.yaml:6:" in out and "warning[unknown-group]" in out
    assert "no identity source sends it" in out and "0 error(s), 1 warning(s)" in out
    assert main(["policy", "validate", "--strict", "policies"]) == 1


def test_cli_validate_without_identity_section_keeps_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _setup(tmp_path, "", POLICY.format(principal="analysts"))
    assert main(["policy", "validate", "policies"]) == 1
    assert "error[unknown-group]" in capsys.readouterr().out


def test_cli_explain_group_and_who_can_see_from_provider(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _setup(tmp_path, IDENTITY_YAML, REVIEW)
    assert main(["policy", "who-can-see", "main.s.t"]) == 0
    out = capsys.readouterr().out
    assert "dana" in out
    assert "group:analysts (from provider) 3 columns, 1 masked, rows filtered by eu" in out
    assert main(["policy", "explain", "-u", "alice", "-g", "Analysts", "main.s.t"]) == 0
    out = capsys.readouterr().out
    assert "alice (groups: analysts) on main.s.t" in out and "row filter : eu" in out
    assert main(["policy", "explain", "-o", "json", "-u", "alice", "main.s.t"]) == 0
    assert json.loads(capsys.readouterr().out)["privileges"] == []
    assert main(["policy", "explain", "-u", "alice", "-g", "bad name!", "main.s.t"]) == 2


def test_known_groups_must_be_a_list_of_names(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(IDENTITY_YAML.replace("[data-eng]", "{data-eng: 1}"))
    with pytest.raises(ConfigError, match="known_groups' must list the provider's group names"):
        Config.load(f)


CASES = """
tables:
  main.s.t:
    columns: {id: int, email: string, region: string}
    rows: [[1, a@x, EU], [2, b@x, US]]
cases:
  - name: no token groups, no access
    user: alice
    sql: SELECT id FROM main.s.t
    expect: {allowed: false}
  - name: an analyst by token sees EU rows, email hashed
    user: alice
    groups: [Analysts]
    sql: SELECT id, email FROM main.s.t
    expect: {allowed: true, row_filters: {main.s.t: [eu]}, masked: {main.s.t.email: hash}}
  - name: a steward by token sees email in clear
    user: alice
    groups: [stewards]
    sql: SELECT id, email FROM main.s.t
    expect: {row_filters: {main.s.t: []}, masked: {main.s.t.email: ""}}
"""


def _suite(tmp_path: Path, cases: str = CASES) -> tuple[Path, list[Path]]:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(REVIEW)
    t = tmp_path / "t.yaml"
    t.write_text(cases)
    return policies, [t]


def test_policy_test_cases_decide_with_the_token_groups_they_state(tmp_path: Path) -> None:
    policies, files = _suite(tmp_path)
    identity = IdentityConfig(
        providers=(replace(IDENTITY.providers[0], known_groups=("data-eng",)),)
    )
    results = run_tests(policies, files, spark=False, identity=identity)
    assert [(r.status, r.message) for r in results] == [("passed", "")] * 3


def test_policy_tests_without_the_identity_section_refuse_provider_only_groups(
    tmp_path: Path,
) -> None:
    policies, files = _suite(tmp_path)
    with pytest.raises(PolicyError, match="group:analysts, which is not defined"):
        run_tests(policies, files, spark=False)


@pytest.mark.parametrize(
    ("groups", "message"),
    [("analysts", "groups must be a list of names"), ("[bad name!]", "invalid group name")],
)
def test_a_policy_test_case_with_bad_groups_is_refused(
    tmp_path: Path, groups: str, message: str
) -> None:
    _, files = _suite(tmp_path, f"cases: [{{user: a, sql: SELECT 1, groups: {groups}}}]\n")
    with pytest.raises(PolicyTestError, match=message):
        load_suite(files)
