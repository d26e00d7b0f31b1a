"""Lakegate's governed session: policy-decided rows and values over Delta tables on Spark.

The session classes load lazily, so the policy tools (`governance.policy`) import without
the session's dependencies.
"""

from typing import Any

from governance.errors import (
    AccessDenied,
    AuditUnavailable,
    ConfigError,
    LakegateError,
    Refused,
    SqlParseError,
)

__all__ = [
    "AccessDenied",
    "AuditUnavailable",
    "ConfigError",
    "GovernedSession",
    "Lakegate",
    "LakegateError",
    "Refused",
    "SqlParseError",
    "StatementFailed",
]


def __getattr__(name: str) -> Any:
    if name in ("Lakegate", "GovernedSession", "StatementFailed"):
        from governance.session import governed as session

        return getattr(session, name)
    raise AttributeError(f"module 'governance' has no attribute {name!r}")
