"""Loading: what the YAML turns into, where each object says it came from, and fail-closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from governance.errors import LakegateError
from governance.policy.loader import (
    PolicyError,
    is_policy_file,
    load_policy_dir,
    load_policy_text,
    policy_files,
)
from governance.policy.model import ANY, NamePattern, Principal, Source, content_hash

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = FIXTURES / "reference"
VALID = FIXTURES / "valid"


def test_reference_example_from_the_spec_loads_into_the_model() -> None:
    ps = load_policy_dir(REFERENCE)
    f = "reference/policies.yaml"
    assert ps.files == (f,)
    assert ps.groups["analysts"] == (
        Principal("user", "alice"),
        Principal("user", "bob"),
        Principal("group", "emea-analysts"),
    )
    assert ps.group_sources["analysts"] == Source(f, 2, 3)
    sales = ps.domains["sales"]
    assert (sales.owners, sales.schemas) == ((Principal("group", "sales-owners"),), ("main.sales",))
    assert sales.description == "Orders, customers and payments"
    assert [(str(t.on), t.tags) for t in ps.tags] == [
        ("main.sales.customers.email", ("pii",)),
        ("main.sales.customers.phone", ("pii",)),
        ("main.sales.customers", ("customer-data",)),
    ]
    allow, deny = ps.grants
    assert (allow.id, allow.effect, allow.columns, allow.on) == (
        f"{f}:20",
        "allow",
        None,
        NamePattern("main", "sales", "*"),
    )
    assert (deny.id, deny.effect, deny.columns, deny.principals) == (
        f"{f}:23",
        "deny",
        ("phone",),
        (Principal("user", "bob"),),
    )
    (rf,) = ps.row_filters
    assert (rf.id, rf.where, rf.kind, rf.source) == (
        "emea-only",
        "region = 'EMEA'",
        "permissive",
        Source(f, 30, 5),
    )
    (mask,) = ps.column_masks
    assert (mask.id, mask.mask, mask.tags, mask.columns, mask.principals, mask.priority) == (
        "hide-pii",
        "hash",
        ("pii",),
        (),
        (ANY,),
        0,
    )
    assert mask.except_ == (Principal("group", "pii-readers"),)
    assert all(r.file_domain is None for r in (*ps.grants, *ps.row_filters, *ps.column_masks))


def test_directory_files_merge_in_path_order_and_skip_policy_tests() -> None:
    ps = load_policy_dir(VALID)
    assert ps.files == ("valid/central.yaml", "valid/finance/finance.yml", "valid/sales/sales.yaml")
    assert [g.id for g in ps.grants] == [
        "valid/central.yaml:29",
        "bob-no-phone",
        "valid/central.yaml:38",
        "valid/finance/finance.yml:4",
        "sales-owners-manage",
    ]
    assert [m.id for m in ps.column_masks] == ["hide-pii", "iban-stars", "phone-last4"]
    assert [f.id for f in ps.row_filters] == ["emea-only", "own-orders-for-non-analysts"]


def test_file_domain_is_set_on_every_rule_of_that_file() -> None:
    ps = load_policy_dir(VALID)
    by_file = {
        r.source.file: r.file_domain for r in (*ps.grants, *ps.row_filters, *ps.column_masks)
    }
    assert by_file == {
        "valid/central.yaml": None,
        "valid/finance/finance.yml": "finance",
        "valid/sales/sales.yaml": "sales",
    }


def test_group_defined_in_two_files_unions_members() -> None:
    ps = load_policy_text(
        {
            "p/a.yaml": "groups:\n  team: [alice, bob]\n",
            "p/b.yaml": "groups:\n  team: [bob, carol]\n  other: [dan]\n",
        }
    )
    assert [m.name for m in ps.groups["team"]] == ["alice", "bob", "carol"]
    assert ps.group_sources["team"] == Source("p/a.yaml", 2, 3)
    assert set(ps.groups) == {"team", "other"}


def test_names_principals_and_privileges_are_normalised_to_lower_case() -> None:
    ps = load_policy_text(
        {
            "p/a.yaml": (
                "groups:\n  Analysts: [ALICE]\n"
                "tags:\n  Main.Sales.Customers.EMAIL: [PII]\n"
                "grants:\n"
                "  - principals: [Group:Analysts, user:Bob, Carol]\n"
                "    privileges: [SELECT, Modify]\n"
                "    effect: DENY\n"
                "    on: Main.`Sales`.Orders\n"
                "    columns: [Amount]\n"
            )
        }
    )
    (grant,) = ps.grants
    assert ps.groups == {"analysts": (Principal("user", "alice"),)}
    assert ps.tags[0].on == NamePattern("main", "sales", "customers", "email")
    assert ps.tags[0].tags == ("pii",)
    assert grant.principals == (
        Principal("group", "analysts"),
        Principal("user", "bob"),
        Principal("user", "carol"),
    )
    assert (grant.privileges, grant.effect, grant.columns) == (
        ("select", "modify"),
        "deny",
        ("amount",),
    )
    assert grant.on == NamePattern("main", "sales", "orders")


def test_two_grants_on_one_line_get_distinct_default_ids() -> None:
    ps = load_policy_text(
        {
            "p/a.yaml": "grants: [{principals: [a], privileges: [select], on: a.b.c}, "
            "{principals: [b], privileges: [select], on: a.b.c}]\n"
        }
    )
    assert [g.id for g in ps.grants] == ["p/a.yaml:1", "p/a.yaml:1:62"]


def test_yaml_1_1_booleans_are_read_as_written() -> None:
    # `on` and `no` are booleans in YAML 1.1; a key `on:` and a user named `no` must survive
    ps = load_policy_text(
        {"p/a.yaml": "grants:\n  - {principals: [no, yes], privileges: [select], on: a.b.c}\n"}
    )
    assert [p.name for p in ps.grants[0].principals] == ["no", "yes"]


def test_column_mask_defaults_follow_the_spec() -> None:
    ps = load_policy_text(
        {
            "p/a.yaml": (
                "column_masks:\n"
                "  - {id: m, on: a.b.c, columns: [x], mask: null}\n"
                "  - id: c\n"
                "    on: a.b.c\n"
                "    columns: [y]\n"
                "    mask: custom\n"
                "    expression: \"concat('x', {col})\"\n"
                "    priority: -2\n"
            )
        }
    )
    m, c = ps.column_masks
    assert (m.mask, m.principals, m.except_, m.priority, m.expression) == (
        "null",
        (ANY,),
        (),
        0,
        None,
    )
    assert (c.mask, c.expression, c.priority) == ("custom", "concat('x', {col})", -2)


def test_sources_are_one_based_and_relative_to_the_policy_dirs_parent(tmp_path: Path) -> None:
    root = tmp_path / "policies"
    (root / "team").mkdir(parents=True)
    (root / "team" / "g.yml").write_text(
        "# comment\ngrants:\n  - principals: [alice]\n    privileges: [select]\n    on: a.b.c\n"
    )
    (grant,) = load_policy_dir(root).grants
    assert grant.source == Source("policies/team/g.yml", 3, 5)
    assert grant.id == "policies/team/g.yml:3"
    (grant,) = load_policy_dir(root / "team" / "g.yml").grants
    assert grant.source.file == "g.yml"


@pytest.mark.parametrize(
    ("relative", "is_policy"),
    [
        ("grants.yaml", True),
        ("sales/grants.yml", True),
        ("sales/tests/helpers.yaml", True),  # only the top-level tests/ holds policy tests
        ("tests/cases.yaml", False),
        ("schema.json", False),
        ("README.md", False),
        (".github/workflows/ci.yaml", False),
        ("sales/.draft.yaml", False),
        ("GRANTS.YAML", True),
    ],
)
def test_is_policy_file(relative: str, is_policy: bool) -> None:
    assert is_policy_file(relative) is is_policy


def test_policy_files_excludes_tests_dir_of_the_policy_dir() -> None:
    names = [p.relative_to(VALID).as_posix() for p in policy_files(VALID)]
    assert names == ["central.yaml", "finance/finance.yml", "sales/sales.yaml"]
    assert (VALID / "tests" / "cases.yaml").exists()


def test_content_hash_covers_names_and_bytes(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    text = "groups:\n  a: [b]\n"
    (root / "g.yaml").write_text(text)
    first = load_policy_dir(root).content_hash
    assert first == content_hash([("p/g.yaml", text.encode())])
    assert first == load_policy_text({"p/g.yaml": text}).content_hash
    (root / "g.yaml").write_text(text + "# a comment changes the bytes\n")
    assert load_policy_dir(root).content_hash != first
    assert load_policy_text({"p/h.yaml": text}).content_hash != first


def test_any_error_raises_policy_error_with_one_line_per_problem() -> None:
    files = {
        "p/a.yaml": "grants:\n  - {principal: [alice], privileges: [selct], on: a.b.c}\n",
        "p/b.yaml": "groups: [x]\n",
    }
    with pytest.raises(PolicyError) as caught:
        load_policy_text(files)
    error = caught.value
    assert isinstance(error, LakegateError)
    assert [(p.file, p.line, p.code) for p in error.errors] == [
        ("p/a.yaml", 2, "unknown-key"),
        ("p/a.yaml", 2, "unknown-privilege"),
        ("p/b.yaml", 1, "wrong-type"),
    ]
    lines = str(error).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("p/a.yaml:2:6: error[unknown-key]: unknown key 'principal'")


def test_one_bad_file_refuses_the_whole_set() -> None:
    good = "grants:\n  - {principals: [alice], privileges: [select], on: a.b.c}\n"
    with pytest.raises(PolicyError):
        load_policy_text({"p/good.yaml": good, "p/bad.yaml": "grants: [\n"})


def test_warnings_do_not_block_loading() -> None:
    ps = load_policy_text(
        {"p/a.yaml": "column_masks:\n  - {id: m, on: a.b.c, tags: [nowhere], mask: hash}\n"}
    )
    assert [m.id for m in ps.column_masks] == ["m"]


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="no-policy-dir"):
        load_policy_dir(tmp_path / "nope")


def test_empty_directory_loads_an_empty_set(tmp_path: Path) -> None:
    ps = load_policy_dir(tmp_path)
    assert (ps.grants, ps.files) == ((), ())


def test_empty_and_comment_only_files_are_fine() -> None:
    ps = load_policy_text({"p/a.yaml": "", "p/b.yaml": "# nothing yet\n"})
    assert ps.files == ("p/a.yaml", "p/b.yaml")


def test_non_utf8_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_bytes(b"groups:\n  caf\xe9: [x]\n")
    with pytest.raises(PolicyError, match="bad-encoding"):
        load_policy_dir(tmp_path)
