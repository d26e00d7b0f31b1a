"""What every section of benchmarks/REPORT.md shares: how a figure and a verdict print."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Appends one line (or block) of Markdown to the report.
Add = Callable[[str], None]
#: The Markdown of a chart (name, alt text), or a note that it has no data.
Img = Callable[[str, str], str]


def fmt(v: Any, spec: str = ".3f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def met(ok: bool | None) -> str:
    """A target's verdict; without a measurement, "not measured" (never "met")."""
    return "not measured" if ok is None else ("**met**" if ok else "**NOT met**")
