"""StatementLimits' unit tests' parts (no Spark): limits with test defaults, a statement
started in a thread of its own, and waiting until a condition holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from api.connect.limits import StatementLimits, StatementRefused


def limits_of(per_user: int, **settings: Any) -> StatementLimits:
    """Limits of `per_user` statements a user, with these settings (queue_wait, ...)."""
    return StatementLimits(per_user=per_user, timeout=60.0, row_limit=10, **settings)


def admitted(limits: StatementLimits, user: str, op: str) -> tuple[threading.Thread, list]:
    """A statement started in its own thread; its outcome (op id or error) lands in the list."""
    out: list = []

    def go() -> None:
        try:
            out.append(limits.start((user, "s", op)).key[2])
        except StatementRefused as e:
            out.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def until(check: Callable[[], bool]) -> None:
    deadline = time.time() + 5
    while not check() and time.time() < deadline:
        time.sleep(0.01)
    assert check()
