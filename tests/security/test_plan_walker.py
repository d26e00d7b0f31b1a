"""The JVM-side plan walker (one py4j call per plan) describes plans faithfully: no name in
a hostile statement can forge a node, a path or a column of the description."""

from __future__ import annotations

from typing import Any

import pytest

from governance.verify.plan import describe_plan

FORGERIES = [
    "x\n99\t-1\tOneRowRelation\t0\t1\t\t",  # a fake line
    "a\tb",  # a fake field
    "c\x1fd",  # a fake list separator
    "back\\slash\\t\\n",  # escapes in the name itself
    "\r",
]


def _analyzed(lakehouse: Any, sql: str) -> Any:
    return lakehouse.spark.sql(sql)._jdf.queryExecution().analyzed()


@pytest.mark.parametrize("name", FORGERIES, ids=["line", "tab", "us", "backslash", "cr"])
def test_a_column_name_cannot_forge_the_description(lakehouse, name):
    quoted = "`" + name.replace("`", "``") + "`"
    plan = _analyzed(lakehouse, f"SELECT 1 AS {quoted}")
    nodes, _ = describe_plan(plan)
    assert [n.kind for n in nodes] == ["Project", "OneRowRelation"]
    assert nodes[0].columns == (name.lower(),)


def test_every_node_kind_and_relation_path_is_described(lakehouse):
    loc = lakehouse.catalog.table("main", "sales", "orders").location
    plan = _analyzed(
        lakehouse,
        f"SELECT id FROM delta.`{loc}` WHERE id IN (SELECT customer_id FROM delta.`{loc}`)",
    )
    nodes, handles = describe_plan(plan)
    relations = [n for n in nodes if n.kind == "LogicalRelation"]
    assert len(relations) == 2  # the subquery's read is described too
    assert all(n.leaf and n.paths == [loc] for n in relations)
    assert nodes[0].parent == -1 and all(n.parent < n.id for n in nodes)
    assert str(handles[1].getClass().getSimpleName()) == nodes[0].kind
