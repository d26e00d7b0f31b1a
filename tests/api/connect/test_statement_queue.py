"""connect.statement_queue_wait (issue 39 item 3): a statement over its user's
max_statements_per_user waits for one of that user's own statements to finish, up to the
wait, then is refused as busy; at most max_statements_per_user of a user wait, and another
user is never held back. StatementLimits alone, no Spark."""

from __future__ import annotations

import threading
import time

import pytest
from limits_testkit import admitted, limits_of, until

from api.connect.limits import StatementLimits, StatementRefused


def _limits(queue_wait: float) -> StatementLimits:
    return limits_of(2, queue_wait=queue_wait)


def _fill(limits: StatementLimits, user: str) -> list:
    return [limits.start((user, "s", f"op{i}")) for i in range(2)]


def test_without_a_queue_the_statement_over_the_limit_is_refused_at_once_as_busy() -> None:
    limits = _limits(0.0)
    _fill(limits, "erin")
    t0 = time.perf_counter()
    with pytest.raises(StatementRefused, match=r"^busy: user erin already runs 2 ") as e:
        limits.start(("erin", "s", "op2"))
    assert time.perf_counter() - t0 < 0.5
    assert "waited" not in str(e.value)


def test_queued_statement_runs_when_one_of_its_users_statements_finishes() -> None:
    limits = _limits(10.0)
    first, _ = _fill(limits, "erin")
    threading.Timer(0.3, limits.finish, args=(first,)).start()
    t0 = time.perf_counter()
    stmt = limits.start(("erin", "s", "op2"))
    assert 0.2 < time.perf_counter() - t0 < 5
    assert limits.count("erin") == 2 and stmt.key == ("erin", "s", "op2")


def test_queued_statement_is_refused_as_busy_when_the_wait_ends() -> None:
    limits = _limits(0.2)
    _fill(limits, "erin")
    with pytest.raises(StatementRefused, match=r"waited up to 0\.2 s, connect\.statement_queue"):
        limits.start(("erin", "s", "op2"))


def test_another_user_is_admitted_while_one_users_statements_wait() -> None:
    limits = _limits(5.0)
    _fill(limits, "erin")
    outcome: list[str] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(limits.start(("erin", "s", "op9")).key[2])
    )
    waiter.start()
    t0 = time.perf_counter()
    limits.start(("alice", "s", "op0"))
    assert time.perf_counter() - t0 < 0.5
    limits.finish(limits.get(("erin", "s", "op0")))  # type: ignore[arg-type]
    waiter.join(timeout=10)
    assert outcome == ["op9"]


def test_at_most_max_statements_per_user_wait_the_next_is_refused_at_once() -> None:
    limits = _limits(5.0)
    running = _fill(limits, "erin")
    waiters = [admitted(limits, "erin", f"w{i}") for i in range(2)]
    until(lambda: limits._waiting.get("erin", 0) == 2)
    t0 = time.perf_counter()
    with pytest.raises(StatementRefused, match=r"^busy: "):
        limits.start(("erin", "s", "extra"))
    assert time.perf_counter() - t0 < 0.5
    for stmt in running:
        limits.finish(stmt)
    for w, _ in waiters:
        w.join(timeout=10)
    assert sorted(op for _, out in waiters for op in out) == ["w0", "w1"]


def test_a_busy_refusal_carries_the_retry_delay_the_client_is_asked_to_wait() -> None:
    """connect.busy_retry_delay reaches the refusal (the gateway answers it as gRPC's
    RetryInfo); 0 asks for none."""
    for delay in (2.0, 0.0):
        limits = StatementLimits(per_user=1, timeout=60.0, row_limit=10, retry_after=delay)
        limits.start(("erin", "s", "op0"))
        with pytest.raises(StatementRefused) as e:
            limits.start(("erin", "s", "op1"))
        assert e.value.retry_after == delay


def test_the_retry_info_detail_asks_for_the_delay_in_milliseconds() -> None:
    from google.rpc import error_details_pb2

    from api.connect.outcomes import retry_info

    info = error_details_pb2.RetryInfo()
    assert retry_info(2.5).Unpack(info) and info.retry_delay.ToMilliseconds() == 2500


def _holding(
    queue_wait: float, retry_after: float, per_user: int = 1, total: int = 4
) -> StatementLimits:
    return limits_of(
        1,
        queue_wait=queue_wait,
        retry_after=retry_after,
        hold_per_user=per_user,
        hold_total=total,
    )


def _queued(limits: StatementLimits, user: str, op: str) -> tuple[threading.Thread, list]:
    """`admitted`, returned once the limits count it as waiting or held."""
    before = limits._waiting.get(user, 0) + limits._held.get(user, 0)
    t, out = admitted(limits, user, op)
    until(lambda: limits._waiting.get(user, 0) + limits._held.get(user, 0) > before)
    return t, out


@pytest.mark.parametrize(
    ("name", "queue_wait", "retry_after", "held"),
    [
        ("held the retry delay", 5.0, 0.4, 0.4),
        ("a hold is never longer than the queue wait", 0.3, 600.0, 0.3),
    ],
)
def test_a_statement_beyond_a_full_queue_is_held_before_its_busy_answer(
    name: str, queue_wait: float, retry_after: float, held: float
) -> None:
    """A client that resubmits at once without reading RetryInfo (Spark 3.5's, a script's
    loop) is slowed to the delay it is asked to wait (still asked to wait all of it)."""
    limits = _holding(queue_wait=queue_wait, retry_after=retry_after)
    limits.start(("erin", "s", "op0"))
    _queued(limits, "erin", "queued")
    t0 = time.perf_counter()
    with pytest.raises(StatementRefused, match=rf"held {held:g} s, connect\.busy_retry_de") as e:
        limits.start(("erin", "s", "held"))
    assert held - 0.05 < time.perf_counter() - t0 < 3, name
    assert e.value.retry_after == retry_after, name
    assert limits._held == {}, name


def test_a_held_statement_runs_if_a_slot_frees_while_it_is_held() -> None:
    limits = _holding(queue_wait=5.0, retry_after=5.0)
    first = limits.start(("erin", "s", "op0"))
    queued, queued_out = _queued(limits, "erin", "queued")
    held, held_out = _queued(limits, "erin", "held")
    limits.finish(first)  # one of the two takes the slot (either may)
    until(lambda: bool(queued_out or held_out))
    first_in = (queued_out or held_out)[0]
    limits.finish(limits.get(("erin", "s", first_in)))  # type: ignore[arg-type]
    queued.join(timeout=5)
    held.join(timeout=5)
    assert queued_out == ["queued"] and held_out == ["held"]
    assert limits._held == {}


def test_held_statements_are_bounded_per_user_and_in_all_beyond_them_refused_at_once() -> None:
    limits = _holding(queue_wait=5.0, retry_after=5.0, per_user=1, total=2)
    for user in ("erin", "bob", "carol"):
        limits.start((user, "s", "op0"))
        _queued(limits, user, "queued")
    _queued(limits, "erin", "held")
    t0 = time.perf_counter()
    with pytest.raises(StatementRefused, match=r"\(1 already queued, connect\.statement_queue"):
        limits.start(("erin", "s", "over-her-bound"))
    assert time.perf_counter() - t0 < 0.5
    _queued(limits, "bob", "held")  # another user's is held: 2 in all
    t0 = time.perf_counter()
    with pytest.raises(StatementRefused, match=r"already queued, connect\.statement_queue_wait"):
        limits.start(("carol", "s", "over-the-total"))
    assert time.perf_counter() - t0 < 0.5


@pytest.mark.parametrize(
    ("name", "queue_wait", "retry_after"),
    [("no queue: refused at once", 0.0, 2.0), ("no retry delay: nothing to hold", 5.0, 0.0)],
)
def test_nothing_is_held_without_a_queue_or_a_retry_delay(
    name: str, queue_wait: float, retry_after: float
) -> None:
    limits = _holding(queue_wait=queue_wait, retry_after=retry_after)
    limits.start(("erin", "s", "op0"))
    if queue_wait:
        _queued(limits, "erin", "queued")
    t0 = time.perf_counter()
    with pytest.raises(StatementRefused, match=r"^busy: ") as e:
        limits.start(("erin", "s", "extra"))
    assert time.perf_counter() - t0 < 0.5, name
    assert "held" not in str(e.value), name
