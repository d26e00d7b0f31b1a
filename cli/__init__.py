"""The `lakegate` command line on click; the commands are assembled in `app.py`.

The top layer (.importlinter): it assembles every entry point (`serve`, `connect`, the
tools) and nothing imports it. This init imports nothing, so `python -m cli` and the
entry point load only the command they run."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

# Lakegate forks only to exec (Spark's JVM, git). gRPC's fork handlers serve a child that goes
# on using gRPC; with another thread inside a gRPC call at that moment (a probe of the port
# `lakegate connect` opens before Spark starts) they skip themselves and can leave the child
# broken, and Spark's start then fails. Off before anything imports grpc; an operator's own
# setting wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")


def main(argv: Sequence[str] | None = None) -> int:
    from cli.app import main as run

    return run(argv)


def __getattr__(name: str) -> Any:
    if name == "cli":
        from cli.app import cli

        return cli
    raise AttributeError(name)
