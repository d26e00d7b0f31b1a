"""What `audit verify` reports: findings per writer and the whole report (text and JSON).

Kept apart from the chain walk in `audit.verify`, which fills these in."""

from __future__ import annotations

from dataclasses import dataclass, field

_PHRASES = {"deleted": "deleted line(s) before", "anchor": "chain anchor at"}

Pos = tuple[int, int]  # (file index oldest-first, 1-based line number)


@dataclass(frozen=True)
class Finding:
    """One break or notice, located at ``file:line``."""

    kind: str
    file: str
    line: int
    detail: str
    writer: str | None = None
    seq: int | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def __str__(self) -> str:
        who = ""
        if self.writer is not None:
            who = f" (writer {self.writer}" + (f", seq {self.seq})" if self.seq else ")")
        if self.line == 0:  # a whole file
            return f"{self.kind} file {self.file}: {self.detail}"
        phrase = _PHRASES.get(self.kind, f"{self.kind} line at")
        return f"{phrase} {self.where}{who}: {self.detail}"

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "writer": self.writer,
            "seq": self.seq,
            "detail": self.detail,
        }


@dataclass
class WriterSummary:
    """How much of one writer's chain is retained, and where."""

    writer: str
    lines: int = 0
    first_seq: int = 0
    last_seq: int = 0
    first_at: str = ""
    last_at: str = ""
    anchored: bool = False


@dataclass
class VerifyReport:
    """Outcome of :func:`verify`; ``ok`` is False exactly when some chain is broken."""

    directory: str
    files: list[str]
    lines: int
    writers: dict[str, WriterSummary]
    breaks: list[Finding]
    truncated: list[Finding]
    anchors: list[Finding]
    locked: bool = True
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.breaks

    @property
    def first_break(self) -> Finding | None:
        return self.breaks[0] if self.breaks else None

    def summary(self) -> str:
        """Human-readable report, first line the verdict's context."""
        span = f" ({self.files[0]} .. {self.files[-1]})" if len(self.files) > 1 else ""
        out = [
            f"audit verify {self.directory}: {len(self.files)} file(s){span}, "
            f"{self.lines} line(s), {len(self.writers)} writer chain(s)"
        ]
        if not self.locked:
            out.append("warning: could not take the audit lock; a writer may have been active")
        out.extend(f"warning: {text}" for text in self.warnings)
        if self.ok:
            out.append("OK: every chain verifies")
        else:
            out.append(f"BROKEN: {self.breaks[0]}")
            out.extend(f"  also: {finding}" for finding in self.breaks[1:])
        for finding in self.truncated:
            out.append(f"notice: {finding}")
        if self.anchors:
            files = sorted({a.file for a in self.anchors}, key=self.files.index)
            out.append(
                f"notice: {len(self.anchors)} chain(s) continue from lines that rotation "
                f"deleted (first retained line in {', '.join(files)})"
            )
        return "\n".join(out)

    def to_dict(self) -> dict[str, object]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "files": self.files,
            "lines": self.lines,
            "locked": self.locked,
            "warnings": self.warnings,
            "breaks": [f.to_dict() for f in self.breaks],
            "truncated": [f.to_dict() for f in self.truncated],
            "anchors": [f.to_dict() for f in self.anchors],
            "writers": {
                w.writer: {
                    "lines": w.lines,
                    "firstSeq": w.first_seq,
                    "lastSeq": w.last_seq,
                    "firstAt": w.first_at,
                    "lastAt": w.last_at,
                    "anchored": w.anchored,
                }
                for w in self.writers.values()
            },
        }
