"""Mapping-table policies in the review tools (issue 15, item 1): which subqueries a policy
may use, the catalog and cycle checks of `lakegate policy validate`, and `policy explain` /
`policy diff` naming the mapping tables a decision depends on. No Spark."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cli import main
from governance.policy.analysis import diff_policies, effective_access, tables_from_policies
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.expressions import check_filter_expression, check_mask_expression
from governance.policy.loader import load_policy_text
from governance.policy.validate import validate_policy_dir, validate_policy_text

IN_FORM = "region IN (SELECT region FROM main.acl.user_regions WHERE user_name = current_user())"
HEAD = """\
groups:
  analysts: [alice]
grants:
  - id: read
    principals: [group:analysts]
    privileges: [select]
    on: main.s.*
"""


@pytest.mark.parametrize(
    "where",
    [
        IN_FORM,
        "EXISTS (SELECT 1 FROM main.acl.user_regions u WHERE u.user_name = current_user() "
        "AND u.region = region)",
        "amount <= (SELECT max(limit_amount) FROM main.acl.limits WHERE user_name = "
        "current_user())",
        "region IN (SELECT region FROM main.acl.a UNION SELECT region FROM main.acl.b)",
        "region IN (SELECT region FROM main.acl.a WHERE is_member('analysts'))",
    ],
)
def test_mapping_subquery_shapes_are_accepted(where: str) -> None:
    assert check_filter_expression(where, {"analysts"}) == []


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("region IN (SELECT region FROM acl.user_regions)", "mapping-table-name"),
        ("region IN (SELECT region FROM delta.`/wh/acl/user_regions`)", "filter-reads-path"),
        ("region IN (SELECT region FROM parquet.`/etc`)", "filter-reads-path"),
        ("region IN (SELECT id FROM range(10))", "filter-table-function"),
        ("region IN (SELECT region FROM (SELECT * FROM main.acl.a) AS d)", "filter-subquery-shape"),
        ("region IN (WITH x AS (SELECT 1 AS r) SELECT r FROM x)", "filter-subquery-shape"),
        ("region IN (VALUES ('EMEA'))", "filter-subquery-shape"),
        ("region IN (SELECT region FROM main.acl.a VERSION AS OF 3)", "filter-subquery-shape"),
        ("region IN (SELECT my_udf(region) FROM main.acl.a)", "unknown-function"),
        (
            "region IN (SELECT reflect('java.lang.System', 'exit', 0) FROM main.acl.a)",
            "forbidden-function",
        ),
        (
            "region IN (SELECT region FROM main.acl.a WHERE _metadata.file_path = 'x')",
            "metadata-column",
        ),
        ("region IN (SELECT region FROM main.acl.a WHERE is_member('nobody'))", "unknown-group"),
        ("SELECT region FROM main.acl.a", "filter-reads-table"),
    ],
)
def test_mapping_subquery_body_obeys_the_expression_rules(where: str, code: str) -> None:
    assert [c for c, _, _ in check_filter_expression(where, {"analysts"})][:1] == [code]


def test_mask_may_read_a_mapping_table_in_a_scalar_subquery() -> None:
    expression = (
        "CASE WHEN EXISTS (SELECT 1 FROM main.acl.vip WHERE u = current_user()) THEN {col} END"
    )
    assert check_mask_expression(expression) == []


def _policy_dir(tmp_path: Path, body: str) -> Path:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "policies.yaml").write_text(HEAD + textwrap.dedent(body))
    return tmp_path / "p"


FILTER = f"""\
row_filters:
  - id: by-region
    on: main.s.sales
    principals: [group:analysts]
    where: "{IN_FORM}"
"""


def test_validate_checks_mapping_tables_exist_when_a_catalog_is_at_hand(tmp_path: Path) -> None:
    d = _policy_dir(tmp_path, FILTER)
    assert validate_policy_dir(d, {"main.s.sales", "main.acl.user_regions"}) == []
    [missing] = validate_policy_dir(d, {"main.s.sales"})
    assert (missing.code, missing.severity, missing.line) == ("mapping-table-missing", "error", 12)
    assert "reads mapping table main.acl.user_regions, which is not in the catalog" in (
        missing.message
    )


def test_validate_without_a_catalog_warns_that_mapping_tables_were_not_checked(
    tmp_path: Path,
) -> None:
    [warning] = validate_policy_dir(_policy_dir(tmp_path, FILTER))
    assert (warning.code, warning.severity) == ("mapping-table-unchecked", "warning")


@pytest.mark.parametrize(
    ("body", "lines"),
    [
        (  # T reads T
            """\
            row_filters:
              - id: self
                on: main.acl.user_regions
                principals: [alice]
                where: "region IN (SELECT region FROM main.acl.user_regions)"
            """,
            [12],
        ),
        (  # T reads U, U reads T
            f"""\
            row_filters:
              - id: by-region
                on: main.s.sales
                principals: [group:analysts]
                where: "{IN_FORM}"
              - id: back
                on: main.acl.user_regions
                principals: [alice]
                where: "region IN (SELECT region FROM main.s.sales)"
            """,
            [12, 16],
        ),
        (  # a mask on a wildcard chain back through two tables
            """\
            row_filters:
              - id: a
                on: main.s.t
                principals: [alice]
                where: "id IN (SELECT id FROM main.acl.u)"
            column_masks:
              - id: b
                on: main.acl.*
                columns: [id]
                mask: custom
                expression: "CASE WHEN EXISTS (SELECT 1 FROM main.s.t) THEN {col} END"
                principals: [alice]
            """,
            [12, 18],
        ),
    ],
)
def test_validate_rejects_mapping_cycles_at_their_lines(body: str, lines: list[int]) -> None:
    found = validate_policy_text({"p.yaml": HEAD + textwrap.dedent(body)})
    cycles = [p for p in found if p.code == "mapping-cycle"]
    assert [p.line for p in cycles] == lines
    assert all(p.severity == "error" and " -> " in p.message for p in cycles)


def test_explain_names_the_mapping_tables_each_policy_reads() -> None:
    e = PolicyEnforcer(load_policy_text({"p.yaml": HEAD + FILTER}))
    tables = {t.full_name: t for t in tables_from_policies(e.policy_set)}
    acc = effective_access(e, "alice", tables["main.s.sales"])
    assert acc.mapping_tables == (("by-region", "main.acl.user_regions"),)
    assert acc.to_dict()["mapping_tables"] == [
        {"policy": "by-region", "table": "main.acl.user_regions"}
    ]


def test_cli_explain_prints_the_mapping_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no lakegate.yaml: tables come from the policies
    d = _policy_dir(tmp_path, FILTER)
    assert main(["policy", "explain", "--dir", str(d), "--user", "alice", "main.s.sales"]) == 0
    out = capsys.readouterr().out
    assert "mapping    : main.acl.user_regions (read by by-region with the policy's rights)" in out


def test_diff_shows_a_change_of_mapping_tables_read() -> None:
    other = FILTER.replace("main.acl.user_regions", "main.acl.team_regions")
    d = diff_policies(
        load_policy_text({"p.yaml": HEAD + FILTER}), load_policy_text({"p.yaml": HEAD + other})
    )
    details = {c.detail for c in d.changes if c.kind == "mapping" and c.user == "alice"}
    assert details == {
        "by-region now reads mapping table main.acl.team_regions",
        "by-region no longer reads mapping table main.acl.user_regions",
    }


def test_cli_validate_with_a_config_checks_mapping_tables_in_its_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from catalog.catalog import Catalog
    from catalog.model import ColumnInfo, TableInfo
    from catalog.store import open_store
    from governance.config import Config
    from governance.tools.demo import write_config

    d = _policy_dir(tmp_path, FILTER)
    cfg_path = write_config(tmp_path / "lakehouse", d)
    cfg = Config.load(cfg_path)
    cat = Catalog(open_store(cfg.catalog), cfg.warehouse)
    cat.create_catalog("main")
    cat.create_schema("main", "s")
    cat.register_table(TableInfo("main", "s", "sales", "/wh/s", (ColumnInfo("region", "string"),)))
    assert main(["--config", str(cfg_path), "policy", "validate", str(d)]) == 1
    assert "mapping-table-missing" in capsys.readouterr().out
    cat.create_schema("main", "acl")
    cat.register_table(
        TableInfo("main", "acl", "user_regions", "/wh/u", (ColumnInfo("region", "string"),))
    )
    assert main(["--config", str(cfg_path), "policy", "validate", str(d)]) == 0
