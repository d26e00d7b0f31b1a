"""Java-compatible escaping of audit values.

Values are escaped like Apache Commons ``StringEscapeUtils.escapeJava`` so that a line never
holds a raw tab, newline or non-ASCII character and any Java/Hadoop tool can unescape it with
``unescapeJava``. Two deliberate additions, both still undone by ``unescapeJava``:

* DEL (U+007F) is written ``\\u007F`` (Java leaves it raw, but it is a control character);
* callers may ask for extra ASCII characters to be written as ``\\uXXXX`` (list separators such
  as ``,`` and ``:``), which keeps splitting unambiguous without inventing a new escape.
"""

from __future__ import annotations

import re
from functools import lru_cache

_SIMPLE: dict[str, str] = {
    '"': '\\"',
    "\\": "\\\\",
    "\t": "\\t",
    "\n": "\\n",
    "\r": "\\r",
    "\b": "\\b",
    "\f": "\\f",
}

# The literal token ``null`` means "empty"; a real value spelled null is written this way.
NULL_TOKEN = "null"
ESCAPED_NULL = "\\u006Eull"


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    simple = _SIMPLE.get(char)
    if simple is not None:
        return simple
    code = ord(char)
    if code > 0xFFFF:  # astral: UTF-16 surrogate pair, as Java strings hold it
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return f"\\u{code:04X}"


@lru_cache(maxsize=16)
def _pattern(extra: str) -> re.Pattern[str]:
    extra_class = "".join(re.escape(c) for c in extra)
    return re.compile(f'[^\\x20-\\x7e]|["\\\\{extra_class}]')


def _plain(text: str, extra: str) -> bool:
    """True when nothing in ``text`` needs escaping (the common case, checked in C)."""
    if not (text.isascii() and text.isprintable()) or "\\" in text or '"' in text:
        return False
    return not extra or all(c not in text for c in extra)


def escape_java(text: str, extra: str = "") -> str:
    """Escape like ``escapeJava``; characters in ``extra`` are also written as ``\\uXXXX``."""
    if _plain(text, extra):
        return text
    return _pattern(extra).sub(_escape_char, text)


_UNESCAPE = re.compile(r"\\(?:u+([0-9A-Fa-f]{4})|([0-3][0-7]{0,2}|[4-7][0-7]?)|(.))", re.DOTALL)
_UNESCAPE_SIMPLE = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _unescape_match(match: re.Match[str]) -> str:
    hex_digits, octal, other = match.groups()
    if hex_digits is not None:
        return chr(int(hex_digits, 16))
    if octal is not None:
        return chr(int(octal, 8))
    return _UNESCAPE_SIMPLE.get(other, other)


def unescape_java(text: str) -> str:
    """Undo ``escape_java`` (and anything Java's ``unescapeJava`` accepts).

    Like Commons Text, an unknown escape ``\\x`` yields ``x``; a trailing lone backslash is
    kept. Surrogate pairs are joined back into one astral character.
    """
    if "\\" not in text:
        return text
    result = _UNESCAPE.sub(_unescape_match, text)
    if _SURROGATE.search(result) is not None:
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return result


def escape_value(text: str | None, extra: str = "") -> str:
    """One field value: ``null`` when empty, otherwise escaped (a real "null" is disguised)."""
    if not text:
        return NULL_TOKEN
    if text != NULL_TOKEN and _plain(text, extra):
        return text
    escaped = escape_java(text, extra)
    return ESCAPED_NULL if escaped == NULL_TOKEN else escaped


def unescape_value(raw: str) -> str | None:
    """Inverse of :func:`escape_value`: ``null`` (or blank) means no value."""
    if raw == NULL_TOKEN or raw == "":
        return None
    return unescape_java(raw)


@lru_cache(maxsize=4096)
def escape_list(items: tuple[str, ...]) -> str:
    """Comma-separated list; commas inside items become ``\\u002C``; empty items are dropped."""
    parts = [escape_value(item, ",") for item in items if item]
    return ",".join(parts) if parts else NULL_TOKEN


def unescape_list(raw: str) -> tuple[str, ...]:
    """Inverse of :func:`escape_list`: split on raw commas, unescape each item."""
    if raw == NULL_TOKEN or raw == "":
        return ()
    return tuple(unescape_java(part) for part in raw.split(","))


@lru_cache(maxsize=4096)
def escape_pairs(pairs: tuple[tuple[str, str], ...]) -> str:
    """``column:mask`` pairs; ``,`` and ``:`` inside either side become ``\\uXXXX``."""
    parts = [
        f"{escape_value(column, ',:')}:{escape_value(mask, ',:')}"
        for column, mask in pairs
        if column
    ]
    return ",".join(parts) if parts else NULL_TOKEN


def unescape_pairs(raw: str) -> tuple[tuple[str, str | None], ...]:
    """Inverse of :func:`escape_pairs`; a pair without a mask yields ``None`` as the mask."""
    if raw == NULL_TOKEN or raw == "":
        return ()
    pairs: list[tuple[str, str | None]] = []
    for part in raw.split(","):
        column, _, mask = part.partition(":")
        pairs.append((unescape_java(column), unescape_value(mask)))
    return tuple(pairs)
