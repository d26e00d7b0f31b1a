"""The built-in masks as Spark SQL trees; their exact output is part of the policy contract."""

from __future__ import annotations

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


def mask_expr(
    mask: str, column: str, type_text: str, expression: exp.Expression | None = None
) -> exp.Expression:
    """One masked column as a tree; `expression` is the (already governed) custom mask."""
    col = exp.column(column, quoted=True)

    def as_string() -> exp.Expression:
        return exp.cast(col.copy(), "string")

    def stars(length: exp.Expression) -> exp.Expression:
        return _call(
            "repeat",
            exp.Literal.string("*"),
            _call(
                "greatest",
                exp.Sub(this=length, expression=exp.Literal.number(4)),
                exp.Literal.number(0),
            ),
        )

    typ = type_text.lower()
    if mask == "redact":
        if typ == "string" or typ.startswith(("varchar", "char")):
            return exp.Literal.string("REDACTED")
        return exp.cast(exp.null(), sql_type(type_text))
    if mask == "null":
        return exp.cast(exp.null(), sql_type(type_text))
    if mask == "hash":
        return _call("sha2", as_string(), exp.Literal.number(256))
    if mask == "last4":
        return _call(
            "concat",
            stars(_call("length", as_string())),
            _call("right", as_string(), exp.Literal.number(4)),
        )
    if mask == "first4":
        return _call(
            "concat",
            _call("left", as_string(), exp.Literal.number(4)),
            stars(_call("length", as_string())),
        )
    if mask == "email_domain":
        return _call(
            "regexp_extract", as_string(), exp.Literal.string("^.*@(.*)$"), exp.Literal.number(1)
        )
    if mask == "year":
        if typ == "date":
            return _call("trunc", col, exp.Literal.string("year"))
        if typ.startswith("timestamp"):
            return _call("date_trunc", exp.Literal.string("year"), col)
        return _call("trunc", exp.cast(col, "date"), exp.Literal.string("year"))
    if mask == "custom":
        if expression is None:
            raise Refused(f"custom mask on column {column} has no expression")
        return expression
    raise Refused(f"unknown mask {mask!r} on column {column}")


def mask_sql(mask: str, column: str, type_text: str, expression: str | None = None) -> str:
    """mask_expr as Spark SQL text, for callers that build whole views elsewhere."""
    custom = sqlglot.parse_one(expression, read="spark") if expression else None
    return mask_expr(mask, column, type_text, custom).sql("spark")
