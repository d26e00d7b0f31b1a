"""Lakegate with a real Keycloak (issue 37): the REST API and the console accept the
realm's tokens, a group change at Keycloak changes what an analyst sees with the next token,
key rotation is picked up without a restart, and the console signs in with the
authorization code flow. The Connect gateway's stock clients: tests/api/connect/
test_connect_identity.py."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from api.oidc import MIN_REFRESH_SECONDS
from governance.config import ConsoleSignIn, IdentityConfig, OidcProvider
from tests.api.api_testkit import LG, api_lakegate_on, read_audit, serve

EMPLOYEES = "SELECT count(*) AS n FROM main.hr.employees"


@pytest.fixture(scope="module")
def kc_lakegate(lakehouse, spark, keycloak, tmp_path_factory):
    root = tmp_path_factory.mktemp("kc-api")
    secret = root / "console-client-secret"
    secret.write_text(keycloak.client_secret + "\n")
    secret.chmod(0o600)
    # one machine, one clock: a token is expired when its exp says (the renewal test)
    provider = OidcProvider(
        issuer=keycloak.issuer, audience=("lakegate",), ca_file=keycloak.ca_file, clock_skew=1
    )
    identity = IdentityConfig(
        (provider,), console=ConsoleSignIn(keycloak.issuer, "lakegate", secret)
    )
    lg = api_lakegate_on(lakehouse, spark, root, identity=identity)
    yield lg
    lg.close()


@pytest.fixture(scope="module")
def server(kc_lakegate) -> Iterator[str]:
    from api.app import create_app

    with serve(create_app(kc_lakegate)) as url:
        yield url


def sql(server: str, token: str, statement: str = EMPLOYEES) -> httpx.Response:
    return httpx.post(
        f"{server}{LG}/statements",
        json={"statement": statement},
        headers={"Authorization": f"Bearer {token}", "X-Lakegate-Caller-Context": uuid.uuid4().hex},
        timeout=120,
    )


def test_a_keycloak_token_is_accepted_and_names_its_user(server, keycloak, kc_lakegate):
    r = sql(server, keycloak.token("alice"), "SELECT current_user() AS u")
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [["alice"]]
    last = read_audit(kc_lakegate)[-1]
    assert last["ugi"] == "alice (auth:OIDC)" and last["issuer"] == keycloak.issuer
    assert last["subject"] == keycloak.user_id("alice")


def test_a_group_change_at_keycloak_changes_what_the_analyst_sees(server, keycloak):
    """mallory is in no group of the policies' YAML: Keycloak's groups decide."""
    with keycloak.user_state("mallory"):
        assert sql(server, keycloak.token("mallory")).status_code in (403, 404)
        keycloak.add_to_group("mallory", "/analysts")
        assert sql(server, keycloak.token("mallory")).status_code == 200
        keycloak.remove_from_group("mallory", "/analysts")
        assert sql(server, keycloak.token("mallory")).status_code in (403, 404)


def test_a_token_keycloak_issued_for_another_client_is_refused(server, keycloak):
    r = sql(server, keycloak.token("alice", client="other-app"))
    assert r.status_code == 401 and "another audience" in r.json()["message"]


def test_key_rotation_at_keycloak_is_picked_up_without_a_restart(server, keycloak):
    assert sql(server, keycloak.token("alice"), "SELECT 1").status_code == 200
    kid = keycloak.rotate_keys()
    token = keycloak.token("alice")
    assert f'"kid":"{kid}"' in _header(token)
    time.sleep(MIN_REFRESH_SECONDS)  # an unknown kid fetches the key set at most this often
    assert sql(server, token, "SELECT 1").status_code == 200


def test_a_disabled_keycloak_user_gets_no_new_token(keycloak):
    with keycloak.user_state("bob"):
        keycloak.set_enabled("bob", False)
        with pytest.raises(httpx.HTTPStatusError):
            keycloak.token("bob")


def _header(token: str) -> str:
    import base64

    head = token.split(".")[0]
    return base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode().replace(" ", "")


# the console: authorization code with PKCE ------------------------------------------------


def _sign_in(server: str, keycloak, user: str) -> httpx.Client:
    """A browser's sign-in: the console redirects to Keycloak, Keycloak's login form signs
    the user in and redirects back with a code, the console's callback opens a session."""
    browser = httpx.Client(base_url=server, timeout=60, follow_redirects=False)
    start = browser.get("/ui/signin/provider")
    assert start.status_code == 303, start.text
    authorize = start.headers["location"]
    assert authorize.startswith(keycloak.issuer)
    assert "code_challenge_method=S256" in authorize and "nonce=" in authorize
    back = keycloak.login(authorize, user)
    assert back.startswith(f"{server}/ui/signin/callback?")
    done = browser.get(back.removeprefix(server))
    assert done.status_code == 200, done.text
    return browser


def test_the_console_signs_in_with_keycloak_and_shows_the_users_pages(server, keycloak):
    browser = _sign_in(server, keycloak, "alice")
    page = browser.get("/ui/catalog")
    browser.close()
    assert page.status_code == 200
    assert re.search(r'id="whoami">alice<', page.text)


def test_a_callback_from_another_browser_is_refused(server, keycloak, kc_lakegate):
    victim = httpx.Client(base_url=server, timeout=60, follow_redirects=False)
    authorize = victim.get("/ui/signin/provider").headers["location"]
    back = keycloak.login(authorize, "mallory")  # the attacker's own code and state
    with httpx.Client(base_url=server, timeout=60) as other:  # no state cookie
        r = other.get(back.removeprefix(server))
    assert r.status_code == 401
    assert "another browser" in read_audit(kc_lakegate)[-1]["reason"]
    victim.close()


def test_a_callback_is_used_once(server, keycloak):
    browser = httpx.Client(base_url=server, timeout=60, follow_redirects=False)
    authorize = browser.get("/ui/signin/provider").headers["location"]
    back = keycloak.login(authorize, "alice").removeprefix(server)
    assert browser.get(back).status_code == 200
    assert browser.get(back).status_code == 401  # replayed
    browser.close()


def test_signing_out_of_the_console_ends_the_session_server_side(server, keycloak):
    browser = _sign_in(server, keycloak, "alice")
    page = browser.get("/ui/catalog")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    cookie = browser.cookies.get("lakegate_session")
    assert browser.post("/ui/signout", data={"csrf": csrf}).status_code == 303
    with httpx.Client(base_url=server, timeout=60, follow_redirects=False) as replay:
        replay.cookies.set("lakegate_session", cookie, path="/ui")
        assert replay.get("/ui/catalog").status_code == 303  # back to the sign-in page
    browser.close()


def test_the_console_renews_an_expired_access_token_with_its_refresh_token(server, keycloak):
    keycloak.set_access_token_lifespan(5)
    try:
        with keycloak.user_state("mallory"):
            browser = _sign_in(server, keycloak, "mallory")
            assert "employees" not in browser.get("/ui/catalog").text
            keycloak.add_to_group("mallory", "/analysts")
            time.sleep(7)  # past the access token's exp
            page = browser.get("/ui/catalog")  # renewed: the provider's current groups
            assert page.status_code == 200 and "employees" in page.text
            browser.close()
    finally:
        keycloak.set_access_token_lifespan(None)
