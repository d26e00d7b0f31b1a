"""Each persona discovers exactly what the reference policies let it read, over HTTP."""

from __future__ import annotations

import pytest
from api_testkit import UC, all_visible

ORDERS = ["id", "customer_id", "region", "amount", "order_date", "is_test"]
CUSTOMERS = ["id", "name", "email", "phone", "ssn", "country"]
EMPLOYEES = ["id", "name", "department", "salary", "birth_date"]
CAMPAIGNS = ["id", "name", "budget", "starts"]
NO_SSN = [c for c in CUSTOMERS if c != "ssn"]
ANALYST = {
    "main.sales.orders": ORDERS,
    "main.sales.customers": NO_SSN,
    "main.hr.employees": [c for c in EMPLOYEES if c != "salary"],
}

EXPECTED: dict[str, dict[str, list[str]]] = {
    "alice": ANALYST,
    "carol": ANALYST,
    "dana": ANALYST,
    "bob": {**ANALYST, "main.sales.customers": [c for c in NO_SSN if c != "phone"]},
    "erin": {"main.sales.orders": ORDERS, "main.sales.customers": CUSTOMERS},
    "harriet": {"main.hr.employees": EMPLOYEES},
    "mallory": {"main.marketing.campaigns": CAMPAIGNS},
    "frank": {},
    "root": {
        "main.sales.orders": ORDERS,
        "main.sales.customers": CUSTOMERS,
        "main.hr.employees": EMPLOYEES,
        "main.marketing.campaigns": CAMPAIGNS,
    },
}


@pytest.mark.parametrize("user", sorted(EXPECTED))
def test_each_persona_discovers_only_what_it_may_read(as_user, user: str) -> None:
    seen = all_visible(as_user(user))
    assert {k: v for k, v in seen.items() if k.startswith("main.")} == EXPECTED[user]
    # the audit table (system.access.audit) is for auditors and admins only
    assert ("system.access.audit" in seen) == (user in ("frank", "root"))


@pytest.mark.parametrize("user", sorted(EXPECTED))
def test_get_table_agrees_with_listing(as_user, user: str) -> None:
    """Visible tables are fetched with the same columns; every other one is a plain 404."""
    c = as_user(user)
    for name in EXPECTED["root"]:
        r = c.get(f"{UC}/tables/{name}")
        if name in EXPECTED[user]:
            assert r.status_code == 200
            cols = r.json()["columns"]
            assert [col["name"] for col in cols] == EXPECTED[user][name]
            assert [col["position"] for col in cols] == list(range(len(cols)))
        else:
            assert r.status_code == 404
            assert r.json() == {"error_code": "NOT_FOUND", "message": f"Table not found: {name}"}


def test_hidden_table_is_indistinguishable_from_a_missing_one(as_user) -> None:
    bob = as_user("bob")
    hidden = bob.get(f"{UC}/tables/main.marketing.campaigns")
    missing = bob.get(f"{UC}/tables/main.marketing.nothing_here")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["message"].replace("campaigns", "X") == missing.json()["message"].replace(
        "nothing_here", "X"
    )
    schema = bob.get(f"{UC}/schemas/main.marketing")
    assert schema.status_code == 404
    assert schema.json()["error_code"] == "NOT_FOUND"
    assert (
        bob.get(
            f"{UC}/tables", params={"catalog_name": "main", "schema_name": "marketing"}
        ).status_code
        == 404
    )


def test_catalog_and_schema_lists_leave_out_what_holds_nothing_visible(as_user) -> None:
    frank = as_user("frank")
    assert [c["name"] for c in frank.get(f"{UC}/catalogs").json()["catalogs"]] == ["system"]
    assert frank.get(f"{UC}/catalogs/main").status_code == 404
    assert [c["name"] for c in as_user("alice").get(f"{UC}/catalogs").json()["catalogs"]] == [
        "main"
    ]
    schemas = as_user("alice").get(f"{UC}/schemas", params={"catalog_name": "main"}).json()
    assert [s["full_name"] for s in schemas["schemas"]] == ["main.hr", "main.sales"]
    mallory = as_user("mallory").get(f"{UC}/schemas", params={"catalog_name": "main"}).json()
    assert [s["name"] for s in mallory["schemas"]] == ["marketing"]


def test_storage_location_only_for_managers(as_user) -> None:
    assert "storage_location" not in as_user("alice").get(f"{UC}/tables/main.sales.orders").json()
    erin = as_user("erin").get(f"{UC}/tables/main.sales.orders").json()
    assert erin["storage_location"].endswith("/main/sales/orders")
    assert erin["table_type"] == "MANAGED"
    assert erin["owner"] == "group:sales-owners"


def test_pagination_walks_every_visible_table_once(as_user) -> None:
    root = as_user("root")
    seen, token, pages = [], None, 0
    while True:
        params = {"catalog_name": "main", "schema_name": "sales", "max_results": 1}
        if token:
            params["page_token"] = token
        body = root.get(f"{UC}/tables", params=params).json()
        pages += 1
        seen += [t["name"] for t in body["tables"]]
        token = body.get("next_page_token")
        if not token:
            break
    assert seen == ["customers", "orders"] and pages == 2
    full = root.get(
        f"{UC}/tables", params={"catalog_name": "main", "schema_name": "sales", "max_results": 0}
    ).json()
    assert [t["name"] for t in full["tables"]] == seen and "next_page_token" not in full


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"catalog_name": "main", "schema_name": "sales", "max_results": -1}, "max_results"),
        ({"catalog_name": "main", "schema_name": "sales", "max_results": "x"}, "max_results"),
        ({"catalog_name": "main", "schema_name": "sales", "page_token": "%%%"}, "page_token"),
        ({"catalog_name": "main"}, "schema_name"),
    ],
)
def test_bad_arguments_are_invalid_argument(as_user, params: dict, message: str) -> None:
    r = as_user("alice").get(f"{UC}/tables", params=params)
    assert r.status_code == 400
    assert r.json()["error_code"] == "INVALID_ARGUMENT" and message in r.json()["message"]


def test_column_types_in_unity_catalog_shape(as_user) -> None:
    cols = {
        c["name"]: c
        for c in as_user("root").get(f"{UC}/tables/main.sales.orders").json()["columns"]
    }
    assert cols["amount"]["type_name"] == "DECIMAL"
    assert (cols["amount"]["type_precision"], cols["amount"]["type_scale"]) == (10, 2)
    assert cols["order_date"]["type_name"] == "DATE"
    assert cols["id"]["type_name"] == "INT" and cols["id"]["type_text"] == "int"
    assert '"type":"integer"' in cols["id"]["type_json"].replace(" ", "")
    assert cols["is_test"]["type_name"] == "BOOLEAN"
