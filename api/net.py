"""Addresses: the one test of whether a host is this machine, for the places where plain
text is allowed only on loopback (an issuer's keys, an LDAP bind, a server's listen
address)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1); never a name that resolves."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str) -> bool:
    return is_loopback(urlsplit(url).hostname or "")
