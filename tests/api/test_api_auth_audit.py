"""Bearer tokens, and the audit line every request writes before it is answered."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from api_testkit import LG, SECRET, UC, read_audit, token_of

from api.auth import TokenAuth, Unauthenticated, sign_token, token_hash
from governance.config import ApiConfig, ApiToken


def _line(lg, context: str) -> dict[str, str]:
    lines = [ln for ln in read_audit(lg) if ln.get("callerContext") == context]
    assert len(lines) == 1, lines
    return lines[0]


def _ctx() -> dict[str, str]:
    return {"X-Lakegate-Caller-Context": f"test-{uuid.uuid4().hex}"}


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer wrong-token",
        "Basic abc",
        f"Bearer {sign_token('wrong-secret-0123456789', 'root')}",
    ],
)
def test_no_or_invalid_token_is_401_and_audited(anonymous, api_lakegate, header) -> None:
    h = _ctx()
    if header:
        h["Authorization"] = header
    r = anonymous.get(f"{UC}/catalogs", headers=h)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error_code"] == "UNAUTHENTICATED"
    line = _line(api_lakegate, h["X-Lakegate-Caller-Context"])
    assert (line["allowed"], line["succeeded"], line["cmd"], line["proto"]) == (
        "false",
        "false",
        "listCatalogs",
        "rest",
    )
    assert line["ugi"].startswith("anonymous ")
    assert "wrong-token" not in line["reason"]


def test_signed_tokens(anonymous) -> None:
    good = sign_token(SECRET, "carol", 60)
    r = anonymous.get(f"{LG}/whoami", headers={"Authorization": f"Bearer {good}"})
    assert r.status_code == 200
    assert r.json()["user"] == "carol" and r.json()["auth"] == "signed"
    assert "emea-analysts" in r.json()["groups"] and r.json()["token_expires"]
    expired = sign_token(SECRET, "carol", -5)
    assert (
        anonymous.get(f"{LG}/whoami", headers={"Authorization": f"Bearer {expired}"}).json()[
            "message"
        ]
        == "token expired"
    )
    _, expiry, sig = good.rsplit(".", 2)
    forged = f"root.{expiry}.{sig}"
    assert (
        anonymous.get(f"{LG}/whoami", headers={"Authorization": f"Bearer {forged}"}).status_code
        == 401
    )


def test_token_auth_unit() -> None:
    auth = TokenAuth(ApiConfig(tokens=(ApiToken("dana", token_hash("s3cret")),), secret="k" * 16))
    assert auth.authenticate("Bearer s3cret").user == "dana"
    assert auth.authenticate("bearer s3cret").method == "token"
    assert auth.authenticate(f"Bearer {sign_token('k' * 16, 'a.b@x')}").user == "a.b@x"
    with pytest.raises(Unauthenticated):
        auth.authenticate("Bearer S3CRET")
    with pytest.raises(Unauthenticated):
        TokenAuth(ApiConfig()).authenticate("Bearer anything.123.abc")


def test_every_request_is_audited_with_operation_and_table(as_user, api_lakegate) -> None:
    bob = as_user("bob")
    cases = [
        (f"{UC}/tables/main.sales.orders", 200, "getTable", "main.sales.orders", "true"),
        (
            f"{UC}/tables/main.marketing.campaigns",
            404,
            "getTable",
            "main.marketing.campaigns",
            "false",
        ),
        (f"{UC}/tables/main.sales.none", 404, "getTable", "main.sales.none", "true"),
        (
            f"{LG}/tables/main.sales.customers",
            200,
            "getTableDetail",
            "main.sales.customers",
            "true",
        ),
        (f"{UC}/schemas?catalog_name=main", 200, "listSchemas", "null", "true"),
    ]
    for path, status, cmd, src, allowed in cases:
        h = _ctx()
        assert bob.get(path, headers=h).status_code == status
        line = _line(api_lakegate, h["X-Lakegate-Caller-Context"])
        assert line["ugi"] == "bob (auth:TOKEN)"
        assert (line["cmd"], line["src"], line["allowed"], line["proto"], line["ip"]) == (
            cmd,
            src,
            allowed,
            "rest",
            "/127.0.0.1",
        )
        assert line["succeeded"] == ("true" if status == 200 else "false")


def test_audit_failure_refuses_the_request(api_lakegate, tmp_path: Path) -> None:
    """If the audit line cannot be written the caller gets 503 and none of the answer."""
    from api.app import create_app
    from governance.session.governed import Lakegate

    cfg = replace(api_lakegate.config, audit=tmp_path / "audit")
    lg = Lakegate(cfg)
    app = create_app(lg)
    lg.audit.close()  # every later write raises AuditWriteError

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            h = {"Authorization": f"Bearer {token_of('root')}"}
            return [
                await c.get(f"{UC}/tables/main.hr.employees", headers=h),
                await c.get(f"{UC}/catalogs", headers=h),
                await c.get(f"{UC}/catalogs"),
            ]

    try:
        for r in asyncio.run(run()):
            assert r.status_code == 503
            assert r.json() == {
                "error_code": "TEMPORARILY_UNAVAILABLE",
                "message": "audit log unavailable: request refused",
            }
            assert "salary" not in r.text and "main" not in r.text
    finally:
        lg.catalog.store.close()


def test_openapi_documents_bearer_auth(anonymous) -> None:
    spec = anonymous.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    get_table = spec["paths"][f"{UC}/tables/{{full_name}}"]["get"]
    assert get_table["security"] == [{"bearer": []}]
    assert {"404", "401", "503"} <= set(get_table["responses"])
    assert "422" not in get_table["responses"]
