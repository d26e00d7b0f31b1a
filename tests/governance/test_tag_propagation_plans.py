"""Tags follow the data, in the plans (no Spark): INSERT ... SELECT and a Spark Connect
DataFrame write carry the source columns' tags to the target before the data lands, and
say so on the statement's audit lines (issue 25, item 5)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from catalog.catalog import Catalog
from governance.planning.dispatch import Planner
from governance.planning.planned import PropagateTags
from governance.planning.writes import plan_frame_insert
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_text
from governance.rewrite.dynamic_views import PolicySql
from governance.sql.resolve import Namespace

POLICIES = """\
tags:
  main.sales.customers.email: [pii]
grants:
  - {id: copier-reads, principals: [copier], privileges: [select], on: main.sales.*}
  - {id: copier-writes, principals: [copier], privileges: [select, modify], on: main.marketing.*}
"""


@pytest.fixture(scope="module")
def planner(offline_catalog: Catalog) -> Planner:
    enforcer = PolicyEnforcer(load_policy_text({"p.yaml": POLICIES}))
    return Planner(
        catalog=offline_catalog,
        enforcer=enforcer,
        policy_sql=PolicySql(enforcer),
        user="copier",
        namespace=Namespace("main", "default"),
    )


def test_insert_select_learns_its_tags_from_sparks_plan_not_the_text(planner: Planner) -> None:
    """What INSERT ... SELECT carries is decided by lineage in Spark's analysed plan, just
    before it runs (tests/governance/test_tag_lineage.py): planning keeps the sources' tags
    by location and nothing in `before` guesses them from the text."""
    planned = planner.plan(
        "INSERT INTO main.marketing.campaigns (id, name) "
        "SELECT id, lower(email) FROM main.sales.customers"
    )
    assert planned.before == ()
    assert planned.carry is not None
    assert [(t, dict(c)) for t, c in planned.carry.reads.values()] == [
        ("main.sales.customers", {"email": frozenset({"pii"})})
    ]
    assert planned.carry.target == "main.marketing.campaigns"


def test_insert_of_untagged_columns_carries_nothing(planner: Planner) -> None:
    planned = planner.plan(
        "INSERT INTO main.marketing.campaigns (id, name) SELECT id, name FROM main.sales.customers"
    )
    assert planned.before == () and planned.propagated == []
    assert not [ln for ln in planned.audit_lines() if ln["cmd"] == "tagPropagate"]


def test_a_dataframe_write_carries_every_tag_it_read_to_every_column(planner: Planner) -> None:
    """A DataFrame's lineage is not traced (a Connect relation, not a sqlglot tree): each
    target column takes the tags of every column its governed reads read."""
    source = planner.plan("SELECT id, email FROM main.sales.customers")
    target = exp.to_table("main.marketing.campaigns")
    planned, _ = plan_frame_insert(planner.ctx, target, ["id", "name"], True, False, [source])
    assert planned.before == (
        PropagateTags("main", "marketing", "campaigns", (("id", ("pii",)), ("name", ("pii",)))),
    )


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE main.marketing.campaigns SET name = (SELECT max(email) FROM main.sales.customers)",
        "MERGE INTO main.marketing.campaigns c USING main.sales.customers s ON c.id = s.id "
        "WHEN MATCHED THEN UPDATE SET name = lower(s.email)",
        "MERGE INTO main.marketing.campaigns c USING main.sales.customers s ON c.id = s.id "
        "WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.email)",
    ],
)
def test_update_and_merge_carry_the_tags_of_the_values_they_assign(planner, sql) -> None:
    planned = planner.plan(sql)
    assert planned.before == (
        PropagateTags("main", "marketing", "campaigns", (("name", ("pii",)),)),
    )
    carried = [ln for ln in planned.audit_lines() if ln["cmd"] == "tagPropagate"]
    assert [(ln["src"], ln["columns"]) for ln in carried] == [("main.sales.customers", ["email"])]


def test_a_column_read_only_in_merges_condition_carries_nothing(planner) -> None:
    planned = planner.plan(
        "MERGE INTO main.marketing.campaigns c USING main.sales.customers s "
        "ON c.id = s.id AND s.email LIKE '%@x' WHEN MATCHED THEN UPDATE SET name = s.name"
    )
    assert planned.before == ()
