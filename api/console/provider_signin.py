"""The console's sign-in with the organisation's identity provider: OpenID Connect's
authorization code flow with PKCE (RFC 7636, S256), `state` and `nonce` (issue 37, item 5).

1. `start` makes a one-time `state`, a `nonce` and a PKCE verifier, keeps them here (never
   in the browser), and gives the provider's authorization URL; the gate also sets the state
   in an HttpOnly cookie, so the callback must come back to the same browser (a login CSRF
   cannot finish someone else's sign-in in the victim's browser).
2. `finish` takes the callback's `state` (used once, at most `PENDING_SECONDS` old, equal to
   the cookie's) and `code`, redeems the code at the token endpoint with the verifier (and
   the client secret, for a confidential client), checks the ID token (signature, issuer,
   this client, the nonce) and the access token exactly as every API request is checked
   (`Authenticator`), and that both name the same subject.
3. The console's session then keeps the access token server-side; `refresh` renews it with
   the refresh token when it expires, which is when group changes at the provider reach a
   signed-in console (the bound: the access token's lifetime). Signing out ends the session
   here and revokes the refresh token at the provider when it offers revocation (RFC 7009).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from api.auth import Principal, Unauthenticated
from api.authenticator import Authenticator
from api.oidc import OidcVerifier, ProviderUnreachable
from governance.config import ConsoleSignIn
from governance.errors import ConfigError

#: A sign-in must come back from the provider within this many seconds.
PENDING_SECONDS = 600.0
#: Sign-ins under way at once (older ones are dropped first).
MAX_PENDING = 1000


@dataclass(frozen=True)
class Pending:
    nonce: str
    verifier: str  # the PKCE code verifier
    redirect_uri: str
    started: float


@dataclass(frozen=True)
class Tokens:
    """What a finished sign-in (or a refresh) holds: the bearer the console's requests use,
    and the refresh token that renews it; neither ever leaves the server."""

    principal: Principal
    access_token: str
    refresh_token: str | None
    id_token: str | None


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class ProviderSignIn:
    """The authorization code flow with one configured provider, for the console."""

    def __init__(self, config: ConsoleSignIn, auth: Authenticator) -> None:
        verifier = auth.verifiers.get(config.issuer)
        if verifier is None:  # the config's own check makes this unreachable from a file
            raise ValueError("identity.console.issuer is not one of identity.providers")
        self.config = config
        self.auth = auth
        self.verifier: OidcVerifier = verifier
        self._secret = self._read_secret(config.client_secret_file)
        self._pending: dict[str, Pending] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _read_secret(path: Path | None) -> str | None:
        if path is None:
            return None
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(
                f"identity.console.client_secret_file {path}: cannot read it ({e.strerror})"
            ) from None
        if not secret:
            raise ConfigError(f"identity.console.client_secret_file {path} is empty")
        return secret

    def start(self, redirect_uri: str) -> tuple[str, str]:
        """(the provider's authorization URL, the state to set in the browser's cookie)."""
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(64)
        try:
            endpoint = self.verifier.endpoint("authorization_endpoint")
        except ProviderUnreachable as e:
            raise Unauthenticated(f"sign-in unavailable: {e}") from None
        now = time.monotonic()
        with self._lock:
            for old in [s for s, p in self._pending.items() if now - p.started > PENDING_SECONDS]:
                del self._pending[old]
            while len(self._pending) >= MAX_PENDING:
                del self._pending[next(iter(self._pending))]
            self._pending[state] = Pending(nonce, verifier, redirect_uri, now)
        query = {
            "response_type": "code",
            "client_id": self.config.client_id,
            "redirect_uri": redirect_uri,
            "scope": " ".join(self.config.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": _challenge(verifier),
            "code_challenge_method": "S256",
        }
        return f"{endpoint}?{urlencode(query)}", state

    def finish(self, state: str, code: str, browser_state: str | None) -> Tokens:
        """The callback: the tokens of a finished sign-in, or Unauthenticated (one line)."""
        with self._lock:
            pending = self._pending.pop(state, None)
        if pending is None or time.monotonic() - pending.started > PENDING_SECONDS:
            raise Unauthenticated("sign-in expired or already used: start again")
        if not browser_state or not hmac.compare_digest(browser_state, state):
            raise Unauthenticated("sign-in refused: it was started in another browser")
        answer = self._token_request(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": pending.redirect_uri,
                "code_verifier": pending.verifier,
            }
        )
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise Unauthenticated("sign-in refused: the provider sent no ID token")
        claims = self.verifier.verify_id_token(id_token, self.config.client_id, pending.nonce)
        tokens = self._tokens(answer, id_token)
        if tokens.principal.claims.subject != claims.get("sub"):
            raise Unauthenticated("sign-in refused: the ID and access tokens name other users")
        return tokens

    def refresh(self, refresh_token: str, id_token: str | None) -> Tokens:
        """New tokens (and so the provider's current groups) for a signed-in session."""
        answer = self._token_request(
            {"grant_type": "refresh_token", "refresh_token": refresh_token}
        )
        return self._tokens(answer, answer.get("id_token") or id_token)

    def revoke(self, refresh_token: str) -> None:
        """Best effort at sign-out: the provider forgets the refresh token (RFC 7009)."""
        try:
            endpoint = self.verifier.endpoint("revocation_endpoint")
            self.verifier.post_form(
                endpoint,
                {"token": refresh_token, "token_type_hint": "refresh_token", **self._client()},
            )
        except ProviderUnreachable:
            pass  # the session is ended here whatever the provider says

    # internals ----------------------------------------------------------------------------

    def _client(self) -> dict[str, str]:
        client = {"client_id": self.config.client_id}
        if self._secret is not None:
            client["client_secret"] = self._secret
        return client

    def _token_request(self, form: dict[str, str]) -> dict[str, object]:
        try:
            endpoint = self.verifier.endpoint("token_endpoint")
            return self.verifier.post_form(endpoint, {**form, **self._client()})
        except ProviderUnreachable as e:
            raise Unauthenticated(f"sign-in refused by the provider: {e}") from None

    def _tokens(self, answer: dict[str, object], id_token: object) -> Tokens:
        access = answer.get("access_token")
        if not isinstance(access, str):
            raise Unauthenticated("sign-in refused: the provider sent no access token")
        principal = self.auth.authenticate(f"Bearer {access}")
        refresh = answer.get("refresh_token")
        return Tokens(
            principal,
            access,
            refresh if isinstance(refresh, str) else None,
            id_token if isinstance(id_token, str) else None,
        )
