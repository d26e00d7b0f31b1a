"""connect.fair_share_slots (issue 39 item 3, fairness): while more than one user is active,
a user runs at most max(1, min(max_statements_per_user, fair_share_slots // active users))
statements, so another user's statement finds a core free (Spark's pools never preempt a
running task). One test per rule; StatementLimits alone with real threads, no Spark."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from limits_testkit import admitted, limits_of, until

from api.connect.limits import Statement, StatementLimits, StatementRefused


def _limits(*, slots: int, queue_wait: float = 0.0, window: float = 5.0) -> StatementLimits:
    return limits_of(4, queue_wait=queue_wait, fair_share_slots=slots, fair_share_window=window)


def _run(limits: StatementLimits, user: str, n: int, tag: str = "op") -> list[Statement]:
    return [limits.start((user, "s", f"{tag}{i}")) for i in range(n)]


def test_a_lone_user_gets_the_full_per_user_limit() -> None:
    limits = _limits(slots=2)
    _run(limits, "erin", 4)
    assert limits.count("erin") == 4
    with pytest.raises(StatementRefused, match=r"connect\.max_statements_per_user allows"):
        limits.start(("erin", "s", "op4"))


def test_with_two_active_users_each_gets_fair_share_slots_halved() -> None:
    limits = _limits(slots=4)
    _run(limits, "alice", 1)
    _run(limits, "erin", 2)
    with pytest.raises(StatementRefused, match=r"^busy: user erin already runs 2 "):
        limits.start(("erin", "s", "op2"))
    _run(limits, "alice", 1, tag="more")
    with pytest.raises(StatementRefused, match=r"^busy: user alice already runs 2 "):
        limits.start(("alice", "s", "over"))


def test_the_fair_share_is_at_least_one_statement() -> None:
    limits = _limits(slots=1)
    _run(limits, "alice", 1)
    _run(limits, "erin", 1)  # 1 // 2 is 0: still one each
    with pytest.raises(StatementRefused, match=r"^busy: user erin already runs 1 "):
        limits.start(("erin", "s", "op1"))


def test_a_user_over_their_share_keeps_running_and_the_next_is_admitted_when_one_ends() -> None:
    limits = _limits(slots=2, queue_wait=10.0)
    running = _run(limits, "erin", 4)  # alone: the full limit
    _run(limits, "alice", 1)  # now two users: erin's share is 1, her 4 keep running
    assert limits.count("erin") == 4 and all(not s.done for s in running)
    t, out = admitted(limits, "erin", "next")
    until(lambda: limits._waiting.get("erin", 0) == 1)
    for s in running[:3]:  # still 1 running: at her share, the waiter stays queued
        limits.finish(s)
    time.sleep(0.2)
    assert out == [] and limits.count("erin") == 1
    t0 = time.perf_counter()
    limits.finish(running[3])
    t.join(9)
    # woken by the end, not by the 10 s queue wait running out (a loaded machine's margin)
    assert out == ["next"] and time.perf_counter() - t0 < 9


def test_a_user_whose_last_statement_ended_longer_than_the_window_ago_no_longer_counts() -> None:
    limits = _limits(slots=2, window=2.0)  # wide: a loaded machine between two calls
    (lookup,) = _run(limits, "alice", 1)
    limits.finish(lookup)
    _run(limits, "erin", 1)
    with pytest.raises(StatementRefused, match=r"while 2 users are active"):
        limits.start(("erin", "s", "op1"))  # alice ended just now: still active
    time.sleep(2.1)
    _run(limits, "erin", 3, tag="later")  # alice's window ended: erin alone, full limit
    assert limits.count("erin") == 4


def test_a_waiter_is_woken_when_the_other_user_goes_inactive() -> None:
    limits = _limits(slots=2, queue_wait=20.0, window=0.5)
    (lookup,) = _run(limits, "alice", 1)
    _run(limits, "erin", 1)
    t, out = admitted(limits, "erin", "waits")
    until(lambda: limits._waiting.get("erin", 0) == 1)
    t0 = time.perf_counter()
    limits.finish(lookup)  # alice's window starts: erin's share grows when it ends
    t.join(18)
    waited = time.perf_counter() - t0
    assert out == ["waits"], out
    assert 0.4 < waited < 15, waited  # her window's end, not the 20 s queue wait


def test_the_busy_message_names_connect_fair_share_slots() -> None:
    limits = _limits(slots=2, queue_wait=0.2)
    _run(limits, "alice", 1)
    _run(limits, "erin", 1)
    with pytest.raises(StatementRefused) as e:
        limits.start(("erin", "s", "op1"))
    assert str(e.value) == (
        "busy: user erin already runs 1 Spark Connect statements, their fair share of "
        "connect.fair_share_slots (2) while 2 users are active (waited up to 0.2 s, "
        "connect.statement_queue_wait); retry later, wait for one to finish or interrupt it"
    )


def test_off_behaves_exactly_as_before() -> None:
    limits = _limits(slots=0)
    _run(limits, "alice", 1)
    _run(limits, "erin", 4)  # another user active: erin still gets max_statements_per_user
    with pytest.raises(StatementRefused) as e:
        limits.start(("erin", "s", "op4"))
    assert str(e.value) == (
        "busy: user erin already runs 4 Spark Connect statements, the most "
        "connect.max_statements_per_user allows; retry later, wait for one to finish or "
        "interrupt it"
    )
    assert limits._ended == {}


def test_fair_share_settings_are_read_from_lakegate_yaml(tmp_path: Path) -> None:
    from governance.config import Config
    from governance.errors import ConfigError

    path = tmp_path / "lakegate.yaml"
    path.write_text("connect:\n  fair_share_slots: 2\n  fair_share_window: 2.5\n")
    c = Config.load(path).connect
    assert (c.fair_share_slots, c.fair_share_window) == (2, 2.5)
    path.write_text("connect:\n  max_statements_per_user: 3\n")
    assert Config.load(path).connect.fair_share_slots is None  # on unless set: auto
    for text, want in (("auto", None), ("0", 0)):
        path.write_text(f"connect:\n  fair_share_slots: {text}\n")
        assert Config.load(path).connect.fair_share_slots == want
    for bad in ("-1", "many"):
        path.write_text(f"connect:\n  fair_share_slots: {bad}\n")
        with pytest.raises(ConfigError, match=r"^\S+: 'connect\.fair_share_slots' must be auto, 0"):
            Config.load(path)
