"""Bearer tokens to users: configured token hashes, or tokens signed with a shared secret.

Hashed tokens (`api.tokens: [{user, sha256}]`) keep lakegate.yaml free of secrets; signed
tokens (`user.expiry.signature`, HMAC-SHA256 over `user.expiry` with `api.secret`) let an
identity provider or a script mint short-lived tokens without touching the config. Neither
check leaks timing (a lookup by hash; `hmac.compare_digest` for signatures).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from governance.config import ApiConfig
from governance.identity import NO_CLAIMS, IdpClaims, InvalidName, canonical_user


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    method: str  # "token" (hashed), "signed" or "oidc" (an identity provider's JWT)
    expires: int | None = None
    # what the identity provider said: groups (mapped to policy groups), issuer, subject
    claims: IdpClaims = NO_CLAIMS

    @property
    def audit_method(self) -> str:
        """The method in the audit line's ugi (`alice (auth:OIDC)`)."""
        return "OIDC" if self.method == "oidc" else "TOKEN"


class Unauthenticated(Exception):
    """No usable bearer token; the message says why without echoing the token."""


def bearer(header: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header."""
    if not header:
        raise Unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return token


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def sign_token(secret: str, user: str, ttl_seconds: int = 3600, *, now: float | None = None) -> str:
    """A signed token for `user` valid for `ttl_seconds` (for scripts and tests); a name
    outside governance.identity's set raises InvalidName instead of being minted."""
    expiry = int((now if now is not None else time.time()) + ttl_seconds)
    body = f"{canonical_user(user)}.{expiry}"
    sig = hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
    return f"{body}.{sig}"


class TokenAuth:
    """Lakegate's own tokens, for service accounts: hashed ones from the config and signed
    ones (`user.expiry.signature`)."""

    def __init__(self, cfg: ApiConfig) -> None:
        # Canonical again here, not only in Config.load: an ApiConfig may be built in code.
        self._by_hash = {t.sha256: canonical_user(t.user) for t in cfg.tokens}
        self._secret = cfg.secret.encode() if cfg.secret else None

    def authenticate(self, header: str | None) -> Principal:
        return self.verify(bearer(header))

    def verify(self, token: str) -> Principal:
        user = self._hashed(token)
        if user is not None:
            return Principal(user, "token")
        return self._signed(token)

    def _hashed(self, token: str) -> str | None:
        # Looked up by the token's SHA-256: timing reveals nothing an attacker can steer.
        return self._by_hash.get(token_hash(token))

    def _signed(self, token: str) -> Principal:
        parts = token.rsplit(".", 2)
        if self._secret is None or len(parts) != 3:
            raise Unauthenticated("invalid token")
        user, expiry, sig = parts
        try:
            canonical = canonical_user(user)
        except InvalidName:
            # A look-alike (`\u212aarl`) is refused, never folded onto the ASCII user.
            raise Unauthenticated("invalid token") from None
        if not (expiry.isascii() and expiry.isdigit()):  # not Arabic-Indic or other digits
            raise Unauthenticated("invalid token")
        want = hmac.new(self._secret, f"{user}.{expiry}".encode(), hashlib.sha256).hexdigest()
        # compare_digest raises TypeError on non-ASCII str: hostile bytes are just invalid.
        if not sig.isascii() or not hmac.compare_digest(want, sig.lower()):
            raise Unauthenticated("invalid token")
        if int(expiry) < time.time():
            raise Unauthenticated("token expired")
        return Principal(canonical, "signed", int(expiry))
