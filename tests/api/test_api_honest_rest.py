"""REST that cannot forget authentication and answers honestly: every route refuses a
missing token before reading anything, the real caller is on record for unknown routes,
UC's credential-vending routes say Lakegate does not vend credentials, `tables/{}/exists`
answers like `getTable` hides, and what the OpenAPI schema accepts the server accepts."""

from __future__ import annotations

import re
import uuid

import pytest
from api_testkit import LG, UC, read_audit
from fastapi import APIRouter

NO_CREDENTIALS = (
    "Lakegate does not vend storage credentials; query through the gateway or /statements"
)
VENDING = [
    "temporary-table-credentials",
    "temporary-path-credentials",
    "temporary-volume-credentials",
    "temporary-model-version-credentials",
]


def _ctx() -> dict[str, str]:
    return {"X-Lakegate-Caller-Context": f"test-{uuid.uuid4().hex}"}


def _line(lg, headers: dict[str, str]) -> dict[str, str]:
    ctx = headers["X-Lakegate-Caller-Context"]
    lines = [ln for ln in read_audit(lg) if ln.get("callerContext") == ctx]
    assert len(lines) == 1, lines
    return lines[0]


def _operations(anonymous) -> list[tuple[str, str, str]]:
    spec = anonymous.get("/openapi.json").json()
    return [
        (method.upper(), re.sub(r"\{[^}]+\}", "main.sales.orders", path), op["operationId"])
        for path, item in sorted(spec["paths"].items())
        for method, op in item.items()
    ]


def test_every_route_in_the_schema_refuses_a_request_without_token(anonymous, api_lakegate) -> None:
    """Before the body is read: a malformed body without a token is 401, not 400."""
    ops = _operations(anonymous)
    assert len(ops) >= 25
    for method, path, op_id in ops:
        h = {**_ctx(), "Content-Type": "application/json"}
        r = anonymous.request(method, path, headers=h, content=b"{not json")
        assert (op_id, r.status_code) == (op_id, 401)
        assert r.json()["error_code"] == "UNAUTHENTICATED"
        line = _line(api_lakegate, h)
        assert (line["cmd"], line["allowed"], line["ugi"]) == (
            op_id,
            "false",
            "anonymous (auth:TOKEN)",
        )


def test_create_app_refuses_a_router_without_authentication(api_lakegate, monkeypatch) -> None:
    import api.app

    open_router = APIRouter()
    open_router.get("/open", operation_id="open")(lambda: {})
    monkeypatch.setattr(api.app, "ROUTERS", (*api.app.ROUTERS, (open_router, LG)))
    with pytest.raises(RuntimeError, match=r"routes without authentication: .*/open"):
        api.app.create_app(api_lakegate)


def test_unknown_route_with_valid_token_is_audited_as_the_caller(as_user, api_lakegate) -> None:
    h = _ctx()
    r = as_user("bob").get(f"{LG}/no-such-route", headers=h)
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"
    line = _line(api_lakegate, h)
    assert (line["ugi"], line["cmd"], line["succeeded"]) == ("bob (auth:TOKEN)", "unknown", "false")


def test_unknown_route_without_token_is_401(anonymous, api_lakegate) -> None:
    """Which routes exist is not told to a caller without a token."""
    h = _ctx()
    r = anonymous.get(f"{LG}/no-such-route", headers=h)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert _line(api_lakegate, h)["ugi"] == "anonymous (auth:TOKEN)"


@pytest.mark.parametrize("route", VENDING)
@pytest.mark.parametrize("user", ["bob", "root"])
def test_uc_credential_vending_answers_501(as_user, api_lakegate, route: str, user: str) -> None:
    h = _ctx()
    r = as_user(user).post(f"{UC}/{route}", headers=h, json={"table_id": "x", "operation": "READ"})
    assert r.status_code == 501
    assert r.json() == {"error_code": "NOT_IMPLEMENTED", "message": NO_CREDENTIALS}
    line = _line(api_lakegate, h)
    assert (line["ugi"], line["allowed"], line["reason"]) == (
        f"{user} (auth:TOKEN)",
        "false",
        NO_CREDENTIALS,
    )


@pytest.mark.parametrize(
    ("table", "exists", "allowed"),
    [
        ("main.sales.orders", True, "true"),
        ("MAIN.Sales.Orders", True, "true"),
        ("main.marketing.campaigns", False, "false"),  # hidden from bob: same as missing
        ("main.sales.nothing_here", False, "true"),
    ],
)
def test_table_exists_hides_like_get_table(
    as_user, api_lakegate, table: str, exists: bool, allowed: str
) -> None:
    h = _ctx()
    r = as_user("bob").get(f"{UC}/tables/{table}/exists", headers=h)
    assert (r.status_code, r.json()) == (200, {"table_exists": exists})
    line = _line(api_lakegate, h)
    assert (line["cmd"], line["src"], line["allowed"]) == ("getTableExists", table.lower(), allowed)


def test_table_exists_refuses_a_name_that_is_not_three_parts(as_user) -> None:
    r = as_user("bob").get(f"{UC}/tables/main.sales/exists")
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("token", "status"),
    [
        ("gICA", 200),  # base64url of bytes that are not UTF-8: a position, not an error
        ("AA", 200),
        ("_-8", 200),
        ("A", 400),  # not base64url: outside the schema's pattern
        ("bWFpbg==", 400),  # padded
    ],
)
def test_page_tokens_the_schema_accepts_are_accepted(as_user, token: str, status: int) -> None:
    r = as_user("bob").get(
        f"{UC}/tables", params={"catalog_name": "main", "schema_name": "sales", "page_token": token}
    )
    assert r.status_code == status, r.text
    pattern = re.compile(
        next(
            p["schema"]["pattern"]
            for p in as_user("bob")
            .get("/openapi.json")
            .json()["paths"][f"{UC}/tables"]["get"]["parameters"]
            if p["name"] == "page_token"
        )
    )
    assert bool(pattern.fullmatch(token)) == (status == 200)


@pytest.mark.parametrize("timeout", [1e-9, 0.001, 0.5])
def test_absurd_timeout_seconds_are_refused_before_spark_runs(
    as_user, api_lakegate, timeout: float
) -> None:
    h = _ctx()
    r = as_user("bob").post(
        f"{LG}/statements", headers=h, json={"statement": "SELECT 1", "timeout_seconds": timeout}
    )
    assert r.status_code == 400
    assert r.json()["message"].startswith("invalid body.timeout_seconds")
    assert _line(api_lakegate, h)["stmtHash"] == "null"  # the route body never ran


def test_storage_credentials_reach_only_managers_and_never_in_a_location(
    as_user, api_lakegate, app
) -> None:
    """Credential-like table properties are for the table's managers (erin) only; a
    location's `user:password@` and query are never answered, to anyone."""
    from dataclasses import replace

    cat = api_lakegate.catalog
    orders = cat.table("main", "sales", "orders")
    cat.register_table(
        replace(
            orders,
            location="s3a://AKIA:pw-in-url@lake/orders?sig=sig-in-url",
            properties={
                **orders.properties,
                "delta.appendOnly": "false",
                "fs.s3a.secret.key": "s3-secret",
                "azure.sas.token": "sas-secret",
            },
        ),
        replace=True,
    )
    app.state.service.discovery.invalidate()
    try:
        alice = as_user("alice").get(f"{UC}/tables/main.sales.orders").json()
        erin = as_user("erin").get(f"{UC}/tables/main.sales.orders").json()
    finally:
        cat.register_table(orders, replace=True)
        app.state.service.discovery.invalidate()
    assert alice["properties"]["delta.appendOnly"] == "false"
    assert "storage_location" not in alice
    assert "secret" not in str(alice) and "pw-in-url" not in str(alice)
    assert erin["storage_location"] == "s3a://lake/orders"
    assert erin["properties"]["fs.s3a.secret.key"] == "s3-secret"
    assert "pw-in-url" not in str(erin) and "sig-in-url" not in str(erin)
