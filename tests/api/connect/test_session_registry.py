"""The gateway's session registry without Spark: a session dropped by another call (idle
expiry, quota, close) is admitted again only after its release in the backend has ended,
so a late release never drops what the new call keeps there."""

from __future__ import annotations

import threading

import pytest

from api.connect import sessions
from api.connect.sessions import SessionRefused, SessionRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _registry(events: list[str], gate: threading.Event) -> tuple[SessionRegistry, Clock]:
    clock = Clock()

    def release(user: str, session_id: str) -> None:
        events.append(f"release started {user}/{session_id}")
        assert gate.wait(60)  # a bound against a hang, not a timing
        events.append(f"release ended {user}/{session_id}")

    reg = SessionRegistry(per_user=4, total=10, idle_timeout=20, release=release, clock=clock)
    return reg, clock


def _closing(reg: SessionRegistry, events: list[str], user: str, sid: str) -> threading.Thread:
    """A thread closing the session, returned once its backend release has started."""
    closer = threading.Thread(target=reg.close, args=(user, sid), daemon=True)
    closer.start()
    while f"release started {user}/{sid}" not in events:
        closer.join(0.01)
    return closer


def _alice_s1_being_released() -> tuple[SessionRegistry, threading.Event, threading.Thread]:
    """A registry whose session alice/s1 is closed and held in its backend release until
    the gate is set: the registry, the gate and the closing thread."""
    events: list[str] = []
    gate = threading.Event()
    reg, _ = _registry(events, gate)
    reg.admit("alice", "s1")
    return reg, gate, _closing(reg, events, "alice", "s1")


def test_a_session_expired_by_another_call_is_admitted_again_only_after_its_release() -> None:
    events: list[str] = []
    gate = threading.Event()
    reg, clock = _registry(events, gate)
    reg.admit("alice", "s1")
    clock.now += 21  # alice's session is idle past the timeout
    expirer = threading.Thread(target=reg.admit, args=("bob", "s2"), daemon=True)
    expirer.start()  # bob's admission expires alice's and releases it (held at the gate)
    while "release started alice/s1" not in events:
        expirer.join(0.01)

    def again() -> None:
        reg.admit("alice", "s1")
        events.append("admitted alice/s1")

    back = threading.Thread(target=again, daemon=True)
    back.start()
    back.join(0.3)
    assert back.is_alive() and "admitted alice/s1" not in events  # waits for the release
    gate.set()
    back.join(60)
    expirer.join(60)
    assert events == [
        "release started alice/s1",
        "release ended alice/s1",
        "admitted alice/s1",
    ]
    assert reg.held("alice", "s1") and reg.held("bob", "s2")


def test_a_session_whose_release_does_not_end_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sessions, "RELEASE_WAIT", 0.2)
    reg, gate, closer = _alice_s1_being_released()
    try:
        with pytest.raises(SessionRefused, match=r"still being released in the backend; retry"):
            reg.admit("alice", "s1")
    finally:
        gate.set()
        closer.join(60)
    reg.admit("alice", "s1")  # released now: admitted again
    assert reg.held("alice", "s1")


def test_other_sessions_are_admitted_while_one_is_being_released() -> None:
    reg, gate, closer = _alice_s1_being_released()
    try:
        reg.admit("alice", "s3")
        reg.admit("bob", "s1")
        assert reg.held("alice", "s3") and reg.held("bob", "s1")
    finally:
        gate.set()
        closer.join(60)
