"""Jinja2 templates shipped inside the package, autoescaped (every value a page shows came
from a catalog, a policy or a log that callers can write to)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

_env = Environment(
    loader=PackageLoader("api.console", "templates"),
    autoescape=select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _json_script(value: Any) -> Markup:
    """JSON for a `<script type="application/json">` block: `<`, `>` and `&` escaped so no
    value can close the element."""
    text = json.dumps(value, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)  # escaped above for a script element


def _when(value: object) -> str:
    """A time as people read it: `2026-11-26 23:09:52 UTC`."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, str) and value.endswith("Z") and "T" in value:  # the audit log's
        return value[:19].replace("T", " ")
    return "" if value is None else str(value)


_env.filters["json_script"] = _json_script
_env.filters["when"] = _when
_env.filters["q"] = lambda v: quote(str(v), safe="")


def render(name: str, context: dict[str, Any]) -> str:
    return _env.get_template(name).render(**context)
