"""The console's session store and sign-in limit on their own (api/console_sessions.py,
limits.py), with a clock the test moves: idle and absolute timeouts, a sign-in's own expiry,
a bounded table, ending a user's sessions, and failures limited per address and identity."""

from __future__ import annotations

from dataclasses import dataclass

from api.console.limits import SignInLimiter
from api.console_sessions import ConsoleSessions


@dataclass
class Who:
    user: str


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_after_its_idle_time_without_a_request() -> None:
    clock = Clock()
    store = ConsoleSessions(idle_seconds=60, absolute_seconds=3600, clock=clock)
    sid = store.open(Who("alice"), "tok-a")
    clock.now += 59
    record = store.get(sid)
    assert record is not None and (record.user, record.bearer) == ("alice", "tok-a")
    clock.now += 59  # 59 s after the last use: still alive
    assert store.get(sid) is not None
    clock.now += 60
    assert store.get(sid) is None
    assert len(store) == 0  # an expired session is forgotten


def test_a_session_ends_at_its_absolute_time_however_busy() -> None:
    clock = Clock()
    store = ConsoleSessions(idle_seconds=60, absolute_seconds=300, clock=clock)
    sid = store.open(Who("alice"), "tok-a")
    for _ in range(9):
        clock.now += 30
        assert store.get(sid) is not None
    clock.now += 30  # 300 s after sign-in
    assert store.get(sid) is None


def test_a_session_ends_when_its_sign_in_expires() -> None:
    clock = Clock()
    store = ConsoleSessions(idle_seconds=600, absolute_seconds=3600, clock=clock)
    sid = store.open(Who("alice"), "tok-a", expires_at=clock.now + 100)
    clock.now += 99
    assert store.get(sid) is not None
    clock.now += 1
    assert store.get(sid) is None


def test_closing_a_session_and_ending_a_user_forget_them() -> None:
    store = ConsoleSessions()
    mine = [store.open(Who("bob"), "tok-b") for _ in range(3)]
    other = store.open(Who("dana"), "tok-d")
    assert store.close(mine[0]) is not None
    assert store.close(mine[0]) is None
    assert store.end_user("bob") == 2
    assert [store.get(s) for s in mine] == [None, None, None]
    assert store.get(other) is not None


def test_session_ids_are_random_and_not_kept_in_the_clear() -> None:
    store = ConsoleSessions()
    ids = {store.open(Who("alice"), "tok-a") for _ in range(50)}
    assert len(ids) == 50 and all(len(i) >= 43 for i in ids)
    assert not ids & set(store._by_key)  # looked up by SHA-256
    assert store.get("") is None and store.get("forged") is None


def test_a_full_table_drops_expired_sessions_then_the_least_recently_used() -> None:
    clock = Clock()
    store = ConsoleSessions(max_sessions=3, idle_seconds=60, clock=clock)
    old = store.open(Who("a"), "t")
    clock.now += 30
    used, idle = store.open(Who("b"), "t"), store.open(Who("c"), "t")
    clock.now += 31  # `old` is past its idle time
    store.get(used)
    new = store.open(Who("d"), "t")
    assert store.get(old) is None and store.get(new) is not None and len(store) == 3
    newest = store.open(Who("e"), "t")  # full, nothing expired: the least recently used goes
    assert store.get(idle) is None
    assert store.get(used) is not None and store.get(newest) is not None
    assert len(store) == 3


def test_failed_sign_ins_are_limited_per_address_for_a_window() -> None:
    clock = Clock()
    limiter = SignInLimiter(max_failures=5, window_seconds=60, clock=clock)
    for _ in range(5):
        assert limiter.retry_after("10.0.0.1", None) == 0
        limiter.failed("10.0.0.1", None)
        clock.now += 1
    assert limiter.retry_after("10.0.0.1", None) == 55  # the first failure leaves at 60 s
    assert limiter.retry_after("10.0.0.2", None) == 0  # another address is not limited
    clock.now += 55
    assert limiter.retry_after("10.0.0.1", None) == 0


def test_failed_sign_ins_are_limited_per_identity_from_any_address() -> None:
    clock = Clock()
    limiter = SignInLimiter(max_failures=5, window_seconds=60, clock=clock)
    for i in range(5):
        limiter.failed(f"10.0.0.{i}", "user:alice")
    assert limiter.retry_after("10.9.9.9", "user:alice") == 60
    assert limiter.retry_after("10.9.9.9", "user:bob") == 0


def test_the_limiter_remembers_a_bounded_number_of_keys() -> None:
    limiter = SignInLimiter(max_failures=2, window_seconds=60, max_keys=100)
    for i in range(10_000):
        limiter.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", f"user:u{i}")
    assert len(limiter._ips.times) == 100 and len(limiter._ids.times) == 100
    assert all(len(t) <= 2 for t in limiter._ips.times.values())
