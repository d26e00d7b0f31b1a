"""LDAP group sync on a schedule (issue 37, `identity.ldap`): every `interval` seconds the
directory's groups are read (api/ldap_groups.py) and handed whole to `apply` (the directory
store's `replace_source_groups` for source "ldap"), which replaces the previous snapshot.

The last good set is kept whenever a sync cannot be trusted: the directory unreachable, a
bind refused, a search refused or over its limits, or an answer with no groups at all
(far more often a wrong base, filter or ACL than an organisation without groups). Then
`apply` is not called, the reason is logged, kept in `last` and counted in the metrics,
and the next sync tries again; nothing raises into the server. Provider groups are thus
at most `interval` seconds stale while the directory answers, and the age of
`lakegate_ldap_sync_last_success_timestamp_seconds` says how stale they are when it does not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from api.ldap_groups import LdapError, read_groups
from governance.config import LdapConfig
from governance.metrics import (
    LDAP_SYNC_ERRORS,
    LDAP_SYNC_GROUPS,
    LDAP_SYNC_LAST_SUCCESS,
    LDAP_SYNC_SKIPPED,
)

log = logging.getLogger("lakegate.ldap")

#: provider group name -> member user names: one source's whole snapshot
Groups = dict[str, frozenset[str]]


@dataclass(frozen=True)
class SyncResult:
    """What one sync found; `error` set means nothing was applied (the last good set stays)."""

    groups: int  # groups read (0 on error)
    members: int  # distinct users in any group
    skipped: int  # member values and group entries left out (see the reasons)
    duration: float  # seconds
    error: str | None = None
    skipped_by_reason: tuple[tuple[str, int], ...] = ()
    at: float = 0.0  # the clock's time when the sync ended

    @property
    def ok(self) -> bool:
        return self.error is None


class LdapSync:
    """Reads the directory's groups now (`run_once`) or every `config.interval` seconds in a
    background thread (`start`/`stop`), applying only sets it can trust."""

    def __init__(
        self,
        config: LdapConfig,
        apply: Callable[[Groups], None],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._apply = apply
        self._clock = clock
        self._lock = threading.Lock()  # one sync at a time (the thread and a manual run)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: SyncResult | None = None  # the latest sync, good or not
        self.last_good: Groups | None = None  # the latest set applied
        self.last_success: float | None = None  # the clock's time of that apply

    def run_once(self) -> SyncResult:
        """One sync; never raises (a failure is the result's `error`)."""
        with self._lock:
            started = time.monotonic()
            groups: Groups | None = None
            skipped: tuple[tuple[str, int], ...] = ()
            try:
                found = read_groups(self.config)
                groups, skipped = found.groups, tuple(sorted(found.skipped.items()))
                if not groups:
                    raise LdapError(
                        f"LDAP search under {self.config.group_base} found no groups; "
                        "the last good set is kept"
                    )
                self._apply(dict(groups))
                error = None
            except LdapError as e:
                error = str(e)
            except Exception as e:  # apply or ldap3 itself: the class only, never data
                error = f"LDAP group sync failed ({type(e).__name__})"
            applied = groups if error is None and groups is not None else {}
            result = SyncResult(
                groups=len(applied),
                members=len(frozenset().union(*applied.values())),
                skipped=sum(n for _, n in skipped),
                duration=time.monotonic() - started,
                error=error,
                skipped_by_reason=skipped,
                at=self._clock(),
            )
            self.last = result
            if error is None:
                assert groups is not None
                self.last_good, self.last_success = groups, result.at
                LDAP_SYNC_LAST_SUCCESS.set(result.at)
                LDAP_SYNC_GROUPS.set(result.groups)
                LDAP_SYNC_SKIPPED.set(result.skipped)
                if result.skipped:
                    log.warning(
                        "LDAP group sync skipped %d value(s): %s",
                        result.skipped,
                        ", ".join(f"{n} {why}" for why, n in skipped),
                    )
            else:
                LDAP_SYNC_ERRORS.inc()
                age = (
                    "none applied yet"
                    if self.last_success is None
                    else f"last good set from {result.at - self.last_success:.0f} s ago"
                )
                log.error("%s (%s, kept)", error, age)
            return result

    def start(self) -> None:
        """Sync now and then every `interval` seconds in a daemon thread, until `stop()`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lakegate-ldap-sync", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.config.interval)

    def stop(self, timeout: float | None = None) -> None:
        """Stop the schedule; waits for a running sync (bounded by the config's timeouts)."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(4 * self.config.timeout + 5 if timeout is None else timeout)
