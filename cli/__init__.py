"""The `lakegate` command line on click; the commands are assembled in `app.py`.

The top layer (.importlinter): it assembles every entry point (`serve`, `connect`, the
tools) and nothing imports it. This init imports nothing, so `python -m cli` and the
entry point load only the command they run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    from cli.app import main as run

    return run(argv)


def __getattr__(name: str) -> Any:
    if name == "cli":
        from cli.app import cli

        return cli
    raise AttributeError(name)
