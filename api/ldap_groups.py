"""Groups read from an LDAP directory (issue 37, `identity.ldap`), for organisations without
SCIM: one bounded, paged search under `group_base`, each group's name and its members' user
names, nested groups resolved. Only reading: api/ldap_sync.py schedules it and keeps the
last good set; the directory store (catalog/directory.py) applies the group mapping.

Everything the directory answers is data, not trust. A member is a user only when its DN's
first RDN is the configured `user_attribute` (`uid=alice,ou=people,...` -> `alice`) and the
value passes the one identity rule (`canonical_user`): look-alikes, escaped values and DNs
of other things (services, printers, groups outside the search) are skipped and counted,
never mapped. Nested groups are members whose DN is another group of the same search; no
filter is built from directory data (the only filter is the configured one), so nothing
needs escaping. Every failure is one line (`LdapError`) that never holds the password or
the directory's own diagnostic text.
"""

from __future__ import annotations

import contextlib
import math
import os
import ssl
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from api.net import is_loopback_url
from governance.config import LdapConfig
from governance.identity import InvalidName, canonical_user

#: At most this many group entries in one sync; more is an error (the last good set stays).
MAX_GROUPS = 10_000
#: At most this many member values over all groups in one sync.
MAX_MEMBER_VALUES = 1_000_000
#: A group name longer than this is skipped (the mapping handles everything shorter).
MAX_GROUP_NAME = 256
PAGE_SIZE = 500
_PAGED_RESULTS = "1.2.840.113556.1.4.319"

# skip reasons (closed set: they are metric labels and CLI output)
NOT_A_USER = "member DN without the user attribute"
INVALID_USER = "member user name outside the identity rule"
INVALID_DN = "member value that is not a DN"
BAD_GROUP = "group entry without a usable name"
DUPLICATE_GROUP = "group name used by two entries"


class LdapError(Exception):
    """One sync failed; the message is one line, safe to log and to show."""


@dataclass(frozen=True)
class LdapGroups:
    """One directory read: provider group name -> member user names (nested members
    included), and what was skipped, by reason."""

    groups: dict[str, frozenset[str]]
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def users(self) -> int:
        """Distinct users in any group."""
        return len(frozenset().union(*self.groups.values())) if self.groups else 0

    @property
    def memberships(self) -> int:
        return sum(len(m) for m in self.groups.values())


def read_password(path: Path) -> str:
    """The bind password: a regular file only its owner may read, its first line."""
    try:
        info = os.stat(path)
        raw = path.read_bytes()
    except OSError as e:
        raise LdapError(
            f"identity.ldap.password_file {path} cannot be read ({e.strerror})"
        ) from None
    if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
        raise LdapError(
            f"identity.ldap.password_file {path} must be a file readable by its owner only"
        )
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise LdapError(f"identity.ldap.password_file {path} is not UTF-8 text") from None
    if not lines or not lines[0]:
        # an empty password makes a simple bind anonymous (RFC 4513 5.1.2): refused
        raise LdapError(f"identity.ldap.password_file {path} is empty")
    return lines[0]


def _is_tls(config: LdapConfig) -> bool:
    return config.url.lower().startswith("ldaps://") or config.ca_file is not None


def _connection(config: LdapConfig) -> Any:
    """An open, bound, read-only connection, or LdapError."""
    import ldap3
    from ldap3.core.exceptions import LDAPException

    if (config.bind_dn is None) != (config.password_file is None):
        raise LdapError("identity.ldap needs both bind_dn and password_file, or neither")
    password = None if config.password_file is None else read_password(config.password_file)
    if password is not None and not _is_tls(config) and not is_loopback_url(config.url):
        raise LdapError(
            "identity.ldap sends its password only over TLS: use an ldaps:// URL or set "
            "ca_file for StartTLS"
        )
    parts = urlsplit(config.url)
    secure = parts.scheme.lower() == "ldaps"
    tls = None
    if _is_tls(config):
        tls = ldap3.Tls(  # the default context (TLS 1.2+); ldap3 checks the host name
            validate=ssl.CERT_REQUIRED,
            ca_certs_file=None if config.ca_file is None else str(config.ca_file),
        )
    try:
        server = ldap3.Server(
            parts.hostname or "",
            port=parts.port,
            use_ssl=secure,
            tls=tls,
            get_info=ldap3.NONE,
            connect_timeout=config.timeout,
        )
        conn = ldap3.Connection(
            server,
            user=config.bind_dn,
            password=password,
            authentication=ldap3.SIMPLE if password is not None else ldap3.ANONYMOUS,
            read_only=True,
            auto_referrals=False,
            receive_timeout=max(1, math.ceil(config.timeout)),  # ldap3 wants whole seconds
            raise_exceptions=False,
        )
    except (LDAPException, ValueError) as e:
        name = type(e).__name__
        raise LdapError(f"identity.ldap.url {config.url} is not usable ({name})") from None
    try:
        conn.open()
        if tls is not None and not secure and not conn.start_tls():
            raise LdapError(f"LDAP server {config.url} refused StartTLS")
        if not conn.bind():
            who = config.bind_dn or "anonymous"
            raise LdapError(
                f"LDAP bind as {who} refused by {config.url}: "
                f"{conn.result.get('description', 'refused')}"
            )
    except LdapError:
        _close(conn)
        raise
    except (LDAPException, OSError, ssl.SSLError) as e:
        _close(conn)
        if tls is not None and _is_certificate_error(e):
            raise LdapError(
                f"LDAP server {config.url}: its TLS certificate does not verify "
                + (
                    "against identity.ldap.ca_file"
                    if config.ca_file
                    else "against the system's CAs"
                )
            ) from None
        raise LdapError(f"LDAP server {config.url} unreachable ({type(e).__name__})") from None
    return conn


def _is_certificate_error(e: BaseException) -> bool:
    """ldap3 wraps a failed handshake in its socket errors; the cause or text tells."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError | ssl.CertificateError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "certificate" in str(e).lower()


def _close(conn: Any) -> None:
    from ldap3.core.exceptions import LDAPException

    with contextlib.suppress(LDAPException, OSError):
        conn.unbind()


def _attr(entry: dict[str, Any], name: str) -> list[bytes]:
    """An attribute's raw values, its name matched without case (servers spell it their way)."""
    raw = entry.get("raw_attributes") or {}
    wanted = name.lower()
    return next((list(v) for k, v in raw.items() if k.lower() == wanted), [])


def _search(conn: Any, config: LdapConfig, deadline: float) -> list[dict[str, Any]]:
    """Every entry the configured search finds, in pages, within the limits."""
    import ldap3
    from ldap3.core.exceptions import LDAPException

    entries: list[dict[str, Any]] = []
    cookie: bytes | None = None
    while True:
        if time.monotonic() > deadline:
            raise LdapError(f"LDAP search under {config.group_base} took too long")
        try:
            ok = conn.search(
                config.group_base,
                config.group_filter,
                search_scope=ldap3.SUBTREE,
                attributes=[config.group_name_attribute, config.member_attribute],
                paged_size=PAGE_SIZE,
                paged_cookie=cookie,
                time_limit=max(1, int(config.timeout)),
                size_limit=0,
            )
        except LDAPException as e:
            name = type(e).__name__
            if "Filter" in name:
                raise LdapError("identity.ldap.group_filter is not a valid LDAP filter") from None
            raise LdapError(f"LDAP search on {config.url} failed ({name})") from None
        if not ok and conn.result.get("result") not in (0, None):
            raise LdapError(
                f"LDAP search under {config.group_base} refused: "
                f"{conn.result.get('description', 'error')}"
            )
        entries += [e for e in conn.response or () if e.get("type") == "searchResEntry"]
        if len(entries) > MAX_GROUPS:
            raise LdapError(f"LDAP search found more than {MAX_GROUPS} groups")
        control = (conn.result.get("controls") or {}).get(_PAGED_RESULTS) or {}
        cookie = (control.get("value") or {}).get("cookie") or None
        if not cookie:
            return entries


DnKey = tuple[tuple[str, str], ...]


def _parse_dn(dn: str) -> list[tuple[str, str, str]] | None:
    """A DN's components (attribute, value as written, separator after it), or None."""
    from ldap3.core.exceptions import LDAPException
    from ldap3.utils.dn import parse_dn

    try:
        parts = parse_dn(dn)
    except (LDAPException, ValueError, IndexError):
        return None
    return parts or None


def _key(parts: list[tuple[str, str, str]]) -> DnKey:
    """A DN compared without case and spacing (`CN=X, OU=Groups` is `cn=x,ou=groups`)."""
    return tuple((a.strip().lower(), v.strip().lower()) for a, v, _ in parts)


def _decode(values: Iterable[bytes]) -> list[str] | None:
    try:
        return [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        return None


def _group_name(
    entry: dict[str, Any], parts: list[tuple[str, str, str]], config: LdapConfig
) -> str | None:
    """The entry's single name: the attribute's only value, or (several) the RDN's value."""
    names = _decode(_attr(entry, config.group_name_attribute))
    if not names:
        return None
    if len(names) > 1:
        attr, value, _ = parts[0]
        if attr.strip().lower() != config.group_name_attribute.lower() or value not in names:
            return None
        names = [value]
    name = names[0]
    if not name or len(name) > MAX_GROUP_NAME or not name.isprintable():
        return None
    return name


def _user(parts: list[tuple[str, str, str]], config: LdapConfig) -> str | None:
    """The user name a member DN names (its first RDN is `user_attribute`), else None."""
    attr, value, separator = parts[0]
    if attr.strip().lower() != config.user_attribute.lower() or separator == "+":
        return None  # another kind of entry, or a multi-valued RDN
    return value.strip()


def read_groups(config: LdapConfig, *, clock: Callable[[], float] = time.monotonic) -> LdapGroups:
    """One read of the directory's groups; LdapError (one line) when it cannot be trusted."""
    deadline = clock() + 3 * config.timeout
    conn = _connection(config)
    try:
        entries = _search(conn, config, deadline)
    finally:
        _close(conn)
    skipped: Counter[str] = Counter()
    names: dict[DnKey, str] = {}  # group DN -> its name
    members: dict[DnKey, list[tuple[DnKey, list[tuple[str, str, str]]]]] = {}
    values = 0
    for entry in entries:
        parts = _parse_dn(entry.get("dn") or "")
        name = None if parts is None else _group_name(entry, parts, config)
        if parts is None or name is None:
            skipped[BAD_GROUP] += 1
            continue
        raw = _attr(entry, config.member_attribute)
        values += len(raw)
        if values > MAX_MEMBER_VALUES:
            raise LdapError(f"LDAP groups hold more than {MAX_MEMBER_VALUES} member values")
        key = _key(parts)
        names[key], members[key] = name, []
        for value in raw:
            decoded = _decode([value])
            member = None if decoded is None else _parse_dn(decoded[0])
            if member is None:
                skipped[INVALID_DN] += 1
                continue
            members[key].append((_key(member), member))
    # a member whose DN is a group of this search is a nested group; anything else a user
    users: dict[DnKey, set[str]] = {}
    nested: dict[DnKey, list[DnKey]] = {}
    for key, listed in members.items():
        users[key], nested[key] = set(), []
        for member_key, parts in listed:
            if member_key in names:
                if member_key != key:
                    nested[key].append(member_key)
                continue
            user = _user(parts, config)
            if user is None:
                skipped[NOT_A_USER] += 1
                continue
            try:
                users[key].add(canonical_user(user))
            except InvalidName:
                skipped[INVALID_USER] += 1
    groups: dict[str, frozenset[str]] = {}
    by_name = Counter(names.values())
    for key, name in names.items():
        if by_name[name] > 1:
            skipped[DUPLICATE_GROUP] += 1  # which entry is the group? neither: fail closed
            continue
        groups[name] = frozenset(_closure(key, users, nested))
    return LdapGroups(groups, skipped)


def _closure(
    start: DnKey, users: dict[DnKey, set[str]], nested: dict[DnKey, list[DnKey]]
) -> set[str]:
    """Users of `start` and of every group nested in it, each group visited once (cycles
    end where they began)."""
    seen = {start}
    todo = [start]
    out: set[str] = set()
    while todo:
        key = todo.pop()
        out |= users.get(key, set())
        for sub in nested.get(key, ()):
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return out
