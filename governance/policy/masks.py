"""The built-in masks as one table: how each is built, the type it leaves, what it means.

Everything else that knows mask kinds derives from `MASK_KINDS` (the policy model's `MASKS`,
DESCRIBE's masked type, the API's text; the JSON Schema's enum is checked against it), so a
new mask is one entry here. Each mask's exact output is part of the policy contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from governance.errors import Refused


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_type(type_text: str) -> exp.DataType:
    """A catalog type as a tree, for CASTs we generate."""
    try:
        return exp.DataType.build(type_text, dialect="spark")
    except (sqlglot.errors.SqlglotError, ValueError):
        raise Refused(f"column type {type_text!r} is not understood") from None


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    """Spark's function `name` as written: sqlglot's typed functions would translate it."""
    return exp.Anonymous(this=name, expressions=list(args))


def _is_string(type_text: str) -> bool:
    return type_text.lower().startswith(("string", "varchar", "char"))


def _as_string(col: exp.Expression) -> exp.Expression:
    return exp.cast(col.copy(), "string")


def _stars(length: exp.Expression) -> exp.Expression:
    """One `*` per character beyond the four a mask keeps."""
    return _call(
        "repeat",
        exp.Literal.string("*"),
        _call(
            "greatest",
            exp.Sub(this=length, expression=exp.Literal.number(4)),
            exp.Literal.number(0),
        ),
    )


def _redact(col: exp.Expression, type_text: str) -> exp.Expression:
    if _is_string(type_text):
        return exp.Literal.string("REDACTED")
    return exp.cast(exp.null(), sql_type(type_text))


def _year(col: exp.Expression, type_text: str) -> exp.Expression:
    typ = type_text.lower()
    if typ == "date":
        return _call("trunc", col, exp.Literal.string("year"))
    if typ.startswith("timestamp"):
        return _call("date_trunc", exp.Literal.string("year"), col)
    return _call("trunc", exp.cast(col, "date"), exp.Literal.string("year"))


def _string(type_text: str) -> str:
    return "string"


@dataclass(frozen=True, slots=True)
class MaskKind:
    """One built-in mask. `build(column, type)` is its Spark SQL tree (None: the custom mask,
    whose tree is the policy's own expression); `result_type(type)` what DESCRIBE shows;
    `strength` how much of the value it hides, for masks that reach one column through
    different tags (docs/policies.md): 3 nothing shown, 2 a digest, 1 a part of the value,
    0 unknown (a custom expression)."""

    name: str
    description: str
    build: Callable[[exp.Expression, str], exp.Expression] | None
    result_type: Callable[[str], str]
    strength: int


MASK_KINDS: dict[str, MaskKind] = {
    k.name: k
    for k in (
        MaskKind(
            "redact",
            "strings become 'REDACTED', other types NULL of their own type",
            _redact,
            lambda t: "string" if _is_string(t) else t,
            3,
        ),
        MaskKind(
            "null",
            "NULL of the column's own type",
            lambda col, t: exp.cast(exp.null(), sql_type(t)),
            lambda t: t,
            3,
        ),
        MaskKind(
            "hash",
            "SHA-256 of the value as text (hex): joinable, not readable",
            lambda col, t: _call("sha2", _as_string(col), exp.Literal.number(256)),
            _string,
            2,
        ),
        MaskKind(
            "last4",
            "'*' for every character but the last four",
            lambda col, t: _call(
                "concat",
                _stars(_call("length", _as_string(col))),
                _call("right", _as_string(col), exp.Literal.number(4)),
            ),
            _string,
            1,
        ),
        MaskKind(
            "first4",
            "the first four characters, then '*' for the rest",
            lambda col, t: _call(
                "concat",
                _call("left", _as_string(col), exp.Literal.number(4)),
                _stars(_call("length", _as_string(col))),
            ),
            _string,
            1,
        ),
        MaskKind(
            "email_domain",
            "the part after the last '@' (empty when there is none)",
            lambda col, t: _call(
                "regexp_extract",
                _as_string(col),
                exp.Literal.string("^.*@(.*)$"),
                exp.Literal.number(1),
            ),
            _string,
            1,
        ),
        MaskKind(
            "year",
            "the first day of the value's year (a date; timestamps keep their type)",
            _year,
            lambda t: t if t.lower().startswith(("date", "timestamp")) else "date",
            1,
        ),
        MaskKind(
            "custom",
            "the policy's own `expression` (the column named by its own name)",
            None,
            lambda t: "masked",
            0,
        ),
    )
}


def mask_expr(
    mask: str, column: str, type_text: str, expression: exp.Expression | None = None
) -> exp.Expression:
    """One masked column as a tree; `expression` is the (already governed) custom mask."""
    kind = MASK_KINDS.get(mask)
    if kind is None:
        raise Refused(f"unknown mask {mask!r} on column {column}")
    if kind.build is None:
        if expression is None:
            raise Refused(f"custom mask on column {column} has no expression")
        return expression
    return kind.build(exp.column(column, quoted=True), type_text)


def masked_type(mask: str, type_text: str) -> str:
    """The type a masked column has for the user (what DESCRIBE shows)."""
    kind = MASK_KINDS.get(mask)
    return kind.result_type(type_text) if kind else type_text


def mask_sql(mask: str, column: str, type_text: str, expression: str | None = None) -> str:
    """mask_expr as Spark SQL text, for callers that build whole views elsewhere."""
    custom = sqlglot.parse_one(expression, read="spark") if expression else None
    return mask_expr(mask, column, type_text, custom).sql("spark")
