"""One test per validation rule: policy YAML in, the expected (code, line) problems out.

Each case names the line it expects by a marker substring, so cases stay readable and the
line numbers cannot drift from the YAML they describe. Cases assert the *exact* set of
errors in the file, so a rule that also produces noise (cascading errors) fails too.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from governance.policy.model import (
    ANY,
    ColumnMask,
    Domain,
    Grant,
    NamePattern,
    PolicySet,
    Principal,
    RowFilter,
    Source,
)
from governance.policy.validate import (
    check_filter_expression,
    check_mask_expression,
    format_problems,
    validate_policy_set,
    validate_policy_text,
)

BASE = """\
groups:
  analysts: [alice, bob, group:emea-analysts]
  emea-analysts: [carol]
  pii-readers: [dana]
  sales-owners: [erin]
  finance-owners: [gina]
domains:
  sales: {owners: [group:sales-owners], schemas: [main.sales]}
  finance: {owners: [group:finance-owners], schemas: [main.finance]}
tags:
  main.sales.customers.email: [pii]
  main.sales.customers.phone: [pii, contact]
  main.*.*.iban: [financial]
  main.sales.payments: [payment-data]
"""
CASE = "p/case.yaml"

Expected = list[tuple[str, str]]  # (code, marker substring of the expected line)


def line_of(text: str, marker: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"marker {marker!r} not in case text")


def problems_in(case: str, severity: str = "error", **extra: str) -> list[tuple[str, int]]:
    files = {"p/base.yaml": BASE, CASE: textwrap.dedent(case), **extra}
    found = validate_policy_text(files)
    return sorted((p.code, p.line) for p in found if p.file == CASE and p.severity == severity)


def check(case: str, expected: Expected, severity: str = "error") -> None:
    text = textwrap.dedent(case)
    want = sorted((code, line_of(text, marker)) for code, marker in expected)
    assert problems_in(case, severity) == want


def only(case: str, code: str) -> list:
    text = textwrap.dedent(case)
    files = {"p/base.yaml": BASE, CASE: text}
    return [p for p in validate_policy_text(files) if p.code == code]


def test_base_policy_of_these_cases_is_clean() -> None:
    assert validate_policy_text({"p/base.yaml": BASE}) == []


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize(
    ("case", "expected", "suggestion"),
    [
        (
            """\
            grants:
              - principal: [alice]
                privileges: [select]
                on: main.sales.orders
            """,
            [("unknown-key", "principal:")],
            "did you mean 'principals'?",
        ),
        (
            """\
            column_masks:
              - id: m
                on: main.sales.customers
                columns: [email]
                mask: hash
                exept: [dana]
            """,
            [("unknown-key", "exept:")],
            "did you mean 'except'?",
        ),
        (
            "masks: []\n",
            [("unknown-key", "masks")],
            "did you mean 'column_masks'?",
        ),
        (
            "version: 1\n",
            [("unknown-key", "version")],
            "expected one of: groups, domains",
        ),
    ],
)
def test_unknown_key_names_file_line_and_suggests(
    case: str, expected: Expected, suggestion: str
) -> None:
    check(case, expected)
    (problem,) = only(case, "unknown-key")
    assert problem.file == CASE and problem.column > 0
    assert suggestion in problem.hint


def test_unknown_key_from_another_section_says_where_it_belongs() -> None:
    case = """\
    grants:
      - principals: [alice]
        privileges: [select]
        on: main.sales.orders
        where: "region = 'EMEA'"
    """
    check(case, [("unknown-key", "where:")])
    (problem,) = only(case, "unknown-key")
    assert "belongs in row_filters" in problem.hint


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("grants: {principals: [alice]}\n", [("wrong-type", "grants")]),
        ("groups: [alice]\n", [("wrong-type", "groups")]),
        (
            """\
            grants:
              - principals: alice
                privileges: [select]
                on: main.sales.orders
            """,
            [("wrong-type", "principals: alice")],
        ),
        (
            """\
            column_masks:
              - id: m
                on: main.sales.customers
                columns: [email]
                mask: hash
                priority: high
            """,
            [("wrong-type", "priority: high")],
        ),
        (
            """\
            row_filters:
              - id: f
                on: main.sales.orders
                principals: [alice]
                where: {region: EMEA}
            """,
            [("wrong-type", "where:")],
        ),
        ("- alice\n", [("wrong-type", "- alice")]),
    ],
)
def test_wrong_type_names_the_expected_type(case: str, expected: Expected) -> None:
    check(case, expected)
    assert all("must be" in p.message for p in only(case, "wrong-type"))


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            """\
            grants:
              - principals: [alice]
                on: main.sales.orders
            """,
            [("missing-key", "- principals")],
        ),
        (
            """\
            row_filters:
              - on: main.sales.orders
                principals: [alice]
                where: "region = 'EMEA'"
            """,
            [("missing-key", "- on")],
        ),
        (
            """\
            column_masks:
              - id: m
                on: main.sales.customers
                columns: [email]
            """,
            [("missing-key", "- id")],
        ),
    ],
)
def test_missing_required_key(case: str, expected: Expected) -> None:
    check(case, expected)


def test_duplicate_yaml_key_is_an_error_not_last_wins() -> None:
    check(
        """\
        grants:
          - principals: [alice]
            privileges: [select]
            on: main.sales.orders
            principals: [group:analysts]
        """,
        [("duplicate-key", "principals: [group")],
    )


@pytest.mark.parametrize(
    ("case", "marker", "hint"),
    [
        ("column_masks:\n  - principals: [*]\n", "principals", "quote the star"),
        ("grants:\n  - on: x\n   bad: 1\n", "bad", "indentation"),
        ("a: 1\n---\nb: 2\n", "---", "one YAML document"),
    ],
)
def test_yaml_syntax_error_names_line_and_fix(case: str, marker: str, hint: str) -> None:
    check(case, [("yaml-syntax", marker)])
    (problem,) = only(case, "yaml-syntax")
    assert hint in problem.hint


# --------------------------------------------------------------------------- groups


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            """\
            grants:
              - principals: [group:analyst]
                privileges: [select]
                on: main.sales.orders
            """,
            [("unknown-group", "group:analyst]")],
        ),
        (
            """\
            column_masks:
              - id: m
                on: main.sales.customers
                columns: [email]
                mask: hash
                except:
                  - group:pii-readers
                  - group:pii-reader  # typo
            """,
            [("unknown-group", "# typo")],
        ),
        (
            """\
            groups:
              team: [alice, group:nobody]
            """,
            [("unknown-group", "group:nobody")],
        ),
        (
            """\
            row_filters:
              - id: f
                on: main.sales.orders
                principals: ["*"]
                where: "is_member('ghosts')"
            """,
            [("unknown-group", "where:")],
        ),
        (
            """\
            domains:
              hr: {owners: [group:hr-owners], schemas: [main.hr]}
            """,
            [("unknown-group", "hr:")],
        ),
    ],
)
def test_unknown_group_referenced_as_principal(case: str, expected: Expected) -> None:
    check(case, expected)


def test_unknown_group_hint_suggests_the_close_name() -> None:
    case = """\
    grants:
      - principals: [group:analyst]
        privileges: [select]
        on: main.sales.orders
    """
    (problem,) = only(case, "unknown-group")
    assert "did you mean 'analysts'?" in problem.hint
    assert "group:analyst" in problem.message


def test_group_cycle_is_reported_once_with_its_path() -> None:
    case = """\
    groups:
      a: [group:b]
      b: [group:c]
      c: [alice, group:a]
      selfish: [group:selfish]
    """
    check(case, [("group-cycle", "a: [group:b]"), ("group-cycle", "selfish")])
    messages = sorted(p.message for p in only(case, "group-cycle"))
    assert messages == ["group cycle: a -> b -> c -> a", "group cycle: selfish -> selfish"]


def test_same_group_in_two_files_merges_members_without_error() -> None:
    case = """\
    groups:
      analysts: [zoe]
    grants:
      - principals: [group:analysts]
        privileges: [select]
        on: main.sales.orders
    """
    check(case, [])


# --------------------------------------------------------------------------- enums


def test_unknown_privilege_suggests_the_close_one() -> None:
    case = """\
    grants:
      - principals: [alice]
        privileges:
          - select
          - selcet
          - read
        on: main.sales.orders
    """
    check(case, [("unknown-privilege", "selcet"), ("unknown-privilege", "read")])
    hints = [p.hint for p in only(case, "unknown-privilege")]
    assert "did you mean 'select'?" in hints


@pytest.mark.parametrize(
    ("case", "expected", "hint"),
    [
        (
            """\
            column_masks:
              - id: m
                on: main.sales.customers
                columns: [email]
                mask: hsah
            """,
            [("unknown-mask", "mask: hsah")],
            "did you mean 'hash'?",
        ),
        (
            """\
            column_masks:
              - id: m
                on: main.sales.customers
                columns: [email]
                mask: tokenize
            """,
            [("unknown-mask", "mask: tokenize")],
            "redact, null, hash",
        ),
    ],
)
def test_unknown_mask(case: str, expected: Expected, hint: str) -> None:
    check(case, expected)
    assert hint in only(case, "unknown-mask")[0].hint


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            """\
            grants:
              - principals: [alice]
                privileges: [select]
                on: main.sales.orders
                effect: forbid
            """,
            [("unknown-effect", "effect: forbid")],
        ),
        (
            """\
            row_filters:
              - id: f
                on: main.sales.orders
                principals: [alice]
                where: "true"
                kind: strict
            """,
            [("unknown-kind", "kind: strict")],
        ),
    ],
)
def test_unknown_effect_or_filter_kind(case: str, expected: Expected) -> None:
    check(case, expected)


# --------------------------------------------------------------------------- masks


def test_custom_mask_without_expression() -> None:
    check(
        """\
        column_masks:
          - id: m
            on: main.sales.customers
            columns: [email]
            mask: custom
        """,
        [("custom-mask-no-expression", "mask: custom")],
    )


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ("upper(email)", "custom-mask-no-col"),
        ("concat('{col}', 'x')", "custom-mask-no-col"),
    ],
)
def test_custom_mask_expression_without_col(expression: str, code: str) -> None:
    case = f"""\
    column_masks:
      - id: m
        on: main.sales.customers
        columns: [email]
        mask: custom
        expression: "{expression}"
    """
    check(case, [(code, "expression:")])


def test_expression_on_a_builtin_mask_is_refused() -> None:
    check(
        """\
        column_masks:
          - id: m
            on: main.sales.customers
            columns: [email]
            mask: hash
            expression: "upper({col})"
        """,
        [("expression-not-custom", "expression:")],
    )


def test_mask_with_no_tags_and_no_columns_masks_nothing() -> None:
    check(
        """\
        column_masks:
          - id: m
            on: main.sales.customers
            tags: []
            mask: hash
        """,
        [("mask-selects-nothing", "- id: m")],
    )


def test_mask_null_is_the_null_mask_not_a_missing_value() -> None:
    check(
        """\
        column_masks:
          - id: m
            on: main.sales.customers
            columns: [email]
            mask: null
        """,
        [],
    )


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ("concat('***', right({col}, 4)", "mask-syntax"),
        ("upper({col}); DROP TABLE main.sales.customers", "not-one-expression"),
        ("(SELECT max(email) FROM delta.`/wh/c`) || {col}", "mask-reads-path"),
        ("max({col})", "aggregate-in-expression"),
        ("{col} AS masked", "not-one-expression"),
        ("concat({col}, {other})", "bad-placeholder"),
        ("reflect('java.lang.Runtime', 'exec', {col})", "forbidden-function"),
    ],
)
def test_mask_expression_must_be_one_scalar_expression(expression: str, code: str) -> None:
    case = f"""\
    column_masks:
      - id: m
        on: main.sales.customers
        columns: [email]
        mask: custom
        expression: "{expression}"
    """
    check(case, [(code, "expression:")])


@pytest.mark.parametrize(
    "expression",
    [
        "concat(repeat('*', length({col}) - 4), right({col}, 4))",
        "CASE WHEN is_member('pii-readers') THEN {col} ELSE sha2({col}, 256) END",
        "date_trunc('MONTH', {col})",
    ],
)
def test_good_custom_mask_expressions_pass(expression: str) -> None:
    assert check_mask_expression(expression, {"pii-readers"}) == []


# --------------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("region = 'EMEA' AND", "filter-syntax"),
        ("region = 'EMEA') OR (1 = 1", "filter-syntax"),
        ("region = 'EMEA'; DROP TABLE main.sales.orders", "not-one-expression"),
        ("upper(region)", "filter-not-boolean"),
        ("42", "filter-not-boolean"),
        ("'EMEA'", "filter-not-boolean"),
        ("amount + 1", "filter-not-boolean"),
        ("-amount", "filter-not-boolean"),
        ("amount || region", "filter-not-boolean"),
        ("region = 'EMEA' alias", "not-one-expression"),
        ("region = {col}", "bad-placeholder"),
    ],
)
def test_filter_where_must_parse_as_one_boolean_expression(where: str, code: str) -> None:
    case = f"""\
    row_filters:
      - id: f
        on: main.sales.orders
        principals: [group:analysts]
        where: "{where}"
    """
    check(case, [(code, "where:")])


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("SELECT * FROM main.sales.orders", "filter-reads-table"),
        ("region IN (VALUES ('EMEA'))", "filter-subquery-shape"),
        ("region IN (SELECT region FROM delta.`/wh/hr/allowed`)", "filter-reads-path"),
        ("region IN (SELECT region FROM hr.allowed)", "mapping-table-name"),
    ],
)
def test_filter_that_reads_a_table_outside_a_mapping_subquery(where: str, code: str) -> None:
    case = f"""\
    row_filters:
      - id: f
        on: main.sales.orders
        principals: [group:analysts]
        where: "{where}"
    """
    check(case, [(code, "where:")])


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("count(*) > 1", "aggregate-in-expression"),
        ("row_number() OVER (ORDER BY id) < 10", "aggregate-in-expression"),
        ("java_method('java.lang.System', 'exit', 0) IS NULL", "forbidden-function"),
    ],
)
def test_filter_may_not_aggregate_or_run_jvm_code(where: str, code: str) -> None:
    case = f"""\
    row_filters:
      - id: f
        on: main.sales.orders
        principals: [group:analysts]
        where: "{where}"
    """
    check(case, [(code, "where:")])


@pytest.mark.parametrize(
    "where",
    [
        "region = 'EMEA'",
        "region = 'EMEA' AND amount > 0 OR is_member('analysts')",
        "sales_rep = current_user()",
        "is_account_group_member('pii-readers')",
        "flag",
        "coalesce(flag, false)",
        "region LIKE 'E%' AND NOT deleted",
    ],
)
def test_good_filters_pass(where: str) -> None:
    assert check_filter_expression(where, {"analysts", "pii-readers"}) == []


def test_multiline_filter_points_at_the_where_value() -> None:
    case = """\
    row_filters:
      - id: f
        on: main.sales.orders
        principals: [group:analysts]
        where: >-
          region = 'EMEA'
          AND
    """
    check(case, [("filter-syntax", "where:")])


# --------------------------------------------------------------------------- identity


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("sales_rep = current_user('bob')", "identity-arity"),
        ("sales_rep = user(1)", "identity-arity"),
        ("is_member()", "identity-arity"),
        ("is_member('analysts', 'pii-readers')", "identity-arity"),
        ("is_account_group_member()", "identity-arity"),
        ("is_member(region)", "identity-arg"),
        ("session_user('x') = 'a'", "filter-syntax"),
    ],
)
def test_identity_functions_with_wrong_arity(where: str, code: str) -> None:
    case = f"""\
    row_filters:
      - id: f
        on: main.sales.orders
        principals: [group:analysts]
        where: "{where}"
    """
    check(case, [(code, "where:")])


# --------------------------------------------------------------------------- ids


def test_duplicate_ids_share_one_space_across_rule_kinds() -> None:
    case = """\
    grants:
      - id: shared
        principals: [alice]
        privileges: [select]
        on: main.sales.orders
    row_filters:
      - id: shared  # second shared
        on: main.sales.orders
        principals: [alice]
        where: "true"
    column_masks:
      - id: m
        on: main.sales.customers
        columns: [email]
        mask: hash
      - id: m  # second m
        on: main.sales.customers
        columns: [phone]
        mask: hash
        priority: 1
    """
    check(case, [("duplicate-id", "# second shared"), ("duplicate-id", "# second m")])
    messages = [p.message for p in only(case, "duplicate-id")]
    assert any("already used by the grant at p/case.yaml:2:5" in m for m in messages)


@pytest.mark.parametrize(
    ("ident", "code"),
    [("domain:sales", "reserved-id"), ("hide pii", "bad-id"), ("a|b", "bad-id")],
)
def test_reserved_and_malformed_ids(ident: str, code: str) -> None:
    case = f"""\
    column_masks:
      - id: "{ident}"
        on: main.sales.customers
        columns: [email]
        mask: hash
    """
    check(case, [(code, "- id:")])


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "grants:\n  - {principals: [alice], privileges: [select], on: main.sales}\n",
            [("bad-name", "main.sales")],
        ),
        (
            "grants:\n  - {principals: [alice], privileges: [select], on: main.sales_*.t}\n",
            [("bad-name", "sales_*")],
        ),
        (
            "grants:\n  - {principals: [alice], privileges: [select], on: main.sales.t.col}\n",
            [("bad-name", "t.col")],
        ),
        (
            "grants:\n  - {principals: [role:admin], privileges: [select], on: main.sales.t}\n",
            [("bad-principal", "role:admin")],
        ),
        (
            "grants:\n  - {principals: ['alice, bob'], privileges: [select], on: main.sales.t}\n",
            [("bad-principal", "alice, bob")],
        ),
        ("groups:\n  everyone: ['*']\n", [("bad-principal", "everyone")]),
        (
            "grants:\n  - {principals: ['user:*'], privileges: [select], on: main.sales.t}\n",
            [("bad-principal", "user:*")],
        ),
        ("groups:\n  group:admins: [alice]\n", [("bad-name", "group:admins")]),
        ("domains:\n  hr: {schemas: [main.*]}\n", [("bad-name", "main.*")]),
        ("tags:\n  main.sales: [pii]\n", [("bad-name", "main.sales")]),
        (
            "column_masks:\n  - {id: m, on: main.sales.t, columns: ['*'], mask: hash}\n",
            [("bad-name", "columns")],
        ),
    ],
)
def test_bad_names_and_principals(case: str, expected: Expected) -> None:
    check(case, expected)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "grants:\n  - {principals: [], privileges: [select], on: main.sales.t}\n",
            [("empty-list", "principals")],
        ),
        (
            "grants:\n  - {principals: [alice], privileges: [], on: main.sales.t}\n",
            [("empty-list", "privileges")],
        ),
        (
            "grants:\n"
            "  - {principals: [alice], privileges: [select], on: main.sales.t, columns: []}\n",
            [("empty-list", "columns")],
        ),
    ],
)
def test_empty_lists_that_make_a_rule_do_nothing(case: str, expected: Expected) -> None:
    check(case, expected)


def test_duplicate_list_entry_is_a_warning() -> None:
    case = "grants:\n  - {principals: [alice, alice], privileges: [select], on: main.sales.t}\n"
    check(case, [("duplicate-entry", "alice")], severity="warning")
    check(case, [])


# --------------------------------------------------------------------------- mask overlap


@pytest.mark.parametrize(
    "masks",
    [
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash}
            - {id: b, on: main.*.*, columns: [email], mask: redact}
            """,
            id="same-column-wildcard-table",
        ),
        pytest.param(
            """\
            - {id: a, on: main.*.*, tags: [pii], mask: hash}
            - {id: b, on: main.sales.customers, columns: [phone], mask: last4}
            """,
            id="tag-assigned-to-named-column",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.*, tags: [pii], mask: hash}
            - {id: b, on: main.sales.*, tags: [contact], mask: last4}
            """,
            id="two-tags-on-one-column",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.accounts, tags: [financial], mask: hash}
            - {id: b, on: main.*.accounts, columns: [iban], mask: null}
            """,
            id="wildcard-tag-assignment",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.payments, tags: [payment-data], mask: hash}
            - {id: b, on: main.sales.payments, columns: [card], mask: last4}
            """,
            id="table-tag-covers-every-column",
        ),
        pytest.param(
            """\
            - {id: a, on: main.x.t, tags: [secret], mask: hash}
            - {id: b, on: main.x.t, tags: [secret], mask: null}
            """,
            id="same-tag-even-if-unassigned",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash,
               principals: [group:analysts]}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact,
               principals: [carol]}
            """,
            id="nested-group-member",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash,
               except: [group:analysts]}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact,
               except: [group:pii-readers]}
            """,
            id="everyone-minus-different-exemptions",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash, priority: 5}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact, priority: 5,
               principals: [zoe]}
            """,
            id="unnamed-user-is-in-everyone",
        ),
    ],
)
def test_equal_priority_masks_hitting_one_column_for_some_user(masks: str) -> None:
    case = "column_masks:\n" + textwrap.indent(textwrap.dedent(masks), "  ")
    check(case, [("mask-overlap", "id: b")])


@pytest.mark.parametrize(
    "masks",
    [
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact, priority: 1}
            """,
            id="different-priority",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash}
            - {id: b, on: main.finance.*, columns: [email], mask: redact}
            """,
            id="disjoint-tables",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.*, tags: [pii], mask: hash}
            - {id: b, on: main.*.*, tags: [financial], mask: null}
            """,
            id="tags-never-on-one-column",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash,
               principals: [group:emea-analysts]}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact,
               principals: [group:pii-readers]}
            """,
            id="disjoint-principals",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash,
               except: [group:pii-readers]}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact,
               principals: [dana]}
            """,
            id="exempted-by-except",
        ),
        pytest.param(
            """\
            - {id: a, on: main.sales.customers, columns: [email], mask: hash, except: ["*"]}
            - {id: b, on: main.sales.customers, columns: [email], mask: redact}
            """,
            id="except-everyone",
        ),
    ],
)
def test_masks_that_provably_never_co_apply_are_accepted(masks: str) -> None:
    case = "column_masks:\n" + textwrap.indent(textwrap.dedent(masks), "  ")
    check(case, [])


def test_mask_overlap_message_names_both_masks_a_column_and_a_user() -> None:
    case = """\
    column_masks:
      - {id: a, on: main.*.*, tags: [pii], mask: hash, except: [group:pii-readers]}
      - {id: b, on: main.sales.customers, columns: [email], mask: redact,
         principals: [group:analysts]}
    """
    (problem,) = only(case, "mask-overlap")
    assert "'a'" in problem.message and "'b'" in problem.message
    assert "main.sales.customers.email" in problem.message
    assert "user 'alice'" in problem.message
    assert "higher priority" in problem.hint


# --------------------------------------------------------------------------- domains


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            """\
            domain: sales
            grants:
              - principals: [alice]
                privileges: [select]
                on: main.finance.ledger
            """,
            [("outside-domain", "on: main.finance")],
        ),
        (
            """\
            domain: sales
            grants:
              - principals: [alice]
                privileges: [select]
                on: main.*.orders
            """,
            [("outside-domain", "on: main.*")],
        ),
        (
            """\
            domain: sales
            row_filters:
              - id: f
                on: "*.sales.orders"
                principals: [alice]
                where: "true"
            """,
            [("outside-domain", "on:")],
        ),
        (
            """\
            domain: sales
            column_masks:
              - id: m
                on: main.hr.people
                columns: [salary]
                mask: null
            """,
            [("outside-domain", "on: main.hr")],
        ),
        (
            """\
            domain: sales
            tags:
              main.finance.ledger.amount: [public]
            """,
            [("outside-domain", "main.finance")],
        ),
        (
            """\
            domain: sales
            grants:
              - principals: [alice]
                privileges: [select]
                on: main.sales.orders
            column_masks:
              - {id: m, on: main.sales.orders, columns: [margin], mask: null}
            """,
            [],
        ),
    ],
)
def test_rule_outside_its_files_domain(case: str, expected: Expected) -> None:
    check(case, expected)


def test_central_file_may_govern_any_domain() -> None:
    case = """\
    grants:
      - principals: [alice]
        privileges: [select]
        on: main.*.*
    """
    check(case, [])


def test_unknown_file_domain_suggests_the_close_one() -> None:
    case = """\
    domain: sale
    grants:
      - principals: [alice]
        privileges: [select]
        on: main.sales.orders
    """
    check(case, [("unknown-domain", "domain: sale")])
    assert "did you mean 'sales'?" in only(case, "unknown-domain")[0].hint


def test_schema_owned_by_two_domains() -> None:
    case = """\
    domains:
      marketing:
        schemas:
          - main.marketing
          - main.sales
    """
    check(case, [("schema-in-two-domains", "- main.sales")])
    assert "already belongs to domain 'sales'" in only(case, "schema-in-two-domains")[0].message


def test_domain_file_may_not_extend_other_groups_or_define_domains() -> None:
    case = """\
    domain: sales
    groups:
      pii-readers: [mallory]
      sales-interns: [ivan]
    domains:
      shadow: {schemas: [main.shadow]}
    """
    check(
        case,
        [
            ("domain-file-extends-group", "pii-readers"),
            ("domain-file-defines-domains", "shadow"),
        ],
    )


# --------------------------------------------------------------------------- warnings


def test_mask_tag_no_policy_assigns_is_a_warning() -> None:
    case = "column_masks:\n  - {id: m, on: main.*.*, tags: [pi], mask: hash}\n"
    check(case, [("unknown-tag", "tags: [pi]")], severity="warning")
    check(case, [])
    assert "did you mean 'pii'?" in only(case, "unknown-tag")[0].hint


# --------------------------------------------------------------------------- sets in code


def test_validate_policy_set_checks_sets_built_in_code() -> None:
    src = Source("code.py", 7, 1)
    ps = PolicySet(
        groups={"a": (Principal("group", "b"),), "b": (Principal("group", "a"),)},
        group_sources={"a": Source("code.py", 1, 1), "b": Source("code.py", 2, 1)},
        domains={"sales": Domain("sales", schemas=("main.sales",))},
        grants=(
            Grant(
                "g1",
                (Principal("group", "ghosts"),),
                ("read",),
                NamePattern.parse("a.b.c"),
                source=src,
            ),
            Grant(
                "g2",
                (ANY,),
                ("select",),
                NamePattern.parse("main.hr.t"),
                source=src,
                file_domain="sales",
            ),
        ),
        row_filters=(RowFilter("g1", NamePattern.parse("a.b.c"), (ANY,), "x +", source=src),),
        column_masks=(ColumnMask("m", NamePattern.parse("a.b.c"), "tokenize", columns=("x",)),),
    )
    codes = sorted({p.code for p in validate_policy_set(ps)})
    assert codes == [
        "duplicate-id",
        "filter-syntax",
        "group-cycle",
        "outside-domain",
        "unknown-group",
        "unknown-mask",
        "unknown-privilege",
    ]


# --------------------------------------------------------------------------- output


def test_format_problems_text_and_json() -> None:
    case = "grants:\n  - {principal: [alice], privileges: [select], on: main.sales.t}\n"
    problems = validate_policy_text({CASE: case})
    text = format_problems(problems, "text")
    assert text == (
        "p/case.yaml:2:6: error[unknown-key]: unknown key 'principal' in an entry of grants "
        "(hint: did you mean 'principals'?)"
    )
    (obj,) = json.loads(format_problems(problems, "json"))
    assert obj == {
        "file": "p/case.yaml",
        "line": 2,
        "column": 6,
        "severity": "error",
        "code": "unknown-key",
        "message": "unknown key 'principal' in an entry of grants",
        "hint": "did you mean 'principals'?",
    }
    assert format_problems([], "text") == ""
    with pytest.raises(ValueError, match="unknown format"):
        format_problems(problems, "xml")  # type: ignore[arg-type]
