"""The Keycloak harness itself: the identity provider the OIDC tests rely on issues what
they assume (issuer, signed tokens with groups and audience, live group changes, key
rotation, PKCE), checked the way a relying party checks it, with PyJWT against the JWKS."""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
from identity.keycloak import CLIENT_ID, OTHER_CLIENT_ID, REDIRECT_URIS, USERS, Keycloak


def verify(kc: Keycloak, token: str, audience: str = CLIENT_ID) -> dict[str, Any]:
    """A token's claims after the checks a relying party makes: the signature against the
    provider's JWKS (fetched now), RS256 only, audience, issuer and expiry."""
    keys = jwt.PyJWKClient(kc.jwks_uri, cache_jwk_set=False, ssl_context=kc.ssl_context())
    key = keys.get_signing_key_from_jwt(token)
    return jwt.decode(
        token,
        key.key,
        algorithms=["RS256"],
        audience=audience,
        issuer=kc.issuer,
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )


def test_discovery_document_names_the_realm_issuer_over_https(keycloak: Keycloak) -> None:
    doc = keycloak.discovery()
    assert doc["issuer"] == keycloak.issuer
    assert keycloak.issuer.startswith("https://127.0.0.1:")
    assert keycloak.issuer.endswith("/realms/lakegate")
    assert doc["jwks_uri"] == keycloak.jwks_uri
    assert doc["token_endpoint"] == keycloak.token_endpoint
    assert "S256" in doc["code_challenge_methods_supported"]


def test_discovery_is_refused_without_the_throwaway_ca(keycloak: Keycloak) -> None:
    with pytest.raises(httpx.ConnectError):
        httpx.get(keycloak.discovery_url, timeout=10)


def test_password_grant_token_verifies_with_username_and_groups(keycloak: Keycloak) -> None:
    claims = verify(keycloak, keycloak.token("alice"))
    assert claims["preferred_username"] == "alice"
    assert claims["email"] == "alice@example.test"
    assert claims["groups"] == ["analysts"]
    assert claims["azp"] == CLIENT_ID
    assert claims["exp"] - claims["iat"] == 300


def test_every_user_gets_its_starting_groups(keycloak: Keycloak) -> None:
    for user, groups in USERS.items():
        claims = verify(keycloak, keycloak.token(user))
        assert sorted(claims.get("groups", [])) == sorted(groups), user


def test_id_token_carries_groups_for_the_client(keycloak: Keycloak) -> None:
    tokens = keycloak.tokens("carol")
    claims = verify(keycloak, tokens["id_token"])
    assert claims["preferred_username"] == "carol"
    assert claims["groups"] == ["emea-analysts"]
    assert tokens["refresh_token"]


def test_group_change_shows_in_the_next_token(keycloak: Keycloak) -> None:
    with keycloak.user_state("bob"):
        keycloak.remove_from_group("bob", "analysts")
        keycloak.add_to_group("bob", "engineering/platform")
        assert verify(keycloak, keycloak.token("bob"))["groups"] == ["platform"]
    assert keycloak.groups_of("bob") == ["analysts"]
    assert verify(keycloak, keycloak.token("bob"))["groups"] == ["analysts"]


def test_disabled_user_and_wrong_password_get_no_token(keycloak: Keycloak) -> None:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        keycloak.token("dana", password="not-her-password")
    assert refused.value.response.json()["error"] == "invalid_grant"
    with keycloak.user_state("mallory"):
        keycloak.set_enabled("mallory", False)
        with pytest.raises(httpx.HTTPStatusError) as disabled:
            keycloak.token("mallory")
        assert disabled.value.response.json()["error"] == "invalid_grant"
    assert verify(keycloak, keycloak.token("mallory"))["preferred_username"] == "mallory"


def test_other_app_token_lacks_the_lakegate_audience(keycloak: Keycloak) -> None:
    token = keycloak.token("alice", client=OTHER_CLIENT_ID)
    with pytest.raises(jwt.InvalidAudienceError):
        verify(keycloak, token)
    assert verify(keycloak, token, audience=OTHER_CLIENT_ID)["azp"] == OTHER_CLIENT_ID


def test_short_access_token_lifespan_applies_to_new_tokens(keycloak: Keycloak) -> None:
    keycloak.set_access_token_lifespan(5)
    try:
        claims = verify(keycloak, keycloak.token("alice"))
        assert claims["exp"] - claims["iat"] == 5
    finally:
        keycloak.set_access_token_lifespan(None)
    claims = verify(keycloak, keycloak.token("alice"))
    assert claims["exp"] - claims["iat"] == 300


def test_rotated_keys_sign_with_a_new_kid_and_the_old_one_leaves_the_jwks(
    keycloak: Keycloak,
) -> None:
    before = keycloak.token("alice")
    old_kid = jwt.get_unverified_header(before)["kid"]
    assert old_kid == keycloak.signing_kid()

    passive_kid = keycloak.rotate_keys(keep_old=True)
    assert passive_kid != old_kid
    kids = {k["kid"] for k in keycloak.jwks()["keys"]}
    assert {old_kid, passive_kid} <= kids
    assert jwt.get_unverified_header(keycloak.token("alice"))["kid"] == passive_kid
    verify(keycloak, before)  # a passive key still verifies

    new_kid = keycloak.rotate_keys()
    assert new_kid not in (old_kid, passive_kid)
    assert jwt.get_unverified_header(keycloak.token("alice"))["kid"] == new_kid
    kids = {k["kid"] for k in keycloak.jwks()["keys"]}
    assert new_kid in kids
    assert not kids & {old_kid, passive_kid}
    with pytest.raises(jwt.PyJWKClientError):
        verify(keycloak, before)
    assert verify(keycloak, keycloak.token("alice"))["preferred_username"] == "alice"


def test_authorization_code_flow_requires_pkce_s256(keycloak: Keycloak) -> None:
    callback = "https://127.0.0.1:4443/auth/callback"
    keycloak.set_redirect_uris([callback])
    try:
        authorization_code_flow(keycloak, callback)
    finally:
        keycloak.set_redirect_uris(REDIRECT_URIS)


def authorization_code_flow(keycloak: Keycloak, callback: str) -> None:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    params = {
        "client_id": CLIENT_ID,
        "response_type": "code",
        "scope": "openid",
        "redirect_uri": callback,
        "state": "st-1",
        "code_challenge": challenge.rstrip(b"=").decode(),
        "code_challenge_method": "S256",
    }
    authorize = keycloak.discovery()["authorization_endpoint"]
    back = keycloak.login(f"{authorize}?{urlencode(params)}", "dana")
    assert back.startswith(callback + "?")
    query = parse_qs(urlsplit(back).query)
    assert query["state"] == ["st-1"]
    exchange = {
        "grant_type": "authorization_code",
        "code": query["code"][0],
        "redirect_uri": callback,
        "client_id": CLIENT_ID,
        "client_secret": keycloak.client_secret,
    }
    wrong = keycloak.http.post(
        keycloak.token_endpoint, data={**exchange, "code_verifier": secrets.token_urlsafe(48)}
    )
    assert wrong.status_code == 400
    # the code is spent by the failed try; a new sign-in gives a new one
    back = keycloak.login(f"{authorize}?{urlencode(params)}", "dana")
    exchange["code"] = parse_qs(urlsplit(back).query)["code"][0]
    r = keycloak.http.post(keycloak.token_endpoint, data={**exchange, "code_verifier": verifier})
    r.raise_for_status()
    assert verify(keycloak, r.json()["access_token"])["groups"] == ["pii-readers"]

    no_pkce = {k: v for k, v in params.items() if not k.startswith("code_challenge")}
    refused = keycloak.http.get(f"{authorize}?{urlencode(no_pkce)}")
    assert refused.status_code in (302, 303)
    assert "error=invalid_request" in refused.headers["location"]


def test_http_loopback_redirect_uri_may_use_any_port(keycloak: Keycloak) -> None:
    authorize = keycloak.discovery()["authorization_endpoint"]
    base = {
        "client_id": CLIENT_ID,
        "response_type": "code",
        "scope": "openid",
        "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "code_challenge_method": "S256",
    }
    for uri, allowed in [
        ("http://127.0.0.1:38123/auth/callback", True),
        ("https://127.0.0.1:38123/auth/callback", False),
        ("http://127.0.0.2:38123/auth/callback", False),
    ]:
        page = keycloak.http.get(f"{authorize}?{urlencode({**base, 'redirect_uri': uri})}")
        assert (page.status_code == 200 and 'id="kc-form-login"' in page.text) is allowed, uri
