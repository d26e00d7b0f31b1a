"""Problems with policies: where, what and how to fix it, and how they are shown.

The bottom of the policy tools' imports: the YAML reader, the model builder and the checks
all report through these, so `lakegate policy validate` and a reloading server word every
problem the same way.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from governance.errors import LakegateError
from governance.policy.model import Source

Severity = Literal["error", "warning"]

# Names people reach for that difflib would not map (or would map wrongly, e.g. masks -> tags).
_KEY_ALIASES: dict[str, str] = {
    "masks": "column_masks",
    "column_mask": "column_masks",
    "columnmasks": "column_masks",
    "filters": "row_filters",
    "row_filter": "row_filters",
    "rowfilters": "row_filters",
    "grant": "grants",
    "group": "groups",
    "tag": "tags",
    "principal": "principals",
    "users": "principals",
    "privilege": "privileges",
    "on_table": "on",
    "table": "on",
    "column": "columns",
    "exempt": "except",
    "exceptions": "except",
    "condition": "where",
    "filter": "where",
    "type": "kind",
    "expr": "expression",
    "owner": "owners",
    "schema": "schemas",
    "name": "id",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the policies: where, what, and how to fix it."""

    file: str
    line: int
    column: int
    message: str
    hint: str = ""
    severity: Severity = "error"
    code: str = "invalid"

    @classmethod
    def at(
        cls,
        source: Source,
        code: str,
        message: str,
        hint: str = "",
        severity: Severity = "error",
    ) -> Problem:
        return cls(source.file, source.line or 1, source.column or 1, message, hint, severity, code)

    def __str__(self) -> str:
        text = (
            f"{self.file}:{self.line}:{self.column}: {self.severity}[{self.code}]: {self.message}"
        )
        return f"{text} (hint: {self.hint})" if self.hint else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
        }

    @property
    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.file, self.line, self.column, self.code, self.message)


class PolicyError(LakegateError):
    """The policy set was refused; `problems` holds every reason (one line each in str())."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = sorted(problems, key=lambda p: p.sort_key)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A 'did you mean X?' hint, or the list of allowed words when nothing is close."""
    choices = list(choices)
    alias = _KEY_ALIASES.get(word.lower())
    if alias in choices:
        return f"did you mean '{alias}'?"
    close = difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "expected one of: " + ", ".join(choices)


def format_problems(problems: Sequence[Problem], fmt: Literal["text", "json"] = "text") -> str:
    """Render problems for the CLI: `file:line:col: error[code]: message (hint: ...)` or JSON."""
    ordered = sorted_problems(problems)
    if fmt == "json":
        return json.dumps([p.to_dict() for p in ordered], indent=2)
    if fmt != "text":
        raise ValueError(f"unknown format '{fmt}': use text or json")
    return "\n".join(str(p) for p in ordered)


def sorted_problems(problems: Iterable[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: p.sort_key)


def group_hint(group: str, groups: Iterable[str]) -> str:
    known = sorted(groups)
    if not known:
        return f"define it under groups: ({group}: [members])"
    hint = did_you_mean(group, known)
    if hint.startswith("did you mean"):
        return f"{hint} Otherwise define it under groups:"
    return f"define '{group}' under groups: (no group is named like it)"
