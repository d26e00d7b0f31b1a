"""What a catalog, schema or table name may be: a name, never a path.

Managed table locations are built from name parts (`warehouse/catalog/schema/table`), so
a part holding `/`, `\\`, `..`, NUL or a control character could point a new table into
another table's files. Every entry point (SQL, `register_table`, the REST API, the store)
checks each part here. The allowed set is deliberately small and ASCII-only: letters,
digits, `_` and `-` (not first), at most 255 characters. That also rules out Unicode
look-alikes, bidi controls, zero-width characters, spaces and a `.` inside a quoted part.
Names are case-insensitive and stored lower-case.
"""

from __future__ import annotations

import re
import unicodedata

MAX_NAME_CHARS = 255
NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_-]*"  # also the REST schema's name parts
_NAME = re.compile(NAME_PATTERN)


class InvalidName(ValueError):
    """A name part outside the allowed character set."""


def _why(part: str) -> str:
    if part == "":
        return "is empty"
    if "/" in part or "\\" in part:
        return "contains a path separator"
    if ".." in part:
        return "contains '..'"
    if "\x00" in part:
        return "contains a NUL character"
    if part != part.strip():
        return "has leading or trailing spaces"
    for ch in part:
        cat = unicodedata.category(ch)
        if cat == "Cc":
            return "contains a control character"
        if cat == "Cf":
            return "contains an invisible formatting character (bidi or zero-width)"
    if "." in part:
        return "contains '.' (a name part cannot hold a dot, even when quoted)"
    if len(part) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    return "may hold only ASCII letters, digits, '_' and '-' (not first)"


def check_name(part: object, what: str = "name") -> str:
    """`part` lower-cased if it is a valid name part; otherwise InvalidName in one line."""
    if not isinstance(part, str):
        raise InvalidName(f"{what} must be text")
    if len(part) <= MAX_NAME_CHARS and _NAME.fullmatch(part):
        return part.lower()
    raise InvalidName(f"{what} {part!r} {_why(part)}")
