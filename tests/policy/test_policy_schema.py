"""The editor-facing JSON Schema and the pre-commit hook agree with the loader.

The schema is what people see while typing; the loader is what CI and the server enforce.
If they drift, editors approve files the validator refuses (or the reverse), so these tests
pin the schema's keys, enums and name patterns to the loader's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from governance.policy.loader import load_policy_dir
from governance.policy.model import APPLY_TAG, EFFECTS, FILTER_KINDS, MASKS, PRIVILEGES
from governance.policy.source import (
    COLUMN_MASK_KEYS,
    DOMAIN_KEYS,
    GRANT_KEYS,
    ROW_FILTER_KEYS,
    TOP_KEYS,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "policies" / "schema.json"
FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
DEFS: dict[str, Any] = SCHEMA["$defs"]


def pattern(name: str) -> re.Pattern[str]:
    return re.compile(DEFS[name]["pattern"])


class Yaml12Loader(yaml.SafeLoader):
    """Booleans as YAML 1.2 (and editors) read them: `on:` is a key, not True."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    Yaml12Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), _first
    )


def yaml_docs(*dirs: str) -> list[tuple[str, Any]]:
    out = []
    for d in dirs:
        for path in sorted((FIXTURES / d).rglob("*.y*ml")):
            if "tests" not in path.relative_to(FIXTURES / d).parts:
                out.append((path.name, yaml.load(path.read_text(), Loader=Yaml12Loader)))
    return out


def test_schema_is_draft_2020_12_and_closed_like_the_loader() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["additionalProperties"] is False
    assert set(SCHEMA["properties"]) == set(TOP_KEYS)
    for name, keys in (
        ("domain", DOMAIN_KEYS),
        ("grant", GRANT_KEYS),
        ("rowFilter", ROW_FILTER_KEYS),
        ("columnMask", COLUMN_MASK_KEYS),
    ):
        assert DEFS[name]["additionalProperties"] is False, name
        assert set(DEFS[name]["properties"]) == set(keys), name


def test_schema_enums_match_the_model() -> None:
    grant = DEFS["grant"]["properties"]
    privileges = {p.lower() for p in grant["privileges"]["items"]["enum"]}
    assert privileges == {*PRIVILEGES, APPLY_TAG}
    assert tuple(grant["effect"]["enum"]) == EFFECTS
    assert tuple(DEFS["rowFilter"]["properties"]["kind"]["enum"]) == FILTER_KINDS
    mask_enum = DEFS["columnMask"]["properties"]["mask"]["anyOf"][0]["enum"]
    assert tuple(mask_enum) == MASKS


def test_schema_requires_what_the_loader_requires() -> None:
    assert DEFS["grant"]["required"] == ["principals", "privileges", "on"]
    assert DEFS["rowFilter"]["required"] == ["id", "on", "principals", "where"]
    assert DEFS["columnMask"]["required"] == ["id", "on", "mask"]


@pytest.mark.parametrize(
    ("definition", "good", "bad"),
    [
        (
            "tablePattern",
            ["main.sales.*", "*.*.*", "main.`sales`.orders"],
            ["main.sales", "main.sales_*.t", "main.sales.t.c", "main..t"],
        ),
        ("tagTarget", ["main.sales.customers", "main.*.*.email"], ["main.sales", "a.b.c.d.e"]),
        (
            "principal",
            ["*", "alice", "user:bob", "group:pii-readers", "a@b.com"],
            ["role:x", "a,b", "a|b", "two words", ""],
        ),
        ("member", ["alice", "group:emea"], ["*", "role:x"]),
        ("schemaName", ["main.sales"], ["main.*", "main", "a.b.c"]),
        ("ruleId", ["hide-pii", "p/a.yaml:3"], ["domain:sales", "a b", ""]),
    ],
)
def test_schema_name_patterns_agree_with_the_loader(
    definition: str, good: list[str], bad: list[str]
) -> None:
    regex = pattern(definition)
    assert [g for g in good if not regex.search(g)] == []
    assert [b for b in bad if regex.search(b)] == []


def test_reference_example_values_match_the_schema_patterns() -> None:
    ((_, doc),) = yaml_docs("reference")
    assert load_policy_dir(FIXTURES / "reference").grants  # and the loader takes it
    table = pattern("tablePattern")
    for section in ("grants", "row_filters", "column_masks"):
        for rule in doc[section]:
            assert table.match(rule["on"]), rule
            for p in rule.get("principals", []) + rule.get("except", []):
                assert pattern("principal").match(p), p
    for target in doc["tags"]:
        assert pattern("tagTarget").match(target)


def test_reference_and_fixtures_validate_against_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    for name, doc in yaml_docs("reference", "valid"):
        errors = [e.message for e in validator.iter_errors(doc)]
        assert errors == [], name
    broken = yaml.load(
        "grants:\n  - {principal: [alice], privileges: [read], on: a.b}\n", Loader=Yaml12Loader
    )
    assert len(list(validator.iter_errors(broken))) >= 3


def test_pre_commit_hook_runs_the_validator_once_per_commit() -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "lakegate-policy-validate"
    assert hook["entry"] == "lakegate policy validate"
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    assert files.search("policies/grants.yaml") and files.search("policies/a.yml")
    assert not files.search("policies/schema.json")
