"""Who is asking, for every entry point (REST, the Spark Connect gateway, the console): the
one `authenticate(header) -> Principal` the servers call.

Two kinds of bearer token are accepted (docs/identity.md): the organisation's identity
providers' JWTs (api/oidc.py), for people, and Lakegate's own tokens (api/auth.py), for
service accounts. What the directory (SCIM pushes, LDAP syncs) knows is then laid over
either: a deprovisioned user is refused whatever token it shows, and its directory groups
join the token's.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from api.auth import Principal, TokenAuth, Unauthenticated, bearer
from api.oidc import OidcVerifier, looks_like_jwt, unverified_issuer
from governance.config import ApiConfig, IdentityConfig

log = logging.getLogger("lakegate.identity")

#: Verified provider tokens remembered (by SHA-256) so that the many RPCs of one query
#: verify a signature once; an entry is used for at most `REMEMBER_SECONDS` and never past
#: the token's `exp`.
MAX_REMEMBERED = 10_000
REMEMBER_SECONDS = 30.0


class DirectoryView(Protocol):
    """What the directory (SCIM, LDAP) says about a user at authentication time."""

    def groups_of(self, user: str) -> frozenset[str]:
        """The user's policy groups from the directory (mapped), empty when unknown."""
        ...

    def deprovisioned(self, user: str) -> bool:
        """The directory knows the user and has deactivated or deleted it."""
        ...


class Deprovisioned(Unauthenticated):
    """A valid token of a user the directory has deactivated or deleted: refused, and the
    refusal names the user (its audit line, ending its sessions)."""

    def __init__(self, user: str) -> None:
        super().__init__("user deprovisioned by the identity provider")
        self.user = user


class Authenticator:
    """Lakegate's own tokens, the configured providers' JWTs, and the directory over both."""

    def __init__(
        self,
        api: ApiConfig,
        identity: IdentityConfig | None = None,
        directory: DirectoryView | None = None,
        *,
        source: Path | None = None,
    ) -> None:
        self.tokens = TokenAuth(api, source=source)
        self.verifiers = {
            p.issuer: OidcVerifier(p) for p in (identity.providers if identity else ())
        }
        self.directory = directory
        self._remembered: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def authenticate(self, header: str | None) -> Principal:
        token = bearer(header)
        if self.verifiers and looks_like_jwt(token):
            principal = self._provider_token(token)
        else:
            principal = self.tokens.verify(token)
        return self._directory(principal)

    def _provider_token(self, token: str) -> Principal:
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        now = time.time()
        hit = self._remembered.get(digest)
        if hit is not None and now < hit[1]:
            return hit[0]
        issuer = unverified_issuer(token)
        verifier = self.verifiers.get(issuer) if issuer is not None else None
        if verifier is None:
            raise Unauthenticated("token refused: not issued by a configured identity provider")
        principal = verifier.verify(token)
        until = now + REMEMBER_SECONDS
        if principal.expires is not None:
            until = min(until, principal.expires)
        with self._lock:
            if len(self._remembered) >= MAX_REMEMBERED:
                self._remembered.clear()
            self._remembered[digest] = (principal, until)
        return principal

    def _directory(self, principal: Principal) -> Principal:
        directory = self.directory
        if directory is None:
            return principal
        try:
            gone = directory.deprovisioned(principal.user)
            extra = directory.groups_of(principal.user)
        except Exception as e:  # the catalog database is down: refuse, never skip the check
            log.error("the user directory cannot be read: %s: %s", type(e).__name__, e)
            raise Unauthenticated("refused: the user directory cannot be read") from None
        if gone:
            raise Deprovisioned(principal.user)
        if not extra or extra <= principal.claims.groups:
            return principal
        claims = replace(principal.claims, groups=principal.claims.groups | extra)
        return replace(principal, claims=claims)

    def forget(self) -> None:
        """Drop remembered tokens (a user was deprovisioned: its next call is checked anew)."""
        with self._lock:
            self._remembered.clear()
