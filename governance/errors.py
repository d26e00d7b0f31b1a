"""The errors a governed statement can end in; each message is one line and reveals no data."""

from __future__ import annotations


class LakegateError(Exception):
    """Base of every error the governance layer raises on purpose."""


class AccessDenied(LakegateError):
    """The policies do not allow this user this access (or the layer refuses the statement)."""

    def __init__(
        self,
        message: str,
        *,
        cmd: str = "select",
        tables: tuple[str, ...] = (),
        policies: tuple[str, ...] = (),
        row_filters: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.cmd = cmd
        self.tables = tables
        self.policies = policies  # ids of the policies that decided the denial, for the audit
        self.row_filters = row_filters


class Refused(AccessDenied):
    """A statement kind or construct the layer does not govern: refused, never passed through."""

    def __init__(self, message: str, *, tables: tuple[str, ...] = ()) -> None:
        super().__init__(message, cmd="refused", tables=tables)


class SqlParseError(Refused):
    """The statement does not parse; it never reaches Spark."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.cmd = "parseError"


class ConfigError(LakegateError):
    """lakegate.yaml is missing a setting or holds a wrong one."""


class AuditUnavailable(LakegateError):
    """The audit log could not be written, so the access is refused (fail closed)."""


class OutcomeNotRecorded(AuditUnavailable):
    """The statement ran (its intent is on record) but its outcome line could not be
    written: not a refusal, and a retry would run it again."""

    def __init__(self, message: str, query_id: str) -> None:
        super().__init__(message)
        self.query_id = query_id
