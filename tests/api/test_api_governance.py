"""Lakegate's extensions: effective access, tags, domain, Delta history, search, whoami."""

from __future__ import annotations

from datetime import datetime

import pytest
from api_testkit import LG


def _detail(client, table: str) -> dict:
    r = client.get(f"{LG}/tables/{table}")
    assert r.status_code == 200, r.text
    return r.json()


def test_carol_sees_her_masks_and_that_a_filter_applies_but_not_its_text(as_user) -> None:
    d = _detail(as_user("carol"), "main.sales.customers")
    assert d["access"]["privileges"] == ["select"]
    assert d["access"]["row_filter_applies"] is True
    assert d["access"]["row_filters"] is None
    masks = {m["column"]: (m["kind"], m["policy"]) for m in d["access"]["masked_columns"]}
    assert masks == {"email": ("hash", None), "phone": ("last4", None)}  # ids: managers only
    cols = {c["name"]: c for c in d["columns"]}
    assert "ssn" not in cols
    assert cols["email"]["tags"] == ["pii"] and cols["email"]["mask"]["kind"] == "hash"
    assert cols["country"]["mask"] is None
    assert d["tags"] == ["customer-data"]
    assert d["domain"] == {
        "name": "sales",
        "description": "Orders, customers and payments",
        "owners": ["group:sales-owners"],
    }
    assert "NOT is_test" not in str(d) and "country IN" not in str(d)


def test_managers_see_filter_text(as_user) -> None:
    d = _detail(as_user("erin"), "main.sales.orders")
    assert "manage" in d["access"]["privileges"]
    assert d["access"]["row_filter_applies"] is False
    filters = {f["id"]: f for f in d["access"]["row_filters"]}
    assert filters["emea-only"]["where"] == "region = 'EMEA'"
    assert filters["no-test-orders"]["kind"] == "restrictive"
    assert filters["emea-only"]["principals"] == ["group:emea-analysts"]
    assert not any(f["applies_to_caller"] for f in filters.values())


def test_dana_reads_pii_in_clear_and_birth_year_only(as_user) -> None:
    dana = _detail(as_user("dana"), "main.sales.customers")
    assert dana["access"]["masked_columns"] == []
    emp = _detail(as_user("dana"), "main.hr.employees")
    assert [(m["column"], m["kind"]) for m in emp["access"]["masked_columns"]] == [
        ("birth_date", "year")
    ]
    assert "salary" not in [c["name"] for c in emp["columns"]]


def test_delta_version_history_and_row_count_match_spark(as_user, api_lakegate, spark) -> None:
    """Read from _delta_log in Python; checked against Delta's own DESCRIBE HISTORY (erin owns
    sales and no row filter applies to her, so nothing is withheld)."""
    table = api_lakegate.catalog.table("main", "sales", "orders")
    hist = spark.sql(f"DESCRIBE HISTORY delta.`{table.location}`").collect()
    d = _detail(as_user("erin"), "main.sales.orders")["delta"]
    assert d["version"] == max(h["version"] for h in hist)
    assert d["row_count"] == spark.read.format("delta").load(table.location).count() == 8
    assert d["history_complete"] is True
    h = as_user("erin").get(f"{LG}/tables/main.sales.orders/history").json()
    assert [c["version"] for c in h["commits"]] == [r["version"] for r in hist]
    assert [c["operation"] for c in h["commits"]] == [r["operation"] for r in hist]
    # Delta reports the commit file's time, we report commitInfo's: the same moment
    for c, r in zip(h["commits"], hist, strict=True):
        ours = datetime.fromisoformat(c["timestamp"].replace("Z", "+00:00")).timestamp()
        assert abs(ours - r["timestamp"].timestamp()) < 5
    one = as_user("erin").get(f"{LG}/tables/main.sales.orders/history", params={"limit": 1})
    assert len(one.json()["commits"]) == 1


def test_extension_routes_hide_invisible_tables(as_user) -> None:
    bob = as_user("bob")
    for path in ("tables/main.marketing.campaigns", "tables/main.marketing.campaigns/history"):
        r = bob.get(f"{LG}/{path}")
        assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("user", "query", "expected"),
    [
        ("alice", "customers", ["main.sales.customers"]),
        ("alice", "pii", ["main.hr.employees", "main.sales.customers"]),
        ("alice", "ssn", []),  # the column is hidden from analysts: it must not match
        ("erin", "ssn", ["main.sales.customers"]),
        ("bob", "phone", []),
        ("alice", "phone", ["main.sales.customers"]),
        ("bob", "campaigns", []),
        ("mallory", "budget", ["main.marketing.campaigns"]),
        ("alice", "region amount", ["main.sales.orders"]),
        ("alice", "salary", []),
    ],
)
def test_search_respects_column_visibility(as_user, user: str, query: str, expected) -> None:
    r = as_user(user).get(f"{LG}/search", params={"q": query})
    assert r.status_code == 200
    assert sorted(h["full_name"] for h in r.json()["results"]) == expected


def test_search_ranks_name_matches_first(as_user) -> None:
    hits = as_user("root").get(f"{LG}/search", params={"q": "orders"}).json()["results"]
    assert hits[0]["full_name"] == "main.sales.orders" and "name" in hits[0]["matched"]


def test_whoami(as_user) -> None:
    me = as_user("erin").get(f"{LG}/whoami").json()
    assert me == {
        "user": "erin",
        "groups": ["sales-owners"],
        "auth": "token",
        "token_expires": None,
        "domains_owned": ["sales"],
    }
