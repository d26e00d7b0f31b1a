"""Bearer tokens to users: configured token hashes, or tokens signed with a shared secret.

Hashed tokens (`api.tokens: [{user, sha256}]`) keep lakegate.yaml free of secrets; signed
tokens (`user.expiry.signature`, HMAC-SHA256 over `user.expiry` with `api.secret`) let an
identity provider or a script mint short-lived tokens without touching the config. Neither
check leaks timing (a lookup by hash; `hmac.compare_digest` for signatures).

Both are re-read from lakegate.yaml while a server runs (`TokenAuth(cfg, source=path)`), as
policy files are: a token `lakegate token create --save` adds, or one taken out of the file,
takes effect within a second. A file that no longer loads changes nothing: the last good
tokens stay in force and the rejection is logged (fail closed, never open).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from governance.config import ApiConfig, Config
from governance.errors import ConfigError
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


ERROR_LOG = logging.getLogger("lakegate.errors")

#: How often a running server looks whether lakegate.yaml changed (one stat).
RELOAD_SECONDS = 1.0


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class TokenAuth:
    """Lakegate's own tokens, for service accounts: hashed ones from the config and signed
    ones (`user.expiry.signature`). With `source` (the server's lakegate.yaml), both are
    re-read when the file changes (see the module)."""

    def __init__(self, cfg: ApiConfig, *, source: Path | None = None) -> None:
        self._use(cfg)
        self._source = source
        # unknown: the file may have changed since the server loaded it (Spark's start
        # takes a while), so the first look reads it again
        self._stamp: tuple[int, int, int] | str | None = "unread"
        self._checked = 0.0
        self._lock = threading.Lock()

    def _use(self, cfg: ApiConfig) -> None:
        # Canonical again here, not only in Config.load: an ApiConfig may be built in code.
        # One assignment each: a request in flight sees the old set or the new one.
        self._by_hash = {t.sha256: canonical_user(t.user) for t in cfg.tokens}
        self._secret = cfg.secret.encode() if cfg.secret else None

    def maybe_reload(self) -> None:
        """Re-read the tokens when the file's stamp moved (at most once a second); a file
        that does not load keeps the last good tokens, logged once per change."""
        source = self._source
        now = time.monotonic()
        if source is None or now - self._checked < RELOAD_SECONDS:
            return
        with self._lock:
            if now - self._checked < RELOAD_SECONDS:
                return
            self._checked = now
            stamp = _stamp(source)
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                cfg = Config.load(source).api
            except (ConfigError, OSError, ValueError) as e:
                ERROR_LOG.error(
                    "token reload rejected, the last good tokens stay in force: %s",
                    str(e).splitlines()[0] if str(e) else type(e).__name__,
                )
                return
            self._use(cfg)

    def authenticate(self, header: str | None) -> Principal:
        return self.verify(bearer(header))

    def verify(self, token: str) -> Principal:
        self.maybe_reload()
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
