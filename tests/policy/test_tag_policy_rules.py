"""Tag-driven policies (`match_columns`) without Spark: validation with file:line, the JSON
Schema, binding on the sqlglot tree, explain and diff, and v1 files keeping their meaning."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from catalog.model import ColumnInfo, TableInfo
from cli import main
from governance.policy.analysis import diff_policies, effective_access
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir, load_policy_text
from governance.policy.model import ColumnMatch, RowFilter
from governance.policy.tags import bind_filter, split_tags
from governance.policy.validate import validate_policy_text

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "policies" / "schema.json").read_text())

BASE = """\
groups:
  emea: [carol]
tags:
  main.s.orders.region: [region]
  main.s.orders.email: [pii]
grants:
  - {id: read, principals: [carol, mia], privileges: [select], on: main.s.*}
"""
CASE = "p/case.yaml"


def problems(case: str) -> list[tuple[str, int]]:
    found = validate_policy_text({"p/base.yaml": BASE, CASE: textwrap.dedent(case)})
    return sorted((p.code, p.line) for p in found if p.file == CASE and p.severity == "error")


def line_of(text: str, marker: str) -> int:
    lines = textwrap.dedent(text).splitlines()
    return next(n for n, line in enumerate(lines, start=1) if marker in line)


FILTER = """\
row_filters:
  - id: by-tag
    on: main.*.*
    principals: [group:emea]
    match_columns: {match}
    where: "{where}"
"""


def tag_filter(match: str, where: str = "r = 'EMEA'") -> str:
    return FILTER.replace("{match}", match).replace("{where}", where)


def tag_mask(fields: str) -> str:
    return f"column_masks:\n  - {{id: m, on: main.*.*, {fields}}}\n"


@pytest.mark.parametrize(
    ("case", "code", "marker"),
    [
        (tag_filter("[region]"), "wrong-type", "match_columns"),
        (tag_filter("{tag: region, as: r, alias: x}"), "unknown-key", "match_columns"),
        (tag_filter("{tags: region, as: r}"), "unknown-key", "match_columns"),
        (tag_filter("{as: r}"), "missing-key", "match_columns"),
        (tag_filter("{tag: region}"), "missing-key", "match_columns"),
        (tag_filter("{tag: regi\u043en, as: r}"), "bad-tag", "match_columns"),
        (tag_filter("{tag: 'two words', as: r}"), "bad-tag", "match_columns"),
        (tag_filter("{tag: region, as: 1r}"), "bad-binding", "match_columns"),
        (tag_filter("{tag: region, as: r}", "region = 'EMEA'"), "binding-unused", "where"),
        (tag_mask("match_columns: {tag: pii}, tags: [pii], mask: hash"), "ambiguous-match", "id"),
        (tag_mask("match_columns: {tag: pii}, columns: [x], mask: hash"), "ambiguous-match", "id"),
        (tag_mask("match_columns: {tag: pii, as: p}, mask: hash"), "binding-not-custom", "id"),
        (
            tag_mask('match_columns: {tag: pii, as: p}, mask: custom, expression: "upper({col})"'),
            "binding-unused",
            "id",
        ),
        (
            tag_mask(
                "match_columns: {tag: pii, as: p}, mask: custom, "
                'expression: "concat(input_file_name(), p)"'
            ),
            "forbidden-function",
            "id",
        ),
    ],
)
def test_tag_rule_problems_name_file_and_line(case: str, code: str, marker: str) -> None:
    assert problems(case) == [(code, line_of(case, marker))]


@pytest.mark.parametrize(
    "case",
    [
        tag_filter("{tag: Region, as: R}", "r = 'EMEA' AND is_member('emea')"),
        tag_mask("match_columns: {tag: pii}, mask: hash"),
        tag_mask('match_columns: {tag: pii, as: p}, mask: custom, expression: "right(p, 2)"'),
        tag_mask('match_columns: {tag: pii}, mask: custom, expression: "right({col}, 2)"'),
    ],
)
def test_well_formed_tag_rules_validate_clean(case: str) -> None:
    assert problems(case) == []


def test_tag_names_and_bindings_are_lower_cased() -> None:
    ps = load_policy_text({"p.yaml": BASE + tag_filter("{tag: Region, as: R}", "R = 'EMEA'")})
    assert ps.row_filters[0].match == ColumnMatch("region", "r")


def test_v1_file_parses_identically() -> None:
    """No rule of the reference policies is tag-driven, and none changes when read again."""
    ps = load_policy_dir(ROOT / "policies")
    rules = [*ps.row_filters, *ps.column_masks]
    assert rules and all(r.match is None for r in rules)
    assert [dataclasses.replace(r, match=None) for r in rules] == rules


# binding on the tree -----------------------------------------------------------------------


def bound(where: str, columns: list[str], name: str = "r") -> str | None:
    f = RowFilter("f", None, (), where, match=ColumnMatch("region", name))  # type: ignore[arg-type]
    out = bind_filter(f, columns)
    return None if out is None else out.where


@pytest.mark.parametrize(
    ("where", "columns", "expected"),
    [
        ("r = 'EMEA'", ["region"], "`region` = 'EMEA'"),
        ("r = 'EMEA'", ["ship", "bill"], "(`ship` = 'EMEA') AND (`bill` = 'EMEA')"),
        # a column name that is not a plain identifier stays one quoted column
        ("r = 'EMEA'", ["we`ird col"], "`we``ird col` = 'EMEA'"),
        # the bound name shadows a real column `r`; a qualified or longer name is untouched
        ("r = 'x' OR t.r = 'y' OR rr = 'z'", ["zone"], "`zone` = 'x' OR t.r = 'y' OR rr = 'z'"),
        # text inside a string literal is never a column
        ("r = 'r'", ["zone"], "`zone` = 'r'"),
    ],
)
def test_binding_replaces_the_name_on_the_tree(where, columns, expected) -> None:
    assert bound(where, columns) == expected


def test_table_without_a_tagged_column_gets_no_tag_filter() -> None:
    assert bound("r = 'EMEA'", []) is None


def test_delta_tag_values_follow_the_identifier_rules() -> None:
    assert split_tags(" Region, PII ,,regi\u043en") == frozenset({"region", "pii"})


# reading Delta tags ------------------------------------------------------------------------


def test_an_append_reuses_the_tags_without_reopening_the_table(tmp_path: Path, monkeypatch) -> None:
    """A commit without a metaData action cannot change tags: one small JSON read, no delta-rs
    open; a table that is not Delta at all has no Delta tags and is not refused."""
    pa = pytest.importorskip("pyarrow")
    from deltalake import write_deltalake

    from governance.policy import tags

    rows = pa.table({"id": [1, 2]})
    write_deltalake(str(tmp_path / "t"), rows)
    info = dataclasses.replace(TABLE, location=str(tmp_path / "t"))
    first_key, _ = tags.delta_tags(info)
    write_deltalake(str(tmp_path / "t"), rows, mode="append")
    opened: list[int] = []
    real = tags._read_delta
    monkeypatch.setattr(tags, "_read_delta", lambda root, v: opened.append(v) or real(root, v))
    key, found = tags.delta_tags(info)
    # keyed (location, the Delta table's own id, version): same table, next version
    assert (key[1], key[2], found, opened) == (first_key[1], first_key[2] + 1, {}, [])
    nowhere = dataclasses.replace(TABLE, location=str(tmp_path / "not-a-table"))
    assert tags.delta_tags(nowhere) == ((str(tmp_path / "not-a-table"), None), {})


# explain and diff ----------------------------------------------------------------------


TABLE = TableInfo(
    "main",
    "s",
    "orders",
    "",
    tuple(ColumnInfo(n, "string", position=i) for i, n in enumerate(("id", "region", "email"))),
)
TAG_RULES = """\
row_filters:
  - id: region-by-tag
    on: main.*.*
    match_columns: {tag: region, as: r}
    principals: [group:emea]
    where: "r = 'EMEA'"
column_masks:
  - {id: pii-by-tag, on: main.*.*, match_columns: {tag: pii}, mask: hash, principals: [mia]}
"""


def test_explain_shows_the_column_and_tag_a_rule_applies_through() -> None:
    e = PolicyEnforcer(load_policy_text({"p.yaml": BASE + TAG_RULES}))
    carol = effective_access(e, "carol", TABLE)
    assert carol.row_filters == (("region-by-tag", "permissive", "`region` = 'EMEA'"),)
    assert carol.tag_matches == (("region-by-tag", "region", "region"),)
    mia = effective_access(e, "mia", TABLE)
    assert mia.masks == (("email", "hash", "pii-by-tag"),)
    assert mia.tag_matches == (("pii-by-tag", "email", "pii"),)


def test_explain_cli_prints_tag_matches(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "p.yaml").write_text(BASE + TAG_RULES)
    monkeypatch.chdir(tmp_path)
    code = main(["policy", "explain", "--user", "carol", "--dir", str(tmp_path), "main.s.orders"])
    out = capsys.readouterr().out
    assert code == 0
    assert "by tag     : region-by-tag applies through column region (tag region)" in out


def test_diff_shows_tag_driven_changes_and_the_tables_affected() -> None:
    old = load_policy_text({"p.yaml": BASE})
    new = load_policy_text({"p.yaml": BASE + TAG_RULES})
    d = diff_policies(old, new)
    details = {(c.user, c.table, c.detail) for c in d.changes}
    assert (
        "carol",
        "main.s.orders",
        "row filter region-by-tag added: `region` = 'EMEA'",
    ) in details
    assert ("mia", "main.s.orders", "mask hash added on email") in details
    assert "Tables affected: main.s.orders" in d.to_markdown()
    retagged = load_policy_text(
        {"p.yaml": BASE.replace("orders.region: [region]", "orders.id: [region]") + TAG_RULES}
    )
    (change,) = [c for c in diff_policies(new, retagged).changes if c.user == "carol"]
    assert change.detail == ("row filter region-by-tag changed: `region` = 'EMEA' -> `id` = 'EMEA'")


# JSON Schema -------------------------------------------------------------------------------


class Yaml12Loader(yaml.SafeLoader):
    """Keys as editors (YAML 1.2) read them: `on:` is a key, not True."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def schema_errors(doc_text: str) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    doc = yaml.load(doc_text, Loader=Yaml12Loader)
    return [e.message for e in validator.iter_errors(doc)]


@pytest.mark.parametrize(
    "doc",
    [
        TAG_RULES,
        tag_mask('match_columns: {tag: pii, as: p}, mask: custom, expression: "right(p, 2)"'),
        tag_mask('tags: [pii], mask: custom, expression: "right({col}, 2)"'),  # v1 still fine
    ],
)
def test_schema_accepts_tag_driven_rules(doc: str) -> None:
    assert schema_errors(doc) == []


@pytest.mark.parametrize(
    "doc",
    [
        tag_filter("{tag: region}"),  # a filter needs `as`
        tag_filter("{tag: region, as: r, alias: x}"),
        tag_filter("{tag: region, as: 'R-1'}"),
        tag_filter("[region]"),
        tag_mask("match_columns: {tag: pii}, tags: [pii], mask: hash"),
        tag_mask("match_columns: {tag: pii, as: p}, mask: hash"),
        tag_mask('tags: [pii], mask: custom, expression: "right(p, 2)"'),  # v1 needs {col}
        tag_mask("mask: hash"),  # still: a mask must select columns
    ],
)
def test_schema_rejects_junk_tag_rules(doc: str) -> None:
    assert schema_errors(doc) != []
