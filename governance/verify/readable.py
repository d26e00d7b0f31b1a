"""Readable analysis errors name only what the caller may see (issue 25, item 4).

Spark's analysis errors are allow-listed by class (governance/execute/run.py) because their
messages name identifiers, not values. But the identifiers are Spark's, not the caller's:
`UNRESOLVED_COLUMN.WITH_SUGGESTION` lists the columns of whatever relation failed, which
for an error inside a governed view body is the Delta table itself, hidden columns
included. So every readable error is checked against its message parameters (Spark's
structured fields, never guessed from the text):

- a suggestion list (`proposal`, `referenceNames`) keeps only the names the caller may see:
  a column visible to them in the statement's views (qualified by that view's alias), or a
  name of their own statement that is no hidden column; with none left, a
  `*.WITH_SUGGESTION` error becomes its `*.WITHOUT_SUGGESTION` form;
- every other parameter may name only words of the caller's statement or columns visible to
  them (numbers, Spark's own fixed parameters, a built-in function's name and the phrase of
  a syntax error's hint aside): a name or value from a view body
  (a row filter's column, a mask's literal, a mapping table, a Delta path) makes the error
  unreadable, and the caller gets its class and query id, as for any other error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from governance.sql.constructs import SPARK_BUILTINS

#: Parameters Spark fills with its own text (documentation root, the function search path,
#: argument counts, the any_value() rewrite of an expression already checked).
_FIXED = frozenset({"docroot", "searchPath", "expectedNum", "actualNum", "expressionAnyValue"})
#: Parameters that are lists of candidate names, filtered item by item.
_LISTS = frozenset({"proposal", "referenceNames"})
_WORD = re.compile(r"\w+")
_QUOTED = re.compile(r"'([^']*)'")
_INTERNAL = "__lg_"


@dataclass(frozen=True)
class Seen:
    """What one caller may see of one statement: its own words, and per view alias the
    visible columns (all lower-case); hidden columns are never a name they may be told."""

    words: frozenset[str]
    views: Mapping[str, frozenset[str]]
    hidden: frozenset[str]

    @property
    def visible(self) -> frozenset[str]:
        return frozenset().union(*self.views.values()) if self.views else frozenset()


def seen_by(
    statement: str | bytes | None, views: Iterable[tuple[str, Iterable[str]]], hidden: Iterable[str]
) -> Seen:
    """The caller's statement's words and the statement's views as (alias, visible)."""
    text = statement.decode("utf-8", "replace") if isinstance(statement, bytes) else statement
    words = frozenset(w.lower() for w in _WORD.findall(text or ""))
    return Seen(
        words,
        {a.lower(): frozenset(c.lower() for c in cols) for a, cols in views},
        frozenset(h.lower() for h in hidden),
    )


def _split(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside backquotes (Spark doubles a backquote inside one)."""
    out, cur, quoted = [], [], False
    for ch in text:
        if ch == "`":
            quoted = not quoted
        if ch == sep and not quoted:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _parts(name: str) -> list[str]:
    """`a`.`b``c` -> ['a', 'b`c'] (lower-case)."""
    parts = []
    for p in _split(name.strip(), "."):
        p = p.strip()
        if len(p) >= 2 and p[0] == p[-1] == "`":
            p = p[1:-1].replace("``", "`")
        parts.append(p.lower())
    return parts


def _column_ok(parts: list[str], seen: Seen) -> bool:
    """A (qualified) column name the caller may be told of."""
    if not parts or any(not p or p.startswith(_INTERNAL) for p in parts):
        return False
    *quals, col = parts
    if quals and quals[-1] in seen.views:
        return col in seen.views[quals[-1]] and all(q in seen.words for q in quals[:-1])
    if not all(q in seen.words for q in quals):
        return False
    return col in seen.visible or (col in seen.words and col not in seen.hidden)


def _words_ok(value: str, seen: Seen) -> bool:
    """Every word of `value` is the caller's own or a column visible to them."""
    for w in _WORD.findall(value):
        low = w.lower()
        if low.isdigit():
            continue
        if low.startswith(_INTERNAL) or (low not in seen.words and low not in seen.visible):
            return False
    return True


def readable_line(cls: str, first: str, params: Mapping[str, str], seen: Seen) -> str | None:
    """Spark's first line with its suggestion lists cut to what the caller may see, or None
    when the error names something else (the caller then gets class + query id)."""
    line = first
    for key, value in params.items():
        if key in _FIXED:
            continue
        if key in _LISTS:
            inner = value.strip()
            if inner.startswith("[") and inner.endswith("]"):  # referenceNames is bracketed
                inner = inner[1:-1]
            items = [i.strip() for i in _split(inner, ",") if i.strip()]
            kept = [i for i in items if _column_ok(_parts(i), seen)]
            if key == "referenceNames" and len(kept) != len(items):
                return None  # an ambiguity among names the caller cannot see
            if len(kept) == len(items):
                continue
            if kept:
                line = line.replace(f"[{value}]", f"[{', '.join(kept)}]", 1)
                continue
            line = _without_suggestion(cls, line, value)
            if line is None:
                return None
            continue
        if key == "functionName" and _parts(value)[-1] in SPARK_BUILTINS:
            continue  # a built-in's name (the rewriter may respell `substr` `substring`)
        if key == "hint":  # Spark's phrase (`: extra input 'x'`) around quoted tokens
            value = " ".join(_QUOTED.findall(value))
        if not _words_ok(value, seen):
            return None
    return line


def _without_suggestion(cls: str, line: str, proposal: str) -> str | None:
    """A WITH_SUGGESTION error whose suggestions are all hidden, as WITHOUT_SUGGESTION."""
    if not cls.endswith(".WITH_SUGGESTION"):
        return None
    at = line.find(f"[{proposal}]")
    cut = line.rfind(".", 0, at)
    if at < 0 or cut < 0:
        return None
    bare = cls.removesuffix(".WITH_SUGGESTION") + ".WITHOUT_SUGGESTION"
    return line[: cut + 1].replace(f"[{cls}]", f"[{bare}]", 1)
