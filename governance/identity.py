"""One identity, one spelling: the single rule every user and group name passes through.

Unicode case mapping folds look-alikes onto ASCII names (`\\u212aarl`, KELVIN SIGN + "arl",
lower-cases to `karl`; NFKC turns fullwidth `\\uff4b` and the ligature `\\ufb00` into ASCII), so a
token, policy or session naming a look-alike would act as someone else. Instead of mapping we
refuse: a name is 1..128 characters of ASCII letters, digits and `._@+-`. For that set NFKC
and casefold are the identity and ASCII lower-casing, so the canonical form is simply the
ASCII lower-case name; every other character is refused, never mapped.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

MAX_NAME_LENGTH = 128
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "._@+-")
NAME_RULE = f"1 to {MAX_NAME_LENGTH} ASCII letters, digits or ._@+-"


class InvalidName(ValueError):
    """A user or group name outside the documented set; the message never echoes the name
    (it may hold bidi overrides or invisible characters), only the first offending code point."""


def _describe(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed character')}"


def canonical_name(raw: object, kind: str = "user") -> str:
    """The canonical (ASCII lower-case) spelling of a `kind` name, or InvalidName."""
    if not isinstance(raw, str) or not raw:
        raise InvalidName(f"invalid {kind} name: empty; a {kind} name is {NAME_RULE}")
    if len(raw) > MAX_NAME_LENGTH:
        raise InvalidName(
            f"invalid {kind} name: {len(raw)} characters; a {kind} name is {NAME_RULE}"
        )
    bad = next((ch for ch in raw if ch not in NAME_CHARS), None)
    if bad is not None:
        raise InvalidName(
            f"invalid {kind} name: {_describe(bad)} is not allowed; a {kind} name is {NAME_RULE}"
        )
    return raw.lower()


def canonical_user(raw: object) -> str:
    """The canonical spelling of a user name (sessions, tokens, config, policies, CLI, REST)."""
    return canonical_name(raw, "user")


def canonical_group(raw: object) -> str:
    """The canonical spelling of a group name (policy `groups:` and `group:NAME`)."""
    return canonical_name(raw, "group")


@dataclass(frozen=True, slots=True)
class IdpClaims:
    """What the organisation's identity provider said about the user of one request (issue
    37): its policy groups (after `GroupMapping`), and the issuer and subject behind the user
    name, for the audit. Local sessions and Lakegate's own tokens carry `NO_CLAIMS`."""

    groups: frozenset[str] = frozenset()
    issuer: str | None = None
    subject: str | None = None


NO_CLAIMS = IdpClaims()


@dataclass(frozen=True)
class GroupMapping:
    """Provider group names -> policy group names, for one source (an OIDC issuer, SCIM,
    LDAP). Provider names are matched exactly (providers are case-sensitive); a name without
    an entry is kept as the policy group of the same name when `unmapped` is "keep" and it
    is a valid group name (Keycloak's full paths such as `/a/b` are not), else dropped."""

    map: tuple[tuple[str, str], ...] = ()
    unmapped: str = "keep"  # "keep" or "drop"

    def apply(self, names: Iterable[str]) -> frozenset[str]:
        table = dict(self.map)
        out: set[str] = set()
        for name in names:
            target = table.get(name)
            if target is None and self.unmapped == "keep":
                target = name
            if target is None:
                continue
            try:
                out.add(canonical_group(target))
            except InvalidName:
                continue  # a provider name outside the rule is no policy group
        return frozenset(out)

    def targets(self) -> frozenset[str]:
        """The policy groups this mapping can produce by its entries."""
        return frozenset(canonical_group(t) for _, t in self.map)
