"""Discovery tells no more than a query would (issue 10 item 8): a caller whose row filter
applies to a table gets no row count, version, commit time, commit history or product
freshness for it, since those would reveal how many rows are hidden and when they change.

On main.sales.orders carol has `emea-only` and alice `no-test-orders`; erin owns sales and
has no row filter. Through the live uvicorn server on loopback (tests/api/conftest.py).
"""

from __future__ import annotations

import uuid

import pytest
from api_testkit import LG

ORDERS = "main.sales.orders"
WITHHELD = {
    "version": None,
    "last_commit": None,
    "row_count": None,
    "history_complete": False,
    "withheld": True,
}


@pytest.mark.parametrize("user", ["carol", "alice"])
def test_table_detail_leaves_out_counts_and_commits_under_a_row_filter(as_user, user) -> None:
    r = as_user(user).get(f"{LG}/tables/{ORDERS}")
    assert r.status_code == 200, r.text
    assert r.json()["access"]["row_filter_applies"] is True
    assert r.json()["delta"] == WITHHELD


def test_table_detail_keeps_counts_without_a_row_filter(as_user) -> None:
    d = as_user("erin").get(f"{LG}/tables/{ORDERS}").json()
    assert d["access"]["row_filter_applies"] is False
    assert d["delta"]["row_count"] == 8 and d["delta"]["withheld"] is False
    assert d["delta"]["version"] is not None and d["delta"]["last_commit"] is not None


@pytest.mark.parametrize("user", ["carol", "alice"])
def test_table_history_is_withheld_under_a_row_filter(as_user, user) -> None:
    r = as_user(user).get(f"{LG}/tables/{ORDERS}/history")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "full_name": ORDERS,
        "version": None,
        "complete": False,
        "withheld": True,
        "commits": [],
    }
    erin = as_user("erin").get(f"{LG}/tables/{ORDERS}/history").json()
    assert erin["commits"] and erin["withheld"] is False


def test_product_freshness_is_unknown_to_a_caller_under_a_row_filter(as_user) -> None:
    name = f"filtered-fresh-{uuid.uuid4().hex[:8]}"
    made = as_user("erin").post(
        f"{LG}/products",
        json={
            "name": name,
            "domain": "sales",
            "output_tables": [ORDERS],
            "freshness": "3650d",
            "stage": "active",
        },
    )
    assert made.status_code == 201, made.text
    assert made.json()["freshness_status"]["status"] == "fresh"  # the owner sees it all
    seen = as_user("carol").get(f"{LG}/products/{name}").json()
    assert seen["output_tables"] == [ORDERS]
    status = seen["freshness_status"]
    assert status["status"] == "unknown"
    assert status["tables"] == [
        {"table": ORDERS, "last_commit": None, "age_seconds": None, "fresh": None}
    ]
