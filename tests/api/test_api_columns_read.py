"""Over REST, a statement's audit lines name the columns it reads after pruning, as the
embedded session's do (docs/audit-columns.md; tests/governance/test_columns_read.py holds
the whole table of operations)."""

from __future__ import annotations

import uuid

import pytest
from api_testkit import LG, read_audit

CUS = "main.sales.customers"
ORD = "main.sales.orders"


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        (f"SELECT name FROM (SELECT name, email, phone FROM {CUS}) t", {CUS: "name"}),
        (f"SELECT id FROM {ORD} WHERE region = 'EMEA'", {ORD: "id,region"}),
        (f"SELECT count(*) FROM {ORD}", {ORD: "null"}),
        (
            f"SELECT o.amount, c.name FROM {ORD} o JOIN {CUS} c ON o.customer_id = c.id",
            {ORD: "customer_id,amount", CUS: "id,name"},
        ),
    ],
)
def test_rest_statements_record_the_columns_they_read(
    as_user, api_lakegate, statement, expected
) -> None:
    ctx = f"cols-{uuid.uuid4().hex}"
    r = as_user("carol").post(
        f"{LG}/statements",
        json={"statement": statement},
        headers={"X-Lakegate-Caller-Context": ctx},
    )
    assert r.status_code == 200, r.text
    lines = [
        ln
        for ln in read_audit(api_lakegate)
        if ln.get("callerContext") == ctx and ln["cmd"] == "select"
    ]
    assert {ln["src"]: ln["columns"] for ln in lines} == expected
