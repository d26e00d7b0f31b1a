"""The `lakegate` command line on click; the commands are assembled in `app.py`.

This init imports nothing: api/server.py and api/connect/server.py use `governance.cli.kit`
(the conventions and exit codes), and `app.py` imports them to register `serve` and
`connect`; loading the whole command tree here would make that a cycle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    from governance.cli.app import main as run

    return run(argv)


def __getattr__(name: str) -> Any:
    if name == "cli":
        from governance.cli.app import cli

        return cli
    raise AttributeError(name)
