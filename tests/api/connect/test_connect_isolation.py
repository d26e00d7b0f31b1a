"""One user cannot act on another's resources (issue 24, item 5): Spark's cache is one for
every backend user, so persist/unpersist/storageLevel are refused; sessions have per-user
and gateway-wide quotas (a user over theirs closes their own oldest idle session, nobody
else's); an idle session expires and its backend SessionHolder is released."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from connect_testkit import audit_lines

CACHE_REFUSED = "persist/cache, unpersist and storageLevel are refused through the gateway"


@pytest.mark.parametrize(
    "action",
    [
        lambda df: df.cache(),
        lambda df: df.persist(),
        lambda df: df.unpersist(),
        lambda df: df.storageLevel,
        lambda df: df.is_cached,
    ],
    ids=["cache", "persist", "unpersist", "storageLevel", "is_cached"],
)
def test_cache_calls_are_refused_since_the_cache_is_shared_by_every_user(
    remote, audit_dir, action
) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    df = remote("erin").table("main.sales.orders")
    with pytest.raises(SparkConnectGrpcException, match=CACHE_REFUSED) as e:
        action(df)
    assert "\n" not in str(e.value).strip()
    last = [ln for ln in audit_lines(audit_dir) if ln.get("cmd") == "analyzePlan"][-1]
    assert last["allowed"] == "false" and CACHE_REFUSED in last["reason"]
    assert last["ugi"].startswith("erin ")


def test_a_user_over_the_session_quota_closes_only_their_own_oldest_idle_session(
    limited_gateway,
) -> None:
    gw, connect = limited_gateway(max_sessions_per_user=2)
    carol = connect("carol")
    carol.range(3).createOrReplaceTempView("mine")
    erin = [connect("erin") for _ in range(3)]
    assert [s.range(2).count() for s in erin] == [2, 2, 2]
    oldest = erin[0].client._session_id
    assert not gw.service.sessions.held("erin", oldest)
    assert not gw.backend.holds("erin", oldest)  # released in the backend too
    assert gw.service.sessions.count("erin") == 2
    assert carol.table("mine").count() == 3  # carol's session and view are untouched
    assert gw.backend.holds("carol", carol.client._session_id)


def test_a_user_whose_sessions_all_run_statements_is_refused_a_new_one(
    limited_gateway, audit_dir
) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    gw, connect = limited_gateway(max_sessions_per_user=2)
    erin = [connect("erin") for _ in range(3)]
    registry = gw.service.sessions
    busy = []
    for s in erin[:2]:
        assert s.range(1).count() == 1
        busy.append(registry.find("erin", s.client._session_id))
        registry.started(busy[-1])  # as while a statement of the session runs
    with pytest.raises(SparkConnectGrpcException, match=r"connect\.max_sessions_per_user") as e:
        erin[2].range(2).count()
    assert str(e.value).startswith("user erin has 2 open Spark Connect sessions, each running")
    for entry in busy:
        registry.finished(entry)
    assert erin[2].range(2).count() == 2
    refusal = [ln for ln in audit_lines(audit_dir) if "sessions_per_user" in ln.get("reason", "")]
    assert refusal and refusal[-1]["allowed"] == "false" and refusal[-1]["ugi"].startswith("erin ")


def test_the_gateway_wide_session_cap_refuses_a_new_session_without_evicting_one(
    limited_gateway,
) -> None:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    gw, connect = limited_gateway(max_sessions=2)
    carol, erin, dana = connect("carol"), connect("erin"), connect("dana")
    carol.range(1).createOrReplaceTempView("kept")
    assert erin.range(1).count() == 1
    with pytest.raises(SparkConnectGrpcException, match=r"connect\.max_sessions allows"):
        dana.range(1).count()
    assert carol.table("kept").count() == 1
    assert gw.backend.holds("carol", carol.client._session_id)


def _expired_a_minute_later(registry: Any) -> list[tuple[str, str]]:
    """What expires once a minute passes with nothing running. The gateway ends a stream
    (and the client releases its operation) after the client has its rows, so either may
    still touch the session: each try moves the clock another minute past the last touch."""
    gone: list[tuple[str, str]] = []
    deadline = time.monotonic() + 30
    for minutes in range(2, 1000):
        registry.clock = lambda m=minutes: time.monotonic() + 61.0 * m
        gone = registry.expire_idle()
        if gone or time.monotonic() > deadline:
            return gone
        time.sleep(0.1)
    return gone


def test_an_idle_session_expires_and_its_backend_session_is_released(limited_gateway) -> None:
    gw, connect = limited_gateway(max_sessions_per_user=1, session_idle_timeout=60.0)
    erin = connect("erin")
    assert erin.range(4).count() == 4
    sid = erin.client._session_id
    assert gw.backend.holds("erin", sid) and gw.service.sessions.held("erin", sid)
    registry = gw.service.sessions
    assert _expired_a_minute_later(registry) == [("erin", sid)]
    # Spark's SessionHolder is gone too, and stays gone: the client's asynchronous release of
    # its last operation may reach the backend after the expiry (3.5 makes a session for it);
    # the gateway drops that one again once the forwarded call returns
    deadline = time.monotonic() + 30
    while gw.backend.holds("erin", sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not gw.backend.holds("erin", sid)
    assert not registry.held("erin", sid)
    registry.clock = time.monotonic
    assert connect("erin").range(2).count() == 2  # the quota's slot is free again


def test_a_session_with_a_running_statement_is_not_expired(limited_gateway) -> None:
    gw, connect = limited_gateway(session_idle_timeout=60.0)
    erin = connect("erin")
    erin.range(1).count()
    registry = gw.service.sessions
    entry = registry.admit("erin", erin.client._session_id)
    registry.started(entry)
    registry.clock = lambda: time.monotonic() + 61.0
    assert registry.expire_idle() == []
    registry.finished(entry)
    assert _expired_a_minute_later(registry) == [("erin", erin.client._session_id)]


def _guava_segment(jvm: Any, user: str, session_id: str) -> int:
    """Which of the four segments of Spark 3.5's session cache (user, session_id) hashes to:
    Guava's rehash of the scala.Tuple2 key's hashCode, top two bits."""
    h = int(jvm.scala.Tuple2(user, session_id).hashCode()) & 0xFFFFFFFF
    for step in (
        lambda h: h + (((h << 15) & 0xFFFFFFFF) ^ 0xFFFFCD7D),
        lambda h: h ^ (h >> 10),
        lambda h: h + (h << 3),
        lambda h: h ^ (h >> 6),
        lambda h: h + (h << 2) + (h << 14),
        lambda h: h ^ (h >> 16),
    ):
        h = step(h) & 0xFFFFFFFF
    return h >> 30


def test_the_backend_keeps_every_session_the_gateway_admits(gateway) -> None:
    """Spark 3.5's cache of 100 sessions is four segments that each evict past 25: 30 open
    sessions in one segment lost live ones (temp views, running operations) while the
    gateway admits up to 96. The backend's cache is made one segment (LineSessions35)."""
    backend = gateway.backend
    jvm = backend.spark.sparkContext._jvm
    keys: list[tuple[str, str]] = []
    while len(keys) < 30:
        key = (f"segment-user-{len(keys) % 3}", str(uuid.uuid4()))
        if _guava_segment(jvm, *key) == 0:
            keys.append(key)
    try:
        for key in keys:
            backend.secure(*key)
        assert [k for k in keys if not backend.holds(*k)] == []
    finally:
        for key in keys:
            backend.release(*key)


def test_a_stopped_session_is_closed_at_once_and_frees_its_place(
    limited_gateway, audit_dir
) -> None:
    """Spark 4's `spark.stop()` sends ReleaseSession: the session leaves the gateway's count
    and the backend at once (not at its idle expiry), on record as the caller's; the place it
    held under connect.max_sessions_per_user is free for the next."""
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.skip("Spark 3.5 clients never release a session (expiry frees it)")
    gw, connect = limited_gateway(max_sessions_per_user=1, session_idle_timeout=3600.0)
    registry = gw.service.sessions
    erin = connect("erin")
    assert erin.range(3).count() == 3
    sid = erin.client._session_id
    assert registry.held("erin", sid)
    erin.stop()
    assert not registry.held("erin", sid)
    deadline = time.monotonic() + 30
    while gw.backend.holds("erin", sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not gw.backend.holds("erin", sid)
    line = [ln for ln in audit_lines(audit_dir) if ln.get("cmd") == "releaseSession"][-1]
    assert line["ugi"].startswith("erin ") and line["allowed"] == "true"
    again = connect("erin")
    assert again.range(2).count() == 2 and registry.count("erin") == 1


def test_a_release_names_only_the_callers_own_session(limited_gateway) -> None:
    """The session key is (verified user, session id): a ReleaseSession for another user's
    session id closes nothing of theirs."""
    from pyspark.sql.connect.proto import base_pb2

    if not hasattr(base_pb2, "ReleaseSessionRequest"):
        pytest.skip("Spark 3.5's protocol has no ReleaseSession")
    gw, connect = limited_gateway(session_idle_timeout=3600.0)
    erin, bob = connect("erin"), connect("bob")
    assert erin.range(1).count() == 1 and bob.range(1).count() == 1
    victim = erin.client._session_id
    req = base_pb2.ReleaseSessionRequest(session_id=victim)
    bob.client._stub.ReleaseSession(req, metadata=bob.client._builder.metadata())
    assert gw.service.sessions.held("erin", victim)
    assert erin.range(2).count() == 2


def test_a_statement_running_when_its_session_is_released_has_one_closing_line(
    limited_gateway, audit_dir
) -> None:
    """A client that stops its session while a statement still runs abandons it: the
    statement's call keeps exactly one line per phase (the closing one `phase=abandoned`),
    never a second failure line for the same request."""
    import contextlib
    import threading

    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.skip("Spark 3.5 clients never release a session")
    gw, connect = limited_gateway(session_idle_timeout=3600.0)
    erin = connect("erin")
    sid = erin.client._session_id
    slow = erin.range(0, 4_000_000_000, 1, 2).selectExpr("sum(id * id % 7)")
    done = threading.Event()

    def run() -> None:
        with contextlib.suppress(Exception):  # the session went away under it: expected
            slow.collect()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not gw.service.limits.matching("erin", sid, "all", "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.service.limits.matching("erin", sid, "all", ""), "the statement never started"
    erin.stop()
    assert done.wait(120)
    time.sleep(1)
    mine = [ln for ln in audit_lines(audit_dir) if ln.get("callerContext") == f"connect:{sid}"]
    calls = [(ln["cmd"], ln["stmtHash"], ln.get("phase")) for ln in mine]
    assert len(calls) == len(set(calls)), calls
    closing = [ln for ln in mine if ln.get("phase") == "abandoned"]
    assert closing and "released its session" in closing[-1]["reason"], mine
