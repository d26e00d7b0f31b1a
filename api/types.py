"""Spark type strings to Unity Catalog's column type fields (type_name, type_json, precision).

The catalog stores Spark's `simpleString` and, for tables read through Spark, the
StructField JSON. Tables registered by other tools may lack the JSON, so it is rebuilt here
from the type string, parsed by sqlglot's Spark dialect rather than by asking a JVM.

sqlglot is asked to parse strictly: `exp.DataType.build` ignores parse errors and silently
drops what it cannot read (`struct<select:int>` becomes an empty STRUCT, `array<int` an
ARRAY<INT>). `simpleString` prints struct field names unquoted (`struct<user-id:int,a b:int>`),
which no SQL parser reads, so those names are backquoted first. What sqlglot still refuses
(`void`, the empty `struct<>`) keeps the old fallback: the head word names the UC type and
`type_json` is the type text itself.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from sqlglot import exp, parse_one
from sqlglot.errors import ErrorLevel, ParseError

DType = exp.DataType.Type
_SIMPLE: dict[DType, tuple[str, str]] = {  # sqlglot type -> (UC type name, Spark JSON name)
    DType.BOOLEAN: ("BOOLEAN", "boolean"),
    DType.TINYINT: ("BYTE", "byte"),
    DType.SMALLINT: ("SHORT", "short"),
    DType.INT: ("INT", "integer"),
    DType.BIGINT: ("LONG", "long"),
    DType.FLOAT: ("FLOAT", "float"),
    DType.DOUBLE: ("DOUBLE", "double"),
    DType.DATE: ("DATE", "date"),
    DType.TIMESTAMPTZ: ("TIMESTAMP", "timestamp"),  # Spark's `timestamp` is local-zone
    DType.TIMESTAMPLTZ: ("TIMESTAMP", "timestamp"),
    DType.TIMESTAMPNTZ: ("TIMESTAMP_NTZ", "timestamp_ntz"),
    DType.TEXT: ("STRING", "string"),
    DType.BINARY: ("BINARY", "binary"),
    DType.NULL: ("NULL", "void"),
    DType.VARIANT: ("VARIANT", "variant"),
}
_NESTED = {
    DType.DECIMAL: "DECIMAL",
    DType.ARRAY: "ARRAY",
    DType.MAP: "MAP",
    DType.STRUCT: "STRUCT",
    DType.CHAR: "CHAR",
    DType.VARCHAR: "STRING",
    DType.INTERVAL: "INTERVAL",
}
# A struct field name: after `<` or `,`, up to `:`; quoted names and string literals (a
# DDL-style COMMENT) are matched first so that their insides are left alone.
_FIELD = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|(?<=[<,])([^`'<>,:]+):")
# Only for what sqlglot refuses: `void`, and nested types around it or empty (`struct<>`).
_HEAD = {"void": "NULL", "array": "ARRAY", "map": "MAP", "struct": "STRUCT"}


def type_name(type_text: str) -> str:
    """UC's ColumnTypeName for a Spark type string (`USER_DEFINED_TYPE` when unknown)."""
    dtype = _build(type_text)
    if dtype is None:
        head = re.split(r"[<(\s]", type_text.strip().lower(), maxsplit=1)[0]
        return _HEAD.get(head, "USER_DEFINED_TYPE")
    if isinstance(dtype.this, exp.Interval):
        return "INTERVAL"
    simple = _SIMPLE.get(dtype.this)
    return simple[0] if simple else _NESTED.get(dtype.this, "USER_DEFINED_TYPE")


def precision_scale(type_text: str) -> tuple[int | None, int | None]:
    """A decimal's (precision, scale); Spark's defaults (10, 0) when the text gives none."""
    dtype = _build(type_text)
    if dtype is None or dtype.this != DType.DECIMAL:
        return None, None
    return _decimal(dtype)


def field_json(name: str, type_text: str, nullable: bool, comment: str | None) -> str:
    """Spark's StructField JSON for a column (what UC clients expect in `type_json`)."""
    metadata: dict[str, Any] = {"comment": comment} if comment else {}
    dtype = _build(type_text)
    try:
        value: Any = type_text.strip().lower() if dtype is None else _json(dtype)
    except ValueError:  # a type sqlglot knows and Spark's JSON does not, e.g. geometry
        value = type_text.strip().lower()
    return json.dumps(
        {"name": name, "type": value, "nullable": nullable, "metadata": metadata},
        separators=(",", ":"),
    )


@lru_cache(maxsize=4096)
def _build(type_text: str) -> exp.DataType | None:
    """The type's sqlglot tree, or None where strict parsing fails (see the module note);
    cached, since a table's columns are read three ways per render. Never mutated."""
    try:
        return parse_one(
            _FIELD.sub(_quote_field, type_text.strip()),
            read="spark",
            into=exp.DataType,
            error_level=ErrorLevel.RAISE,
        )
    except ParseError:
        return None


def _quote_field(m: re.Match[str]) -> str:
    if m.group(1) is None:
        return m.group(0)
    name = m.group(1).strip()
    return "`" + name.replace("`", "``") + "`:" if name else m.group(0)


def _decimal(dtype: exp.DataType) -> tuple[int, int]:
    params = [int(p.name) for p in dtype.expressions]
    return (params[0] if params else 10), (params[1] if len(params) > 1 else 0)


def _json(dtype: exp.DataType) -> Any:
    """Spark's JSON form of one data type (DataType.jsonValue)."""
    kind = dtype.this
    if isinstance(kind, exp.Interval):
        return f"interval {kind.args['unit'].sql('spark').lower()}"
    if kind in _SIMPLE:
        return _SIMPLE[kind][1]
    if kind == DType.DECIMAL:
        precision, scale = _decimal(dtype)
        return f"decimal({precision},{scale})"
    if kind in (DType.CHAR, DType.VARCHAR):
        if not dtype.expressions:
            return "string"  # Spark reads a bare char/varchar as string
        return f"{kind.value.lower()}({dtype.expressions[0].name})"
    if kind == DType.INTERVAL:
        return "interval"
    if kind == DType.ARRAY:
        return {"type": "array", "elementType": _json(dtype.expressions[0]), "containsNull": True}
    if kind == DType.MAP:
        key, value = dtype.expressions
        return {
            "type": "map",
            "keyType": _json(key),
            "valueType": _json(value),
            "valueContainsNull": True,
        }
    if kind == DType.STRUCT:
        return {"type": "struct", "fields": [_field(f) for f in dtype.expressions]}
    raise ValueError(f"no Spark JSON for type {dtype.sql('spark')}")


def _field(column: exp.ColumnDef) -> dict[str, Any]:
    """One struct field; DDL-style `NOT NULL` and `COMMENT '...'` are honoured."""
    constraints = [c.args["kind"] for c in column.args.get("constraints") or []]
    comment = next(
        (c.this.name for c in constraints if isinstance(c, exp.CommentColumnConstraint)), None
    )
    return {
        "name": column.name,
        "type": _json(column.args["kind"]),
        "nullable": not any(isinstance(c, exp.NotNullColumnConstraint) for c in constraints),
        "metadata": {"comment": comment} if comment else {},
    }
