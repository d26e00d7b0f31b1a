"""The witness: a copy of every checkpoint outside the audit directory.

A directory (on another disk, mount or host); when that directory is a git work tree, each
checkpoint is also committed there, and readers take the committed file (``HEAD``), so an
edit of the work tree does not count and a remote the repository pushes to (e.g. from a
``post-commit`` hook) keeps a history the audit host cannot take back.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from audit.checkpoint import append_line, witness_file

_IDENTITY = {
    "GIT_AUTHOR_NAME": "lakegate-audit",
    "GIT_AUTHOR_EMAIL": "lakegate-audit@localhost",
    "GIT_COMMITTER_NAME": "lakegate-audit",
    "GIT_COMMITTER_EMAIL": "lakegate-audit@localhost",
}


class WitnessError(OSError):
    """The witness did not take the checkpoint (the write that made it is refused)."""


def is_git(witness: Path) -> bool:
    return (witness / ".git").exists()


def _git(witness: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(witness), "-c", "commit.gpgsign=false", *args],
        capture_output=True,
        text=True,
        env=os.environ | _IDENTITY,
        check=False,
    )
    if result.returncode != 0:
        first = (result.stderr.strip().splitlines() or ["failed"])[0]
        raise WitnessError(f"git {args[0]} in witness {witness}: {first}")
    return result.stdout


def publish(witness: Path, origin: str, line: str, size: int, *, fsync: bool) -> None:
    """Append the checkpoint line to the witness (and commit it there in a git witness)."""
    witness.mkdir(parents=True, exist_ok=True)
    path = witness_file(witness, origin)
    append_line(path, line, fsync=fsync)
    if is_git(witness):
        _git(witness, "add", "--", path.name)
        _git(witness, "commit", "-q", "--no-verify", "-m", f"audit checkpoint {size}", "--",
             path.name)  # fmt: skip


def read(witness: Path, origin: str) -> tuple[str, str]:
    """``(label, text)`` of this log's checkpoints at the witness: the committed file of a
    git witness (empty before its first commit), else the file."""
    path = witness_file(witness, origin)
    if is_git(witness):
        try:
            return f"{path} (git HEAD)", _git(witness, "show", f"HEAD:{path.name}")
        except WitnessError:
            return f"{path} (git HEAD)", ""
    try:
        return str(path), path.read_text("ascii", "replace")
    except FileNotFoundError:
        return str(path), ""
