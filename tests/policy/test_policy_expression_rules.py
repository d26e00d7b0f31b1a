"""One rule, one place: what a policy expression may contain is decided by one checker.

Every denied construct is refused by `lakegate policy validate` (at the file and line of the
expression) AND, for a policy set that skipped validation, at plan time under the same rule
name, instead of passing validation and then making the table unreadable at run time.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlglot import exp

from catalog.catalog import Catalog
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore
from cli import main
from governance.errors import Refused
from governance.planning.dispatch import Planner
from governance.policy.build import parse_policy_text
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.expressions import ExpressionRules, checked_expression
from governance.rewrite.dynamic_views import PolicySql
from governance.sql.constructs import DENIED_FUNCTIONS
from governance.sql.resolve import Namespace

# Each denied function called the way a policy author would.
DENIED_CALLS: dict[str, str] = {
    "reflect": "reflect('java.lang.Runtime', 'getRuntime') IS NULL",
    "java_method": "java_method('java.lang.System', 'exit', 0) IS NULL",
    "try_reflect": "try_reflect('java.lang.System', 'exit', 0) IS NULL",
    "input_file_name": "input_file_name() LIKE '%emea%'",
    "input_file_block_start": "input_file_block_start() >= 0",
    "input_file_block_length": "input_file_block_length() >= 0",
    "read_files": "read_files('/etc/passwd') IS NULL",
    "raise_error": "CASE WHEN region = 'EMEA' THEN true ELSE raise_error(region) END",
    "assert_true": "assert_true(region = 'EMEA') IS NULL",
    "from_avro": "from_avro(region, '{}') IS NULL",
    "to_avro": "to_avro(region) IS NOT NULL",
    "url_decode": "url_decode(region) = 'EMEA'",
    "validate_utf8": "validate_utf8(region) = 'EMEA'",
    "to_time": "to_time(region) IS NULL",
    "make_time": "make_time(length(region), 0, 0) IS NULL",
    "time_from_seconds": "time_from_seconds(length(region)) IS NULL",
    "time_from_millis": "time_from_millis(length(region)) IS NULL",
    "time_from_micros": "time_from_micros(length(region)) IS NULL",
    "time_trunc": "time_trunc(region, current_time()) IS NULL",
    "time_diff": "time_diff(region, current_time(), current_time()) = 0",
    "st_geomfromwkb": "st_geomfromwkb(unhex(region)) IS NULL",
    "st_geogfromwkb": "st_geogfromwkb(unhex(region)) IS NULL",
    "st_setsrid": "st_setsrid(NULL, length(region)) IS NULL",
    "vector_cosine_similarity": "vector_cosine_similarity(array(1.0F), array(1.0F)) > id",
    "vector_inner_product": "vector_inner_product(array(1.0F), array(1.0F)) > length(region)",
    "vector_l2_distance": "vector_l2_distance(array(1.0F), array(1.0F)) > length(region)",
    "vector_norm": "vector_norm(array(1.0F), CAST(length(region) AS FLOAT)) > 0",
    "vector_normalize": "vector_normalize(array(1.0F), 2.0F) IS NOT NULL AND region = 'EMEA'",
    "vector_avg": "vector_avg(array(1.0F)) IS NOT NULL AND region = 'EMEA'",
    "vector_sum": "vector_sum(array(1.0F)) IS NOT NULL AND region = 'EMEA'",
    "from_protobuf": "from_protobuf(unhex(region), 'M', '/etc/descriptor.desc') IS NULL",
    "to_protobuf": "to_protobuf(named_struct('r', region), 'M', '/etc/d.desc') IS NULL",
    "spark_partition_id": "spark_partition_id() = 0",
    "monotonically_increasing_id": "monotonically_increasing_id() < 10",
    "current_database": "current_database() = 'sales'",
    "current_schema": "current_schema() = 'sales'",
    "current_catalog": "current_catalog() = 'main'",
    "current_path": "current_path() LIKE '%sales%'",
}
CASES = [
    *((f"denied {name}", where, "forbidden-function") for name, where in DENIED_CALLS.items()),
    ("udf", "my_udf(region) = 'EMEA'", "unknown-function"),
    ("metadata column", "_metadata.file_path LIKE '%emea%'", "metadata-column"),
    ("path in a subquery", "region IN (SELECT region FROM delta.`/wh/x`)", "filter-reads-path"),
    ("aggregate", "count(*) > 1", "aggregate-in-expression"),
]
IDS = [c[0] for c in CASES]
# A row filter must also be a condition; a mask's shape rule ({col} used) is validation's only.
FILTER_CASES = [*CASES, ("not boolean", "upper(region)", "filter-not-boolean")]
FILTER_IDS = [c[0] for c in FILTER_CASES]

HEADER = """\
groups:
  analysts: [alice]
grants:
  - id: read
    principals: [group:analysts]
    privileges: [select]
    on: main.sales.orders
"""


def filter_file(where: str) -> str:
    return HEADER + textwrap.dedent(f"""\
    row_filters:
      - id: f
        on: main.sales.orders
        principals: [group:analysts]
        where: "{where}"
    """)


def mask_file(expression: str) -> str:
    return HEADER + textwrap.dedent(f"""\
    column_masks:
      - id: m
        on: main.sales.orders
        columns: [region]
        mask: custom
        expression: "{expression}"
    """)


def as_mask(where: str) -> str:
    """The same construct in a custom mask: a scalar of {col} that carries it."""
    return f"CASE WHEN {where.replace('region', '{col}')} THEN {{col}} ELSE 'x' END"


@pytest.fixture(scope="module")
def plan_as_alice(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str | None]:
    """Plan a read of main.sales.orders as alice under a policy set that skipped validation."""
    root = tmp_path_factory.mktemp("expr-rules")
    catalog = Catalog(SqliteStore(root / "catalog.db"), root / "warehouse")
    catalog.create_catalog("main")
    catalog.create_schema("main", "sales")
    catalog.register_table(
        TableInfo(
            "main",
            "sales",
            "orders",
            "/wh/main/sales/orders",
            (ColumnInfo("id", "int", position=0), ColumnInfo("region", "string", position=1)),
        )
    )

    def plan(policy_yaml: str) -> str | None:
        unchecked = parse_policy_text({"p/policies.yaml": policy_yaml})
        assert not unchecked.problems  # structurally fine; only the set-level checks object
        enforcer = PolicyEnforcer(unchecked.policy_set)
        return (
            Planner(
                catalog=catalog,
                enforcer=enforcer,
                policy_sql=PolicySql(enforcer),
                user="alice",
                namespace=Namespace("main", "sales"),
            )
            .plan("SELECT id, region FROM main.sales.orders")
            .sql
        )

    return plan


def validate_output(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "policies.yaml").write_text(text)
    assert main(["policy", "validate", str(tmp_path / "policies")]) == 1
    return capsys.readouterr().out


def line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


def test_every_denied_function_has_a_case() -> None:
    assert set(DENIED_CALLS) == set(DENIED_FUNCTIONS)


@pytest.mark.parametrize(("name", "where", "code"), FILTER_CASES, ids=FILTER_IDS)
def test_filter_construct_is_refused_by_policy_validate_at_its_line(
    name: str, where: str, code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = filter_file(where)
    out = validate_output(tmp_path, text, capsys)
    assert f"policies/policies.yaml:{line_of(text, 'where:')}:" in out
    assert f"error[{code}]: row filter 'f'" in out


@pytest.mark.parametrize(("name", "where", "code"), FILTER_CASES, ids=FILTER_IDS)
def test_filter_construct_is_refused_at_plan_time_under_the_same_rule(
    name: str, where: str, code: str, plan_as_alice: Callable[[str], str | None]
) -> None:
    with pytest.raises(Refused) as exc:
        plan_as_alice(filter_file(where))
    assert str(exc.value) == (
        f"policy f cannot be applied: it breaks rule {code} (run lakegate policy validate)"
    )


@pytest.mark.parametrize(("name", "where", "code"), CASES, ids=IDS)
def test_mask_construct_is_refused_by_policy_validate_and_at_plan_time(
    name: str,
    where: str,
    code: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    plan_as_alice: Callable[[str], str | None],
) -> None:
    code = code.replace("filter-", "mask-")
    text = mask_file(as_mask(where))
    out = validate_output(tmp_path, text, capsys)
    assert f"policies/policies.yaml:{line_of(text, 'expression:')}:" in out
    assert f"error[{code}]: column mask 'm'" in out
    with pytest.raises(Refused) as exc:
        plan_as_alice(text)
    assert f"policy m:region cannot be applied: it breaks rule {code} " in str(exc.value)


def test_plan_time_refusal_does_not_show_the_expression(
    plan_as_alice: Callable[[str], str | None],
) -> None:
    with pytest.raises(Refused) as exc:
        plan_as_alice(filter_file("region IN (SELECT region FROM main.hr.secret_regions)"))
    assert "secret_regions" not in str(exc.value)


def test_subqueries_are_one_switch_away_and_other_rules_still_apply_inside_them() -> None:
    mapping = "region IN (SELECT region FROM main.sales.allowed WHERE analyst = current_user())"
    with pytest.raises(Refused, match="filter-reads-table"):
        checked_expression("f", mapping, "filter", (), ExpressionRules(subqueries=False))
    on = ExpressionRules(subqueries=True)
    assert checked_expression("f", mapping, "filter", (), on).find(exp.Select) is not None
    hidden = "region IN (SELECT raise_error(region) FROM main.sales.allowed)"
    with pytest.raises(Refused, match="forbidden-function"):
        checked_expression("f", hidden, "filter", (), on)
    with pytest.raises(Refused, match="aggregate-in-expression"):
        checked_expression(
            "f", "count(*) > (SELECT count(*) FROM main.sales.allowed)", "filter", (), on
        )


def test_a_mask_keyed_like_a_filter_id_keeps_its_own_expression(
    plan_as_alice: Callable[[str], str | None],
) -> None:
    """Mask `m` on column region is cached as `m:region`, which is also a valid filter id."""
    text = HEADER + textwrap.dedent("""\
    row_filters:
      - {id: "m:region", on: main.sales.orders, principals: [alice], where: "id > 0"}
    column_masks:
      - {id: m, on: main.sales.orders, columns: [region], mask: custom,
         expression: "upper({col})"}
    """)
    assert plan_as_alice(text) == (
        "SELECT id, region FROM (SELECT `id`, UPPER(`region`) AS `region` "
        "FROM delta.`/wh/main/sales/orders` AS __lg_v WHERE ((id > 0))) AS orders"
    )
