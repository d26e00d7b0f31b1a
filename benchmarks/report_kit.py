"""What every section of benchmarks/REPORT.md shares: how a figure and a verdict print."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
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


def splice_section(report: Path, title: str, section: str) -> None:
    """Replace the section headed `title` in `report` (up to the next `## `), or put it
    before the report's closing line ("Every figure above ...") when it has none: the
    load scripts each rewrite only their own section."""
    text = report.read_text() if report.is_file() else ""
    start = text.find(title)
    if start >= 0:
        end = text.find("\n## ", start + len(title))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        marker = text.rfind("Every figure above")
        text = text[:marker] + section + text[marker:] if marker >= 0 else text + section
    report.write_text(text)
