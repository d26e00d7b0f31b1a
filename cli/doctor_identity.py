"""`lakegate doctor`'s identity checks (issue 37; docs/identity.md): for each configured
provider, its TLS trust, discovery document, key set and clock; and the secrets the other
identity sources hold. A check that fails names the one fix; a provider that cannot be
reached fails the check (tokens would be refused), never passes it.
"""

from __future__ import annotations

import ssl
import stat
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path

import jwt

from api.oidc import OidcVerifier, ProviderUnreachable
from governance.config import IdentityConfig, OidcProvider
from governance.files import NOT_OWNER

#: The HTTP Date header counts whole seconds: a measured skew may be this much too large.
DATE_RESOLUTION = 1.0

Row = tuple[str, str, str]  # (check, status, detail)


def identity_checks(identity: IdentityConfig, now: Callable[[], float] = time.time) -> list[Row]:
    """One row per check; none without an `identity:` section (nothing to check)."""
    rows: list[Row] = []
    for provider in identity.providers:
        rows += provider_checks(provider, now)
    if identity.scim is not None:
        rows.append(
            ("identity scim", "ok", f"{len(identity.scim.tokens)} token(s)")
            if identity.scim.tokens
            else (
                "identity scim",
                "FAIL",
                "identity.scim has no tokens, so /scim/v2 refuses every request: add the "
                "SHA-256 of the provider's provisioning token under identity.scim.tokens",
            )
        )
    if identity.ldap is not None and identity.ldap.password_file is not None:
        rows.append(
            ("identity ldap", *_secret_file(identity.ldap.password_file, "ldap.password_file"))
        )
    if identity.console is not None and identity.console.client_secret_file is not None:
        rows.append(
            (
                "identity console",
                *_secret_file(identity.console.client_secret_file, "console.client_secret_file"),
            )
        )
    return rows


def provider_checks(provider: OidcProvider, now: Callable[[], float] = time.time) -> list[Row]:
    """TLS trust, discovery, keys, clock: each needs the one before it."""
    issuer = provider.issuer
    tls = _trust(provider)
    rows = [("identity tls", *tls)]
    if tls[0] == "FAIL":
        return rows + [(n, "skip", f"{issuer}: needs the TLS trust") for n in _AFTER_TLS]
    verifier = OidcVerifier(provider)
    try:
        jwks_uri = verifier.discover()
    except ProviderUnreachable as e:
        rows.append(("identity discovery", "FAIL", f"{issuer}: {e} ({_discovery_fix(str(e))})"))
        return rows + [(n, "skip", f"{issuer}: needs discovery") for n in _AFTER_TLS[1:]]
    rows.append(("identity discovery", "ok", f"{issuer}: issuer matches, keys at {jwks_uri}"))
    rows.append(("identity keys", *_keys(verifier)))
    rows.append(("identity clock", *_clock(verifier, now)))
    return rows


_AFTER_TLS = ("identity discovery", "identity keys", "identity clock")


def _trust(provider: OidcProvider) -> tuple[str, str]:
    ca = provider.ca_file
    if ca is None:
        return "ok", f"{provider.issuer}: the system's trust store"
    try:
        ssl.create_default_context(cafile=str(ca))
    except FileNotFoundError:
        return "FAIL", f"{provider.issuer}: ca_file {ca} does not exist (fix its path)"
    except PermissionError:
        return "FAIL", f"{provider.issuer}: ca_file {ca} is not readable (chmod it readable)"
    except (ssl.SSLError, OSError, ValueError) as e:
        return "FAIL", (
            f"{provider.issuer}: ca_file {ca} holds no PEM certificate ({type(e).__name__}): "
            "point it at the CA that signed the issuer's certificate"
        )
    return "ok", f"{provider.issuer}: trusts {ca}"


def _discovery_fix(reason: str) -> str:
    if "another issuer" in reason:
        return "set identity.providers[].issuer to exactly the discovery document's issuer"
    if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate" in reason.lower():
        return "set ca_file to the CA that signed the issuer's certificate"
    if "jwks_uri" in reason:
        return "the provider must publish an https jwks_uri"
    return "check the issuer URL and that this host can reach it"


def _keys(verifier: OidcVerifier) -> tuple[str, str]:
    issuer, algorithms = verifier.provider.issuer, verifier.provider.algorithms
    try:
        verifier.refresh()
    except ProviderUnreachable as e:
        return "FAIL", f"{issuer}: key set not readable: {e} (check the provider's jwks_uri)"
    kids = verifier.status()["keys"]
    usable = [kid for kid in kids if _usable(verifier.key(kid), algorithms)]
    if not usable:
        return "FAIL", (
            f"{issuer}: {len(kids)} signing key(s) published, none usable with "
            f"{', '.join(algorithms)}: set algorithms to what the provider signs with"
        )
    return "ok", f"{issuer}: {len(usable)} of {len(kids)} key(s) usable ({', '.join(usable)})"


def _usable(jwk: dict, algorithms: tuple[str, ...]) -> bool:
    """As the token check uses a key: its `alg`, if any, is the token's, and it loads."""
    for alg in algorithms:
        if jwk.get("alg") not in (None, alg):
            continue
        try:
            jwt.PyJWK(jwk, algorithm=alg)
        except jwt.PyJWTError:
            continue
        return True
    return False


def _clock(verifier: OidcVerifier, now: Callable[[], float]) -> tuple[str, str]:
    issuer, allowed = verifier.provider.issuer, verifier.provider.clock_skew
    header = verifier.server_date
    try:
        theirs = parsedate_to_datetime(header).timestamp() if header else None
    except (TypeError, ValueError):
        theirs = None
    if theirs is None:
        return "warn", f"{issuer}: no usable HTTP Date header, clock skew not checked"
    skew = now() - theirs
    if abs(skew) > allowed + DATE_RESOLUTION:
        side = "ahead of" if skew > 0 else "behind"
        return "FAIL", (
            f"{issuer}: this clock is {abs(skew):.0f} s {side} the provider's, more than "
            f"clock_skew {allowed:g} s: tokens would be refused; synchronise the clock (NTP)"
        )
    return "ok", f"{issuer}: clocks agree within {abs(skew):.0f} s (clock_skew {allowed:g} s)"


def _secret_file(path: Path, setting: str) -> tuple[str, str]:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as e:
        return "FAIL", f"identity.{setting} {path}: {e.strerror} (fix the path)"
    if mode & NOT_OWNER:
        return "FAIL", f"identity.{setting} {path} ({mode:o}) is not owner-only: chmod 600 it"
    return "ok", f"identity.{setting} {path} owner-only"
