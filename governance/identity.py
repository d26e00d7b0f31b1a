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
