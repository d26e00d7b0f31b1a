"""Signing in to the console: an opaque session id (never the token) lands in an HttpOnly,
SameSite=Strict cookie (Secure over TLS) scoped to /ui; signing out ends the session on the
server, so the cookie replayed later is refused; failed sign-ins are limited per address
(429, Retry-After, on record); the sign-in and sign-out POSTs are refused without the form's
CSRF value or from another origin; nothing under /ui may be cached; a page without a session
goes to the sign-in page, on record as refused; the cookie is no key to the JSON API."""

from __future__ import annotations

import uuid

import httpx
import pytest
from api_testkit import LG, read_audit, token_of
from console_testkit import PAGES, signed_in


def _form(c: httpx.Client) -> str:
    r = c.get("/ui/signin")
    assert r.status_code == 200
    return c.cookies["lakegate_csrf"]


def _cookie(r: httpx.Response, name: str) -> str:
    found = [h for h in r.headers.get_list("set-cookie") if h.startswith(f"{name}=")]
    assert len(found) == 1, r.headers.get_list("set-cookie")
    return found[0]


def test_sign_in_sets_an_httponly_samesite_strict_cookie_for_ui_only(console_server) -> None:
    with httpx.Client(base_url=console_server) as c:
        csrf = _form(c)
        r = c.post("/ui/signin", data={"token": token_of("alice"), "csrf": csrf})
    assert (r.status_code, r.headers["location"]) == (303, "/ui/catalog")
    flags = [f.strip().lower() for f in _cookie(r, "lakegate_session").split(";")]
    assert {"httponly", "samesite=strict", "path=/ui"} <= set(flags)
    assert "secure" not in flags  # plain http on loopback: a Secure cookie would not come back


def test_sign_in_over_tls_marks_the_cookie_secure(console_app) -> None:
    from starlette.testclient import TestClient

    with TestClient(console_app, base_url="https://testserver") as c:
        c.get("/ui/signin")
        r = c.post(
            "/ui/signin",
            data={"token": token_of("alice"), "csrf": c.cookies["lakegate_csrf"]},
            headers={"Origin": "https://testserver"},
            follow_redirects=False,
        )
    assert r.status_code == 303
    flags = [f.strip().lower() for f in _cookie(r, "lakegate_session").split(";")]
    assert {"secure", "httponly", "samesite=strict"} <= set(flags)


@pytest.mark.parametrize(
    ("csrf", "headers", "reason"),
    [
        (
            None,
            {},
            "request refused: the CSRF token of the form does not match (reload the page)",
        ),
        (
            "forged",
            {},
            "request refused: the CSRF token of the form does not match (reload the page)",
        ),
        (
            "cookie",
            {"Origin": "http://evil.example"},
            "request refused: it comes from another origin",
        ),
        ("cookie", {"Sec-Fetch-Site": "cross-site"}, "request refused: it comes from another site"),
    ],
    ids=["no-csrf", "wrong-csrf", "foreign-origin", "cross-site"],
)
def test_sign_in_is_refused_without_csrf_or_from_another_origin(
    console_server, console_lakegate, csrf, headers, reason
) -> None:
    ctx = f"csrf-{uuid.uuid4().hex}"
    with httpx.Client(base_url=console_server) as c:
        value = _form(c)
        data = {"token": token_of("alice")}
        if csrf is not None:
            data["csrf"] = value if csrf == "cookie" else csrf
        r = c.post("/ui/signin", data=data, headers={**headers, "X-Lakegate-Caller-Context": ctx})
    assert r.status_code == 403
    assert reason in r.text
    assert "lakegate_session=" not in " ".join(r.headers.get_list("set-cookie"))
    line = [ln for ln in read_audit(console_lakegate) if ln.get("callerContext") == ctx]
    assert [(ln["cmd"], ln["allowed"], ln["reason"]) for ln in line] == [
        ("consoleSignIn", "false", reason)
    ]


def test_a_wrong_token_is_refused_and_sets_no_session(console_server) -> None:
    with httpx.Client(base_url=console_server) as c:
        r = c.post("/ui/signin", data={"token": "tok-nobody", "csrf": _form(c)})
    assert r.status_code == 401
    assert "That token was not accepted." in r.text
    assert "lakegate_session=" not in " ".join(r.headers.get_list("set-cookie"))


def test_sign_out_needs_the_csrf_value_and_then_clears_the_session(console_server) -> None:
    with signed_in(console_server, "alice") as c:
        refused = c.post("/ui/signout", data={"csrf": "forged"})
        assert refused.status_code == 403
        assert c.get("/ui/catalog").status_code == 200  # still signed in
        r = c.post("/ui/signout", data={"csrf": c.cookies["lakegate_csrf"]})
        assert (r.status_code, r.headers["location"]) == (303, "/ui/signin")
        assert 'lakegate_session=""' in _cookie(r, "lakegate_session")
        after = c.get("/ui/catalog")
    assert (after.status_code, after.headers["location"]) == (303, "/ui/signin")


def test_every_console_answer_is_no_store_with_a_strict_csp(console_server) -> None:
    with signed_in(console_server, "alice") as c:
        answers = [c.get(p) for p in (*PAGES, "/ui/catalog/main.sales.orders")]
        answers.append(c.get("/ui/signin"))
    for r in answers:
        assert r.status_code == 200, r.url
        assert r.headers["cache-control"] == "no-store"
        assert "script-src 'self';" in r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"


def test_a_page_without_a_session_goes_to_sign_in_on_record(
    console_server, console_lakegate
) -> None:
    ctx = f"nosession-{uuid.uuid4().hex}"
    r = httpx.get(
        f"{console_server}/ui/audit",
        headers={"X-Lakegate-Caller-Context": ctx, "Cookie": "lakegate_session=Zm9yZ2Vk"},
    )
    assert (r.status_code, r.headers["location"]) == (303, "/ui/signin")
    line = [ln for ln in read_audit(console_lakegate) if ln.get("callerContext") == ctx]
    assert [(ln["ugi"], ln["allowed"]) for ln in line] == [("anonymous (auth:TOKEN)", "false")]


def test_the_session_cookie_is_no_key_to_the_json_api(console_server) -> None:
    with signed_in(console_server, "alice") as c:
        session = c.cookies["lakegate_session"]
    r = httpx.get(f"{console_server}{LG}/whoami", headers={"Cookie": f"lakegate_session={session}"})
    assert r.status_code == 401


def test_console_pages_stay_out_of_the_openapi_schema(console_server) -> None:
    paths = httpx.get(f"{console_server}/openapi.json").json()["paths"]
    assert [p for p in paths if p.startswith("/ui")] == []
    assert {f"{LG}/access/users/{{user}}", f"{LG}/policy-diff", f"{LG}/audit/summary"} <= set(paths)


def test_the_session_cookie_is_an_opaque_id_not_the_token(console_server) -> None:
    import base64

    token = token_of("alice")
    with signed_in(console_server, "alice") as c:
        session = c.cookies["lakegate_session"]
    assert len(session) >= 43  # 256 random bits, base64url
    encoded = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
    assert token not in session and encoded not in session and session not in encoded


def test_a_session_cookie_replayed_after_sign_out_is_refused(
    console_server, console_lakegate
) -> None:
    with signed_in(console_server, "alice") as c:
        stolen = c.cookies["lakegate_session"]
        assert (
            httpx.get(
                f"{console_server}/ui/catalog", headers={"Cookie": f"lakegate_session={stolen}"}
            ).status_code
            == 200
        )  # the copy works while the session lives
        out = c.post("/ui/signout", data={"csrf": c.cookies["lakegate_csrf"]})
        assert out.status_code == 303
    ctx = f"replay-{uuid.uuid4().hex}"
    r = httpx.get(
        f"{console_server}/ui/catalog",
        headers={"Cookie": f"lakegate_session={stolen}", "X-Lakegate-Caller-Context": ctx},
    )
    assert (r.status_code, r.headers["location"]) == (303, "/ui/signin")
    line = [ln for ln in read_audit(console_lakegate) if ln.get("callerContext") == ctx]
    assert [(ln["cmd"], ln["allowed"], ln["reason"]) for ln in line] == [
        ("consolePage", "false", "console: not signed in (no session, or it ended)")
    ]


def test_ending_a_users_sessions_signs_out_every_browser_of_theirs(
    console_server, console_app
) -> None:
    sessions = console_app.state.service.console_sessions
    with (
        signed_in(console_server, "bob") as one,
        signed_in(console_server, "bob") as two,
        signed_in(console_server, "dana") as other,
    ):
        assert sessions.end_user("bob") == 2
        for c in (one, two):
            r = c.get("/ui/catalog")
            assert (r.status_code, r.headers["location"]) == (303, "/ui/signin")
        assert other.get("/ui/catalog").status_code == 200


def test_failed_sign_ins_are_limited_per_address_with_retry_after(console_lakegate) -> None:
    from api_testkit import serve

    from api.app import create_app

    ctx = f"limit-{uuid.uuid4().hex}"
    with serve(create_app(console_lakegate)) as url, httpx.Client(base_url=url) as c:
        headers = {"X-Lakegate-Caller-Context": ctx}
        for _ in range(5):
            r = c.post("/ui/signin", data={"token": "tok-wrong", "csrf": _form(c)}, headers=headers)
            assert r.status_code == 401
        limited = c.post(
            "/ui/signin", data={"token": token_of("alice"), "csrf": _form(c)}, headers=headers
        )
        assert limited.status_code == 429  # even a good token: no check while limited
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert "Too many failed sign-ins" in limited.text
        assert "lakegate_session=" not in " ".join(limited.headers.get_list("set-cookie"))
    lines = [ln for ln in read_audit(console_lakegate) if ln.get("callerContext") == ctx]
    assert [(ln["cmd"], ln["allowed"]) for ln in lines] == [("consoleSignIn", "false")] * 6
    assert {ln["reason"] for ln in lines[:5]} == {"console sign-in: invalid token"}
    assert lines[5]["reason"] == (
        "console sign-in: too many failed sign-ins; refused without a check"
    )


def test_a_console_session_ends_when_its_token_expires(console_server) -> None:
    import time

    from api_testkit import SECRET

    from api.auth import sign_token

    token = sign_token(SECRET, "carol", 3)
    with httpx.Client(base_url=console_server) as c:
        r = c.post("/ui/signin", data={"token": token, "csrf": _form(c)})
        assert r.status_code == 303
        assert c.get("/ui/catalog").status_code == 200
        time.sleep(4)
        after = c.get("/ui/catalog")
    assert (after.status_code, after.headers["location"]) == (303, "/ui/signin")
