"""`lakegate doctor`'s checks for serving: certificates (valid now, not expiring soon, key
owner-only and matching, naming the host clients use) and at least one way to authenticate.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import socket
import stat
from pathlib import Path
from typing import Any

from governance.config import Config
from governance.files import NOT_OWNER

#: A certificate that ends sooner than this is a warning.
EXPIRY_WARNING = dt.timedelta(days=30)


def check_tokens(cfg: Config) -> tuple[str, str]:
    providers = len(cfg.identity.providers)
    if cfg.api.tokens or cfg.api.secret or providers:
        signed = ", signed tokens (api.secret)" if cfg.api.secret else ""
        oidc = f", {providers} identity provider(s)" if providers else ""
        return "ok", f"{len(cfg.api.tokens)} token(s){signed}{oidc}"
    return (  # fine for the embedded session; serve and connect refuse every request
        "warn",
        "no api.tokens and no api.secret: serve and connect refuse every request (401); "
        "lakegate token create --user NAME --save",
    )


def client_host(listen: str) -> str:
    """The name clients use for a server listening on `listen`: itself, or this host's
    name when it listens on every interface."""
    return socket.getfqdn().lower() if listen in ("0.0.0.0", "::", "") else listen.lower()


def check_certificate(
    section: str, cert: Path | None, key: Path | None, listen: str
) -> tuple[str, str]:
    """One (status, detail) for the `connect:` or `api:` section's certificate."""
    if cert is None or key is None:  # a setup that does not serve needs none
        if section == "connect":
            return (
                "warn",
                "connect.tls_cert/tls_key not set: lakegate connect will not start "
                "(lakegate certs makes them)",
            )
        return "warn", "api.tls_cert/tls_key not set: plain HTTP (lakegate certs makes them)"
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        crt = x509.load_pem_x509_certificate(cert.read_bytes())
        pkey = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        return "FAIL", f"{section}: cannot read {cert} / {key} ({type(e).__name__})"
    mode = stat.S_IMODE(key.stat().st_mode)
    if mode & NOT_OWNER:
        return "FAIL", f"{key} ({mode:o}) is readable by others: chmod 600 it"
    if _public(pkey.public_key()) != _public(crt.public_key()):
        return "FAIL", f"{key} is not the key of {cert}"
    now = dt.datetime.now(dt.UTC)
    if crt.not_valid_before_utc > now or crt.not_valid_after_utc <= now:
        return "FAIL", f"{cert} is not valid now (until {crt.not_valid_after_utc:%Y-%m-%d})"
    host = client_host(listen)
    names = _names(crt)
    if not _covers(names, host):
        return (
            "FAIL",
            f"{cert} names {', '.join(names) or 'nothing'}, not {host}, which clients use "
            "(lakegate certs --name HOST --force)",
        )
    left = crt.not_valid_after_utc - now
    detail = f"{cert} for {host}, valid until {crt.not_valid_after_utc:%Y-%m-%d}"
    return ("warn", detail + " (expires soon)") if left < EXPIRY_WARNING else ("ok", detail)


def _public(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bytes(key.public_bytes(der, spki))


def _names(crt: Any) -> list[str]:
    from cryptography import x509

    try:
        san = crt.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n).lower() for n in san.get_values_for_type(x509.DNSName)] + [
        str(a) for a in san.get_values_for_type(x509.IPAddress)
    ]


def _covers(names: list[str], host: str) -> bool:
    """Exact names and addresses, and one-label wildcards (`*.example.com`)."""
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host))
    for n in names:
        if n == host:
            return True
        if n.startswith("*.") and "." in host and host.split(".", 1)[1] == n[2:]:
            return True
    return False
