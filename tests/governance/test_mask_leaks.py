"""Issue 10 item 10: a mask shows no more than its user may see.

A custom mask may read other columns of the raw row, but when it reads a column hidden from
the user, any statement by that user reading the masked column is refused, naming the mask.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from catalog.catalog import Catalog
from governance.errors import AccessDenied
from governance.planning.dispatch import Planner
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir
from governance.rewrite.dynamic_views import PolicySql
from governance.sql.resolve import Namespace

LEAK_POLICIES = """
grants:
  - {id: all-read-orders, principals: ["*"], privileges: [select], on: main.sales.orders}
  - id: leaky-no-customer
    principals: [leaky, filtered]
    effect: deny
    privileges: [select]
    on: main.sales.orders
    columns: [customer_id]
row_filters:
  - {id: f-customer, on: main.sales.orders, principals: [filtered], where: "customer_id > 10"}
column_masks:
  - id: m-id-leaks
    on: main.sales.orders
    columns: [id]
    mask: custom
    expression: "{col} * 0 + customer_id"
    principals: [leaky, seer]
  - id: m-region-raw
    on: main.sales.orders
    columns: [region]
    mask: custom
    expression: "concat({col}, '/', CAST(amount AS STRING))"
    principals: [seer]
  - {id: m-amount, on: main.sales.orders, columns: [amount], mask: "null", principals: [seer]}
"""


@pytest.fixture(scope="module")
def leak_planner(
    offline_catalog: Catalog,
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], Planner]:
    root: Path = tmp_path_factory.mktemp("leak-policies")
    (root / "p.yaml").write_text(textwrap.dedent(LEAK_POLICIES))
    enforcer = PolicyEnforcer(load_policy_dir(root))
    sql = PolicySql(enforcer)

    def make(user: str) -> Planner:
        return Planner(
            catalog=offline_catalog,
            enforcer=enforcer,
            policy_sql=sql,
            user=user,
            namespace=Namespace("main", "sales"),
        )

    return make


@pytest.mark.parametrize(
    "stmt",
    [
        "SELECT id FROM orders",
        "SELECT * FROM orders",
        "SELECT o.* FROM orders o",
        "SELECT region FROM orders WHERE id = 1",
        "SELECT count(*) FROM orders GROUP BY id",
    ],
)
def test_statement_reading_mask_over_hidden_column_is_refused(leak_planner, stmt: str) -> None:
    with pytest.raises(AccessDenied) as exc:
        leak_planner("leaky").plan(stmt)
    assert "column mask m-id-leaks" in str(exc.value)
    assert "reads column customer_id" in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "stmt",
    [
        "SELECT region, amount FROM orders",
        "SELECT count(*) FROM orders",
    ],
)
def test_statement_not_reading_the_leaking_mask_still_runs(leak_planner, stmt: str) -> None:
    assert leak_planner("leaky").plan(stmt).sql


def test_mask_reading_a_visible_column_is_allowed(leak_planner) -> None:
    planned = leak_planner("seer").plan("SELECT id FROM orders")
    assert "customer_id" in planned.sql


def test_row_filter_reading_a_hidden_column_stays_allowed(leak_planner) -> None:
    planned = leak_planner("filtered").plan("SELECT id, region FROM orders")
    assert "customer_id > 10" in planned.sql


def test_mask_reading_another_masked_column_sees_the_raw_value(leak_planner) -> None:
    """Masks apply to the raw row (as in Trino): `amount` inside m-region-raw is unmasked."""
    planned = leak_planner("seer").plan("SELECT region, amount FROM orders")
    assert "CONCAT(`region`, '/', CAST(amount AS STRING)) AS `region`" in planned.sql
    assert "CAST(NULL AS DECIMAL(10, 2)) AS `amount`" in planned.sql


# End to end on real Delta ------------------------------------------------------------------

E2E_POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: all-read, principals: ["*"], privileges: [select], on: m.s.orders}
  - {id: no-custkey, principals: [leaky], effect: deny, privileges: [select], on: m.s.orders,
     columns: [custkey]}
column_masks:
  - {id: m-orderkey, on: m.s.orders, columns: [orderkey], mask: custom,
     expression: "{col} * 0 + custkey", principals: [leaky]}
"""


def test_select_masked_column_never_returns_denied_values_on_delta(make_lakegate) -> None:
    lg = make_lakegate(
        "maskleak",
        E2E_POLICIES,
        [
            "CREATE CATALOG m",
            "CREATE SCHEMA m.s",
            "CREATE TABLE m.s.orders (orderkey INT, custkey INT, status STRING)",
            "INSERT INTO m.s.orders VALUES (1, 901, 'open'), (2, 902, 'done')",
        ],
    )
    leaky = lg.session("leaky")
    with pytest.raises(AccessDenied, match=r"column mask m-orderkey .* reads column custkey"):
        leaky.sql("SELECT orderkey FROM m.s.orders").collect()
    rows = leaky.sql("SELECT status FROM m.s.orders ORDER BY status").collect()
    assert [r[0] for r in rows] == ["done", "open"]
