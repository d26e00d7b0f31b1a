"""mkdocs hook: links from a docs page to repository files outside docs/ (audit/README.md,
policies/, benchmarks/REPORT.md) read well on GitHub but are not pages of the site, so
`mkdocs build --strict` would fail on them. On the site each becomes a link into the
repository when mkdocs.yml names a `repo_url`, else its text with the repository path.
tests/test_docs_commands.py checks that every such link resolves in the repository."""

from __future__ import annotations

import posixpath
import re
from typing import Any

LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def _repo_path(page_uri: str, target: str) -> str | None:
    """The repository path a relative link leaves docs/ for, or None if it stays inside."""
    if re.match(r"^[a-z][a-z0-9+.-]*:|^/|^#", target):
        return None
    path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), target))
    return None if path.startswith("docs/") else path.rstrip("/") + ("/" * target.endswith("/"))


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def replace(m: re.Match[str]) -> str:
        text, target = m.group(1), m.group(2)
        path = _repo_path(page.file.src_uri, target)
        if path is None:
            return m.group(0)
        if repo_url:
            return f"[{text}]({repo_url}/blob/main/{path})"
        return text if path.rstrip("/") in text else f"{text} (`{path}`)"

    return LINK.sub(replace, markdown)
