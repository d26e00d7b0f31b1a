"""The gateway's Connect sessions: per-user quotas, idle expiry, release in the backend.

A Connect session is (verified user, session id). Spark's backend keeps at most 100 sessions
in one least-recently-used cache for every user together, so a user opening many sessions
would evict other users' sessions (and interrupt their running operations). The gateway
therefore admits a session before any call reaches the backend: a user holds at most
`connect.max_sessions_per_user` sessions (a new one closes that user's own least recently
used idle session; refused when all of theirs are running statements), the gateway at most
`connect.max_sessions` (at most the backend's 100; a new session over it is refused). Room
is never made by closing another user's session. A session unused for
`connect.session_idle_timeout` seconds, with no statement running, is expired: its governed
session (temp views) is dropped and the backend's SessionHolder released. A Spark 4
client's `spark.stop()` sends ReleaseSession, which closes its session at once (`close`);
Spark 3.5 clients never say they are done with a session (each `lakegate sql --gateway` run
opens one), so closing and expiry are what free theirs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from api.connect.verified import VerifiedQueries
from governance.errors import LakegateError
from governance.execute.run import ERROR_LOG

if TYPE_CHECKING:
    from governance.session.governed import GovernedSession

Key = tuple[str, str]  # (user, session id)
RELEASE_WAIT = 30.0  # seconds a session's next call waits for its backend release to end


class SessionRefused(LakegateError):
    """A new session over the user's or the gateway's quota."""


@dataclass
class Entry:
    """One admitted session: its governed session (made on first use), the lock its
    statements plan under, when it was last used and how many of its statements run."""

    governed: GovernedSession | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    last_used: float = 0.0
    running: int = 0
    config: dict[bytes, Any] = field(default_factory=dict)  # settings.config_answer's memo
    verified: VerifiedQueries = field(default_factory=VerifiedQueries)  # verified.py


class SessionRegistry:
    """The admitted sessions; `release(user, session_id)` frees one in the backend."""

    def __init__(
        self,
        *,
        per_user: int,
        total: int,
        idle_timeout: float,
        release: Callable[[str, str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_user, self.total, self.idle_timeout = per_user, total, idle_timeout
        self.clock = clock
        self._release = release
        self._entries: dict[Key, Entry] = {}
        self._lock = threading.Lock()
        # sessions dropped here whose backend release has not ended yet: the same session's
        # next call waits for it (see `admit`)
        self._releasing: dict[Key, int] = {}
        self._released = threading.Condition(self._lock)

    def admit(self, user: str, session_id: str) -> Entry:
        """The session's entry, admitted now if new (idle sessions are expired first). A
        user at their quota gives up their own least recently used idle session; raises
        SessionRefused when all of theirs are running statements, or the gateway is full.

        A session another thread expired or closed a moment ago is admitted again only once
        its release in the backend has ended: a release landing after the new admission
        would drop what the new call keeps there (its verified Dataset: the client's query
        then fails; seen with Spark 3.5 clients, whose idle sessions expire)."""
        self.expire_idle()
        key = (user, session_id)
        closed: list[Key] = []
        try:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None and not self._released.wait_for(
                    lambda: key not in self._releasing, RELEASE_WAIT
                ):
                    raise SessionRefused(
                        f"the Spark Connect session {session_id} is still being released in "
                        "the backend; retry"
                    )
                entry = self._entries.get(key)
                if entry is None:
                    self._make_room(user, closed)
                    entry = self._entries[key] = Entry()
                entry.last_used = self.clock()
                return entry
        finally:
            self._release_all(closed)

    def _make_room(self, user: str, closed: list[Key]) -> None:
        """Room for one more session of `user` (under the registry's lock): the keys of the
        user's own sessions closed for it go into `closed`, which the caller releases even
        when a refusal follows, so a dropped session is never left "being released"."""
        mine = [(e.last_used, k) for k, e in self._entries.items() if k[0] == user]
        if len(mine) >= self.per_user:
            idle = sorted((used, k) for used, k in mine if self._entries[k].running == 0)
            if len(mine) - len(idle) >= self.per_user:
                raise SessionRefused(
                    f"user {user} has {len(mine)} open Spark Connect sessions, each running "
                    "a statement: the most connect.max_sessions_per_user allows; wait for "
                    "one to finish"
                )
            dropped = [k for _, k in idle[: len(mine) - self.per_user + 1]]
            for k in dropped:
                del self._entries[k]
            self._dropping(dropped)
            closed.extend(dropped)
        if len(self._entries) >= self.total:  # (never after closing one of the user's)
            raise SessionRefused(
                f"the gateway has {len(self._entries)} open Spark Connect sessions, the "
                "most connect.max_sessions allows; try again later"
            )

    def find(self, user: str, session_id: str, *, hold: bool = False) -> Entry | None:
        """The admitted session's entry (touched), or None; never admits one. `hold`: the
        entry counts as running until `finished`, so it is not expired while a call about
        one of its operations is in the backend (3.5's backend answers such a call for a
        session it no longer has by making a new one)."""
        with self._lock:
            entry = self._entries.get((user, session_id))
            if entry is not None:
                entry.last_used = self.clock()
                if hold:
                    entry.running += 1
            return entry

    def started(self, entry: Entry) -> None:
        """A statement of the session runs: it is not expired meanwhile."""
        with self._lock:
            entry.running += 1

    def finished(self, entry: Entry) -> None:
        with self._lock:
            entry.running -= 1
            entry.last_used = self.clock()

    def expire_idle(self) -> list[Key]:
        """Expire every session idle longer than the timeout with nothing running; each is
        released in the backend (outside the registry's lock). The keys expired."""
        now = self.clock()
        with self._lock:
            gone = [
                key
                for key, e in self._entries.items()
                if e.running == 0 and now - e.last_used > self.idle_timeout
            ]
            for key in gone:
                del self._entries[key]
            self._dropping(gone)
        self._release_all(gone)
        return gone

    def _dropping(self, keys: list[Key]) -> None:
        """Under the lock: these sessions' releases are about to run (`_release_all`)."""
        for key in keys:
            self._releasing[key] = self._releasing.get(key, 0) + 1

    def _release_all(self, keys: list[Key]) -> None:
        """Release each session in the backend (outside the registry's lock), then let a
        new call of it in (`admit`)."""
        for user, session_id in keys:
            try:
                self._release(user, session_id)
            except Exception as e:  # the backend's own idle expiry still frees it
                ERROR_LOG.error("connect session of %s not released in the backend: %s", user, e)
            finally:
                with self._lock:
                    key = (user, session_id)
                    left = self._releasing.get(key, 0) - 1
                    if left > 0:
                        self._releasing[key] = left
                    else:
                        self._releasing.pop(key, None)
                    self._released.notify_all()

    def close(self, user: str, session_id: str) -> bool:
        """The client is done with its session (ReleaseSession): it is dropped now and released
        in the backend, which interrupts what it still runs. The key is the verified user's,
        so no caller closes another user's session. Whether it was open."""
        with self._lock:
            gone = self._entries.pop((user, session_id), None) is not None
            if gone:
                self._dropping([(user, session_id)])
        if gone:
            self._release_all([(user, session_id)])
        return gone

    def end_user(self, user: str) -> list[Key]:
        """End every session of `user` (deprovisioned by the identity provider), running or
        not: each is released in the backend, which interrupts what it runs. The keys ended."""
        with self._lock:
            gone = [key for key in self._entries if key[0] == user]
            for key in gone:
                del self._entries[key]
            self._dropping(gone)
        self._release_all(gone)
        return gone

    def held(self, user: str, session_id: str) -> bool:
        with self._lock:
            return (user, session_id) in self._entries

    def count(self, user: str | None = None) -> int:
        with self._lock:
            return sum(1 for u, _ in self._entries if user is None or u == user)

    def kept(self) -> int:
        """Verified Datasets kept in the backend across calls, every session (verified.py:
        at most KEPT a session)."""
        with self._lock:
            entries = list(self._entries.values())
        return sum(len(e.verified) for e in entries)


class Sweeper(threading.Thread):
    """Expires idle sessions in the background, so an idle gateway frees them too."""

    def __init__(self, registry: SessionRegistry, every: float) -> None:
        super().__init__(name="lakegate-connect-sessions", daemon=True)
        self.registry, self.every = registry, every
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.registry.expire_idle()

    def stop(self) -> None:
        self._done.set()
