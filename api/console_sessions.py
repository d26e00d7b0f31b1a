"""The console's sessions, kept in this process: the browser holds only an opaque random id.

A session maps that id to who signed in and the bearer token the console acts with, which
never leaves the server (a stolen cookie is not a token for the JSON API or the CLI, and
signing out ends it here: the same cookie replayed later is refused). Any sign-in method
opens one the same way (`open(principal, bearer, expires_at)`: the token form today, an
OIDC authorization-code sign-in next), and deprovisioning ends all of a user's at once
(`end_user`). Ids are looked up by their SHA-256, so the table holds no usable cookie.

Bounded: at most `max_sessions` records; a full table drops expired ones first, then the
least recently used. A session ends after `idle_seconds` without a request, at
`absolute_seconds` after sign-in, or at the `expires_at` its sign-in gave, whichever is
first. Sessions live in one server process: a restart signs everyone out, and several
server processes behind one address need sticky routing (docs/console.md).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

MAX_SESSIONS = 10_000
IDLE_SECONDS = 30 * 60
ABSOLUTE_SECONDS = 12 * 60 * 60


class HasUser(Protocol):
    """A signed-in principal (api.auth.Principal, or another sign-in method's)."""

    user: str


@dataclass
class ConsoleSession:
    """One signed-in browser. `bearer` is used server-side only, to authenticate each page."""

    user: str
    bearer: str
    created: float
    last_seen: float
    expires: float  # absolute end: sign-in + absolute_seconds, or the sign-in's own expiry
    # a provider sign-in's refresh and ID tokens (api/console/provider_signin.py): the
    # bearer is renewed with the refresh token when it expires; never sent to the browser
    refresh: str | None = None
    id_token: str | None = None


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


class ConsoleSessions:
    """Session id -> ConsoleSession, bounded, with idle and absolute timeouts; thread-safe."""

    def __init__(
        self,
        *,
        max_sessions: int = MAX_SESSIONS,
        idle_seconds: float = IDLE_SECONDS,
        absolute_seconds: float = ABSOLUTE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self.absolute_seconds = absolute_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._by_key: OrderedDict[str, ConsoleSession] = OrderedDict()  # least recent first

    def __len__(self) -> int:
        return len(self._by_key)

    def open(
        self,
        principal: HasUser,
        bearer: str,
        expires_at: float | None = None,
        *,
        refresh: str | None = None,
        id_token: str | None = None,
    ) -> str:
        """A new session for `principal`, acting with `bearer`; returns its id (the cookie's
        value, 256 random bits). `expires_at` (epoch seconds): the sign-in's own end;
        `refresh`, `id_token`: a provider sign-in's."""
        now = self._clock()
        end = now + self.absolute_seconds
        if expires_at is not None:
            end = min(end, expires_at)
        session_id = secrets.token_urlsafe(32)
        record = ConsoleSession(principal.user, bearer, now, now, end, refresh, id_token)
        with self._lock:
            if len(self._by_key) >= self.max_sessions:
                self._drop_expired(now)
            while len(self._by_key) >= self.max_sessions:
                self._by_key.popitem(last=False)  # the least recently used
            self._by_key[_key(session_id)] = record
        return session_id

    def get(self, session_id: str) -> ConsoleSession | None:
        """The live session with this id (its last use now), or None (unknown or expired:
        an expired one is forgotten)."""
        if not session_id:
            return None
        key = _key(session_id)
        now = self._clock()
        with self._lock:
            record = self._by_key.get(key)
            if record is None:
                return None
            if self._expired(record, now):
                del self._by_key[key]
                return None
            record.last_seen = now
            self._by_key.move_to_end(key)
            return record

    def close(self, session_id: str) -> ConsoleSession | None:
        """End one session (sign-out); returns it, or None when there was none."""
        if not session_id:
            return None
        with self._lock:
            return self._by_key.pop(_key(session_id), None)

    def end_user(self, user: str) -> int:
        """End every session of `user` (deprovisioning, a revoked token); how many."""
        with self._lock:
            keys = [k for k, r in self._by_key.items() if r.user == user]
            for k in keys:
                del self._by_key[k]
        return len(keys)

    def _expired(self, record: ConsoleSession, now: float) -> bool:
        return now >= record.expires or now - record.last_seen >= self.idle_seconds

    def _drop_expired(self, now: float) -> None:
        for k in [k for k, r in self._by_key.items() if self._expired(r, now)]:
            del self._by_key[k]
