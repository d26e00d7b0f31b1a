"""The built-in masks as Spark SQL; their exact output is part of the policy contract."""

from __future__ import annotations

from governance.errors import Refused


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mask_sql(mask: str, column: str, type_text: str, expression: str | None = None) -> str:
    """SQL for one masked column; `expression` is the (already governed) custom SQL."""
    col = quote_ident(column)
    as_string = f"CAST({col} AS STRING)"
    typ = type_text.lower()
    if mask == "redact":
        return "'REDACTED'" if typ in ("string",) or typ.startswith(("varchar", "char")) \
            else f"CAST(NULL AS {type_text})"
    if mask == "null":
        return f"CAST(NULL AS {type_text})"
    if mask == "hash":
        return f"sha2({as_string}, 256)"
    if mask == "last4":
        return (f"concat(repeat('*', greatest(length({as_string}) - 4, 0)), "
                f"right({as_string}, 4))")
    if mask == "first4":
        return (f"concat(left({as_string}, 4), "
                f"repeat('*', greatest(length({as_string}) - 4, 0)))")
    if mask == "email_domain":
        return f"regexp_extract({as_string}, '^.*@(.*)$', 1)"
    if mask == "year":
        if typ == "date":
            return f"trunc({col}, 'year')"
        if typ.startswith("timestamp"):
            return f"date_trunc('year', {col})"
        return f"trunc(CAST({col} AS DATE), 'year')"
    if mask == "custom":
        if not expression:
            raise Refused(f"custom mask on column {column} has no expression")
        return expression
    raise Refused(f"unknown mask {mask!r} on column {column}")
