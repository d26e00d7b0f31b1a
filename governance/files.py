"""Owner-only files: what Lakegate and its Spark write holds raw values, policy text, token
hashes or Spark's error texts (which may quote rows), so no other local user may read it.

`owner_only_umask` makes every file and directory this process, and any JVM it starts
afterwards, creates owner-only; `loose_modes` finds what is not (doctor and tests); secret
Spark settings are recognised by name (`is_secret_setting`) and kept off command lines.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

#: Group and other permission bits: none may be set on anything Lakegate writes.
NOT_OWNER = 0o077

#: Setting names that hold credentials. Spark's own redaction pattern
#: (`spark.redaction.regex`: secret|password|token|access[.]key) plus the Hadoop and cloud
#: spellings it misses (fs.azure.account.key.*, *.credentials, SAS tokens, keystores).
SECRET_SETTING = re.compile(
    r"(?i)secret|password|passwd|token|credential|access[.]key|account[.]key|"
    r"[.]sas[.]|private[.]key|keystore[.]pass"
)


def owner_only_umask() -> None:
    """Tighten the process umask to at least 077 (never loosen what a platform set).

    Called before Lakegate opens its catalog, audit log or logs, and before the JVM starts:
    the JVM inherits the umask, so Spark's warehouse, scratch and temp files follow it."""
    current = os.umask(NOT_OWNER)
    os.umask(current | NOT_OWNER)


def owner_only(path: Path) -> None:
    """Make an existing file Lakegate owns owner-only (a log made by an older version)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & NOT_OWNER:
        path.chmod(mode & ~NOT_OWNER)


def owner_only_tree(root: Path) -> None:
    """`owner_only` for `root` and everything under it (copies keep their source's modes)."""
    owner_only(root)
    for p in root.rglob("*"):
        if not p.is_symlink():
            owner_only(p)


def modes(root: Path) -> Iterator[tuple[Path, int]]:
    """`root` (a file or a directory) and everything under it, with their modes; links
    are not followed."""
    for where, dirs, files in (
        os.walk(root, followlinks=False) if root.is_dir() else [(str(root.parent), [], [root.name])]
    ):
        base = Path(where)
        here = [base] if base == root else []
        for p in [*here, *(base / d for d in dirs), *(base / f for f in files)]:
            try:
                st = os.lstat(p)
            except FileNotFoundError:  # gone while walking (a temp file)
                continue
            if not stat.S_ISLNK(st.st_mode):
                yield p, stat.S_IMODE(st.st_mode)


def loose_modes(root: Path) -> list[tuple[Path, int]]:
    """What under `root` a group or other users may read, write or enter."""
    return [(p, m) for p, m in modes(root) if m & NOT_OWNER]


def is_secret_setting(key: str) -> bool:
    return SECRET_SETTING.search(key) is not None
