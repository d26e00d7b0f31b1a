"""Access tokens of the organisation's identity provider: OIDC/JWT bearer tokens checked
against the provider's own keys (issue 37; docs/identity.md).

A token is accepted only when every check passes, in this order, each refusal one line that
never echoes the token: it is a JWS whose header names an allowed asymmetric algorithm and
no key of its own (`jku`, `x5u`, `jwk`, `x5c` and `crit` are refused: keys come from the
configured issuer only); its issuer is a configured provider; its `kid` is in that
provider's key set (JWKS), found through the issuer's discovery document; the signature
verifies with that key, whose type and `alg` must fit the header's algorithm (no RS/HS
confusion: HS* and `none` are never allowed); `iss`, `aud`, `exp`, `nbf` and `iat` check
out within the configured clock skew; it is an access token (a Keycloak ID or refresh
token is not); and its user claim is a valid user name.

Keys: fetched on first use, then again once older than `jwks_max_age`, and when a token
names an unknown `kid` (the provider rotated its keys), at most once per
`MIN_REFRESH_SECONDS`, so forged kids cannot make us hammer the provider. A provider that
cannot be reached is never a reason to accept: keys older than `jwks_max_age` are not used,
and a token whose key is unknown is refused.
"""

from __future__ import annotations

import hmac
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import jwt

from api.auth import Principal, Unauthenticated
from api.net import is_loopback_url
from governance.config import OidcProvider
from governance.identity import IdpClaims, InvalidName, canonical_user

log = logging.getLogger("lakegate.identity")

#: An unknown `kid` fetches the key set again at most this often (seconds).
MIN_REFRESH_SECONDS = 10.0
#: Largest discovery document or key set read (bytes).
MAX_DOCUMENT_BYTES = 1 << 20
#: Header parameters that would let a token name its own key or extensions we do not know.
FORBIDDEN_HEADERS = ("jku", "x5u", "jwk", "x5c", "x5t#S256", "crit")
#: Header `typ` values of an access token (RFC 9068 names at+jwt; most providers say JWT).
ACCESS_TOKEN_TYPES = frozenset({"jwt", "at+jwt", "application/at+jwt"})
#: A Keycloak token says what it is in its `typ` claim; only these are access tokens.
ACCESS_TOKEN_CLAIM_TYPES = frozenset({"bearer"})
ID_TOKEN_CLAIM_TYPES = frozenset({"id"})


class ProviderUnreachable(Exception):
    """The discovery document or key set could not be read (the reason, one line)."""


def looks_like_jwt(token: str) -> bool:
    """A compact JWS: three base64url parts whose first is a JSON object (Lakegate's own
    signed tokens, `user.expiry.signature`, start with a user name instead)."""
    if token.count(".") != 2:
        return False
    try:
        return isinstance(jwt.get_unverified_header(token), dict)
    except jwt.PyJWTError:
        return False


def unverified_issuer(token: str) -> str | None:
    """The `iss` the token claims, only to choose whose keys verify it."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    issuer = claims.get("iss") if isinstance(claims, dict) else None
    return issuer if isinstance(issuer, str) else None


def _allowed_url(url: str) -> bool:
    return url.startswith("https://") or (url.startswith("http://") and is_loopback_url(url))


class OidcVerifier:
    """One configured provider: its discovery document and key set, and the token checks."""

    def __init__(
        self,
        provider: OidcProvider,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, dict[str, Any]] = {}  # kid -> JWK
        self._jwks_uri: str | None = None
        self._fetched_at: float | None = None  # clock() of the last good key set
        self._tried_at: float | None = None  # clock() of the last attempt
        self._last_error: str | None = None
        self._context: ssl.SSLContext | None = None
        self._document: dict[str, Any] | None = None
        self.server_date: str | None = None  # the last answer's HTTP Date (doctor's skew)

    # keys -------------------------------------------------------------------------------

    def _https_fetch(self, url: str, form: dict[str, str] | None = None) -> dict[str, Any]:
        """GET (or POST `form` to) a JSON endpoint over HTTPS (plain HTTP only on loopback,
        for local setups), never following a redirect."""
        if not _allowed_url(url):
            raise ProviderUnreachable(f"{url} is not https")
        if self._context is None:
            ca = self.provider.ca_file
            self._context = ssl.create_default_context(cafile=str(ca) if ca else None)
        data = None if form is None else urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(url, data=data, headers={"Accept": "application/json"})
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._context), _NoRedirect()
        )
        try:
            with opener.open(request, timeout=self.provider.timeout) as response:
                body = response.read(MAX_DOCUMENT_BYTES + 1)
                self.server_date = response.headers.get("Date")
        except urllib.error.HTTPError as e:
            # the provider's error body (`{"error": "invalid_grant"}`) names the reason
            try:
                error = json.loads(e.read(4096)).get("error")
            except (ValueError, AttributeError, OSError):
                error = None
            detail = f" ({error})" if isinstance(error, str) else ""
            raise ProviderUnreachable(f"{url}: HTTP {e.code} {e.reason}{detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise ProviderUnreachable(f"{url}: {type(e).__name__}: {reason}") from None
        if len(body) > MAX_DOCUMENT_BYTES:
            raise ProviderUnreachable(f"{url}: answer larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            doc = json.loads(body)
        except ValueError:
            raise ProviderUnreachable(f"{url}: not JSON") from None
        if not isinstance(doc, dict):
            raise ProviderUnreachable(f"{url}: not a JSON object")
        return doc

    def post_form(self, url: str, form: dict[str, str]) -> dict[str, Any]:
        """A form POST to one of the provider's endpoints (the console's token requests)."""
        return self._https_fetch(url, form)

    def document(self) -> dict[str, Any]:
        """The issuer's discovery document, whose `issuer` must be the configured one
        exactly (OpenID Connect Discovery 1.0, section 4.3); read once per process."""
        if self._document is None:
            issuer = self.provider.issuer
            doc = self._https_fetch(f"{issuer}/.well-known/openid-configuration")
            if doc.get("issuer") != issuer:
                raise ProviderUnreachable("the discovery document names another issuer")
            self._document = doc
        return self._document

    def endpoint(self, name: str) -> str:
        """An endpoint of the discovery document (`token_endpoint`, ...), https only."""
        uri = self.document().get(name)
        if not isinstance(uri, str) or not _allowed_url(uri):
            raise ProviderUnreachable(f"the discovery document has no https {name}")
        return uri

    def discover(self) -> str:
        """The key set's address."""
        return self.endpoint("jwks_uri")

    def refresh(self) -> None:
        """Fetch the key set again (discovering its address first when not known)."""
        now = self._clock()
        self._tried_at = now
        try:
            if self._jwks_uri is None:
                self._jwks_uri = self.discover()
            doc = self._https_fetch(self._jwks_uri)
            keys = doc.get("keys")
            if not isinstance(keys, list):
                raise ProviderUnreachable("the key set has no keys")
            by_kid = {
                k["kid"]: k
                for k in keys
                if isinstance(k, dict)
                and isinstance(k.get("kid"), str)
                and k.get("use", "sig") == "sig"
            }
        except ProviderUnreachable as e:
            self._last_error = str(e)
            log.warning("identity provider %s: %s", self.provider.issuer, e)
            raise
        self._keys, self._fetched_at, self._last_error = by_kid, now, None

    def key(self, kid: str) -> dict[str, Any]:
        """The JWK with this id from a key set no older than `jwks_max_age`."""
        with self._lock:
            now = self._clock()
            max_age = self.provider.jwks_max_age
            stale = self._fetched_at is None or now - self._fetched_at > max_age
            unknown = kid not in self._keys
            may_retry = self._tried_at is None or now - self._tried_at >= MIN_REFRESH_SECONDS
            if stale or (unknown and may_retry):
                try:
                    self.refresh()
                except ProviderUnreachable:
                    if stale:
                        raise Unauthenticated(
                            "token refused: the identity provider's keys cannot be fetched"
                        ) from None
            jwk = self._keys.get(kid)
        if jwk is None:
            raise Unauthenticated("token refused: signed with a key its issuer does not publish")
        return jwk

    def status(self) -> dict[str, Any]:
        """What doctor and /metrics say about this provider."""
        age = None if self._fetched_at is None else self._clock() - self._fetched_at
        return {
            "issuer": self.provider.issuer,
            "keys": sorted(self._keys),
            "age_seconds": age,
            "last_error": self._last_error,
        }

    # tokens -----------------------------------------------------------------------------

    def verify(self, token: str) -> Principal:
        """The principal an access token stands for, or Unauthenticated with the one check
        it failed."""
        p = self.provider
        claims = self._claims(token, list(p.audience), ACCESS_TOKEN_CLAIM_TYPES)
        try:
            user = canonical_user(claims.get(p.user_claim))
        except InvalidName:
            raise Unauthenticated(
                f"token refused: its '{p.user_claim}' claim is not a valid user name"
            ) from None
        groups = p.groups.apply(self._groups(claims))
        expires = claims.get("exp")
        return Principal(
            user,
            "oidc",
            int(expires) if isinstance(expires, int | float) else None,
            IdpClaims(groups, p.issuer, claims["sub"]),
        )

    def verify_id_token(self, token: str, client_id: str, nonce: str) -> dict[str, Any]:
        """An ID token from the console's sign-in (OpenID Connect Core 3.1.3.7): signed by
        this provider, for this client (`azp` when it names several audiences), carrying
        the nonce the sign-in sent."""
        claims = self._claims(token, [client_id], ID_TOKEN_CLAIM_TYPES)
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != client_id:
            raise Unauthenticated("token refused: issued to another client")
        given = claims.get("nonce")
        if not isinstance(given, str) or not hmac.compare_digest(given, nonce):
            raise Unauthenticated("token refused: the sign-in's nonce does not match")
        return claims

    def _claims(self, token: str, audience: list[str], kinds: frozenset[str]) -> dict[str, Any]:
        """The verified claims of a token for `audience` whose `typ` claim, when present,
        is one of `kinds`."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("token refused: not a signed JWT") from None
        for name in FORBIDDEN_HEADERS:
            if name in header:
                raise Unauthenticated(f"token refused: its header carries '{name}'")
        alg = header.get("alg")
        if alg not in self.provider.algorithms:
            raise Unauthenticated("token refused: algorithm not allowed")
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in ACCESS_TOKEN_TYPES):
            raise Unauthenticated("token refused: not an access token")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated("token refused: no key id")
        jwk = self.key(kid)
        if jwk.get("alg") not in (None, alg):
            raise Unauthenticated("token refused: the key is not for this algorithm")
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
        except jwt.PyJWTError:
            raise Unauthenticated("token refused: the key is not for this algorithm") from None
        p = self.provider
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=audience,
                issuer=p.issuer,
                leeway=p.clock_skew,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token refused: expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("token refused: not valid yet") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("token refused: issued for another audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("token refused: wrong issuer") from None
        except jwt.MissingRequiredClaimError as e:
            raise Unauthenticated(f"token refused: no '{e.claim}' claim") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("token refused: bad signature") from None
        except jwt.PyJWTError as e:
            raise Unauthenticated(f"token refused: {type(e).__name__}") from None
        kind = claims.get("typ")
        if kind is not None and (not isinstance(kind, str) or kind.lower() not in kinds):
            raise Unauthenticated(
                "token refused: not an access token"
                if kinds is ACCESS_TOKEN_CLAIM_TYPES
                else "token refused: not an ID token"
            )
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Unauthenticated("token refused: no 'sub' claim")
        return claims

    def _groups(self, claims: dict[str, Any]) -> list[str]:
        """The group names at the configured claim path; a claim of another shape refuses
        the token (it is not what the provider was configured to send)."""
        path = self.provider.groups_claim
        if path is None:
            return []
        value: Any = claims
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                return []
            value = value[part]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise Unauthenticated(f"token refused: its '{path}' claim is not a list of names")
        return value


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Discovery and keys come from where the configuration says, never from a redirect."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
