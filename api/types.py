"""Spark type strings to Unity Catalog's column type fields (type_name, type_json, precision).

The catalog stores Spark's `simpleString` and, for tables read through Spark, the
StructField JSON. Tables registered by other tools may lack the JSON, so it is rebuilt here
from the type string with a small parser rather than by asking a JVM.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SIMPLE = {
    "boolean": ("BOOLEAN", "boolean"),
    "tinyint": ("BYTE", "byte"), "byte": ("BYTE", "byte"),
    "smallint": ("SHORT", "short"), "short": ("SHORT", "short"),
    "int": ("INT", "integer"), "integer": ("INT", "integer"),
    "bigint": ("LONG", "long"), "long": ("LONG", "long"),
    "float": ("FLOAT", "float"), "real": ("FLOAT", "float"),
    "double": ("DOUBLE", "double"),
    "date": ("DATE", "date"),
    "timestamp": ("TIMESTAMP", "timestamp"), "timestamp_ltz": ("TIMESTAMP", "timestamp"),
    "timestamp_ntz": ("TIMESTAMP_NTZ", "timestamp_ntz"),
    "string": ("STRING", "string"),
    "binary": ("BINARY", "binary"),
    "void": ("NULL", "void"), "null": ("NULL", "void"),
    "variant": ("VARIANT", "variant"),
}
_DECIMAL = re.compile(r"^decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def type_name(type_text: str) -> str:
    """UC's ColumnTypeName for a Spark type string (`USER_DEFINED_TYPE` when unknown)."""
    t = type_text.strip().lower()
    head = re.split(r"[<(\s]", t, maxsplit=1)[0]
    if head in _SIMPLE:
        return _SIMPLE[head][0]
    return {"decimal": "DECIMAL", "numeric": "DECIMAL", "dec": "DECIMAL", "array": "ARRAY",
            "map": "MAP", "struct": "STRUCT", "char": "CHAR", "varchar": "STRING",
            "interval": "INTERVAL"}.get(head, "USER_DEFINED_TYPE")


def precision_scale(type_text: str) -> tuple[int | None, int | None]:
    t = type_text.strip().lower()
    if t == "decimal":
        return 10, 0
    m = _DECIMAL.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def field_json(name: str, type_text: str, nullable: bool, comment: str | None) -> str:
    """Spark's StructField JSON for a column (what UC clients expect in `type_json`)."""
    metadata: dict[str, Any] = {"comment": comment} if comment else {}
    try:
        dtype = _parse(type_text.strip())
    except ValueError:
        dtype = type_text.strip().lower()
    return json.dumps({"name": name, "type": dtype, "nullable": nullable, "metadata": metadata},
                      separators=(",", ":"))


# --- a small recursive-descent parser of Spark's simpleString -------------------------------


def _parse(text: str) -> Any:
    value, rest = _type(text)
    if rest.strip():
        raise ValueError(f"trailing text in type {text!r}")
    return value


def _type(s: str) -> tuple[Any, str]:
    s = s.lstrip()
    m = re.match(r"([A-Za-z_]+)", s)
    if not m:
        raise ValueError(f"no type at {s!r}")
    head, rest = m.group(1).lower(), s[m.end():]
    if head in ("decimal", "numeric", "dec"):
        d = re.match(r"\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)", rest)
        if d:
            return f"decimal({d.group(1)},{d.group(2)})", rest[d.end():]
        return "decimal(10,0)", rest
    if head in ("char", "varchar"):
        d = re.match(r"\s*\(\s*(\d+)\s*\)", rest)
        return (f"{head}({d.group(1)})", rest[d.end():]) if d else ("string", rest)
    if head == "array":
        elem, rest = _type(_expect(rest, "<"))
        return {"type": "array", "elementType": elem, "containsNull": True}, _expect(rest, ">")
    if head == "map":
        key, rest = _type(_expect(rest, "<"))
        val, rest = _type(_expect(rest, ","))
        return ({"type": "map", "keyType": key, "valueType": val, "valueContainsNull": True},
                _expect(rest, ">"))
    if head == "struct":
        rest = _expect(rest, "<")
        fields = []
        while not rest.lstrip().startswith(">"):
            f = re.match(r"\s*(`(?:[^`]|``)*`|[^:<>,\s]+)\s*:", rest)
            if not f:
                raise ValueError(f"bad struct field at {rest!r}")
            fname = f.group(1)
            if fname.startswith("`"):
                fname = fname[1:-1].replace("``", "`")
            ftype, rest = _type(rest[f.end():])
            fields.append({"name": fname, "type": ftype, "nullable": True, "metadata": {}})
            if rest.lstrip().startswith(","):
                rest = rest.lstrip()[1:]
        return {"type": "struct", "fields": fields}, _expect(rest, ">")
    if head == "interval":
        m2 = re.match(r"(\s+[a-z]+(\s+to\s+[a-z]+)?)", rest, re.I)
        tail = m2.group(1) if m2 else ""
        return f"interval{tail.lower()}", rest[len(tail):]
    if head in _SIMPLE:
        return _SIMPLE[head][1], rest
    raise ValueError(f"unknown type {head}")


def _expect(s: str, token: str) -> str:
    s = s.lstrip()
    if not s.startswith(token):
        raise ValueError(f"expected {token!r} at {s!r}")
    return s[1:]
