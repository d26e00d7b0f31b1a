"""Step 7, audit: a statement's lines, written fail closed.

The session puts the steps in order; this writes what each step leaves on record: the
intent of a change before it runs (nothing runs when it cannot be written), then the
outcome, a denial or a failure. A write that fails refuses the access, or, after the
effect, says the statement ran and its outcome is not on record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit import AuditEvent, AuditLog, AuditWriteError
from governance import metrics
from governance.errors import AccessDenied, AuditUnavailable, OutcomeNotRecorded
from governance.execute.run import ERROR_LOG
from governance.identity import NO_CLAIMS, IdpClaims

if TYPE_CHECKING:
    from governance.planning.dispatch import Planner
    from governance.planning.planned import Planned


def write_or_refuse(
    log: AuditLog, events: list[AuditEvent], *, outcome_of: str | None = None
) -> None:
    """Write `events` or refuse: `AuditUnavailable` before an effect; for the outcome of
    query `outcome_of`, `OutcomeNotRecorded`, since the effect may already have happened.
    The one fail-closed audit write of every entry point (session, REST, Connect)."""
    try:
        log.write(events)
        metrics.AUDIT_LINES.inc(len(events))
    except (AuditWriteError, OSError) as e:
        metrics.AUDIT_FAILURES.inc()
        if outcome_of is None:
            raise AuditUnavailable(f"audit log unavailable, access refused: {e}") from None
        ERROR_LOG.error("query %s ran but its outcome is not on record: %s", outcome_of, e)
        raise OutcomeNotRecorded(
            f"audit log unavailable: the statement ran and its intent is on record "
            f"(query {outcome_of}), but its outcome could not be written",
            outcome_of,
        ) from None


class StatementRecorder:
    """One session's audit lines, one statement at a time (`begin` starts each)."""

    def __init__(
        self,
        log: AuditLog,
        directory: Path,
        *,
        user: str,
        auth: str,
        via: str | None,
        ip: str,
        proto: str,
        caller_context: str | None,
        claims: IdpClaims = NO_CLAIMS,
    ) -> None:
        self.log, self.directory = log, directory
        self._who = {
            "user": user,
            "auth": auth,
            "via": via,
            "ip": ip,
            "proto": proto,
            "caller_context": caller_context,
            "issuer": claims.issuer,
            "subject": claims.subject,
        }
        self.query_id = ""
        self._hash = ""
        self._version: str | None = None  # of the policy set that planned the statement
        self._phase: str | None = None  # audit phase of the statement's next record
        self._started = 0.0

    def assert_claims(self, claims: IdpClaims) -> None:
        self._who = {**self._who, "issuer": claims.issuer, "subject": claims.subject}

    def begin(self, query_id: str, stmt_hash: str, policy_version: str) -> None:
        self.query_id, self._hash, self._version = query_id, stmt_hash, policy_version
        self._phase = None
        self._started = time.perf_counter()

    @property
    def policy_version(self) -> str | None:
        return self._version

    def decided_by(self, policy_version: str) -> None:
        """The version of the policy set the planner took (a reload may have come between)."""
        self._version = policy_version

    def check(self) -> None:
        """Fail before running anything if the audit log cannot take the record."""
        if not self.directory.is_dir():
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise AuditUnavailable(f"audit log unavailable: {e}") from None

    def intent(self, planned: Planned) -> None:
        """Audit before effect: the intent is flushed before anything runs; every later
        record of the statement is its outcome."""
        self._phase = "intent"
        self._write(
            [self._line(allowed=True, succeeded=False, **ln) for ln in planned.audit_lines()]
        )
        self._phase = "outcome"

    def carried(self, planned: Planned) -> None:
        """The tags a write carries, known once Spark analysed the statement (after its
        intent, governance.planning.lineage): on record as intent before any effect."""
        lines = planned.propagation_lines()
        if not lines:
            return
        phase, self._phase = self._phase, "intent"
        try:
            self._write([self._line(allowed=True, succeeded=False, **ln) for ln in lines])
        finally:
            self._phase = phase

    def ok(self, planned: Planned) -> None:
        self._write(
            [
                self._line(allowed=True, succeeded=True, duration_ms=self._ms(), **ln)
                for ln in planned.audit_lines()
            ]
        )

    def later(self, planned: Planned) -> Callable[[str | None], None]:
        """The outcome lines of a read whose columns are known only once Spark analysed the
        plan it is placed in (the Connect gateway, docs/audit-columns.md): written by
        calling the answer, which the caller does before any row is read; `reason` set
        says the plan was not run (nothing was read)."""
        fields = {
            **self._who,
            "policy_version": self._version,
            "phase": self._phase,
            "query_id": self.query_id,
            "stmt_hash": self._hash,
        }
        started = self._started

        def write(reason: str | None = None) -> None:
            if reason is not None:
                planned.reads_nothing()
            ms = int((time.perf_counter() - started) * 1000)
            events = [
                AuditEvent(
                    **fields,
                    allowed=True,
                    succeeded=reason is None,
                    reason=reason,
                    duration_ms=ms,
                    **ln,
                )
                for ln in planned.audit_lines()
            ]
            write_or_refuse(self.log, events)

        return write

    def denied(self, e: AccessDenied, planner: Planner | None) -> None:
        cmd = e.cmd if e.cmd in ("refused", "parseError") or planner is None else planner.cmd
        ms = self._ms()
        events = []
        for t in e.tables or (None,):
            policies = e.policies or (planner.decided.get(t, ()) if planner and t else ())
            filters = e.row_filters or (planner.filters.get(t, ()) if planner and t else ())
            events.append(
                self._line(
                    allowed=False,
                    succeeded=False,
                    cmd=cmd,
                    src=t,
                    reason=str(e),
                    duration_ms=ms,
                    policies=policies,
                    row_filters=filters,
                )
            )
        self._write(events)

    def failed(self, reason: str, planned: Planned | None, planner: Planner | None) -> None:
        if planned is not None:
            lines = planned.audit_lines()
        else:
            lines = [{"cmd": planner.cmd if planner else "refused", "src": None}]
        ms = self._ms()
        self._write(
            [
                self._line(
                    allowed=planned is not None,
                    succeeded=False,
                    reason=reason,
                    duration_ms=ms,
                    **ln,
                )
                for ln in lines
            ]
        )

    def _ms(self) -> int:
        return int((time.perf_counter() - self._started) * 1000)

    def _line(self, **kw: Any) -> AuditEvent:
        return AuditEvent(
            **self._who,
            policy_version=self._version,
            phase=self._phase,
            query_id=self.query_id,
            stmt_hash=self._hash,
            **kw,
        )

    def _write(self, events: list[AuditEvent]) -> None:
        after = self._phase == "outcome"  # the effect may have happened: say so
        write_or_refuse(self.log, events, outcome_of=self.query_id if after else None)
