"""Fairness between users (issue 39 item 3): each user's statements run in a scheduler pool
of their own, named by a hash of the verified user (a user name, hostile text, never names
a pool), so under Spark's FAIR scheduler (the suite's Spark runs it; a deployment opts in)
one user's heavy jobs share one pool's slots and another user's short job is not queued
behind their tasks (api/connect/ConnectBackend.java `pool`). A client cannot move its
statements to another pool. Lakegate's own default is Spark's FIFO (docs/connect.md,
"Scheduling between users": FAIR's ties go by pool name, a fixed priority on few slots)."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest


def test_lakegate_leaves_spark_first_come_first_served_by_default() -> None:
    """Measured: FAIR pools on fewer slots than busy users starve the pools named last."""
    from governance.runtime.spark import DEFAULT_CONF, GOVERNED_CONF

    assert "spark.scheduler.mode" not in DEFAULT_CONF
    assert "spark.scheduler.mode" not in GOVERNED_CONF  # a deployment may choose FAIR


def pool_of(user: str) -> str:
    return "lakegate-" + hashlib.sha256(user.encode()).hexdigest()[:16]


def test_each_users_jobs_run_in_a_pool_named_by_a_hash_of_the_user(remote, spark) -> None:
    """Seen while the user's statement runs: its tasks are in its own pool (whatever other
    tests ran before, a pool once made stays, so its running tasks are the evidence)."""
    sc = spark.sparkContext._jsc.sc()
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"
    users = ("carol", "dana")
    for user in users:
        slow = remote(user).range(0, 3_000_000_000, 1, 2).selectExpr("sum(id % 7) AS n")
        done = threading.Event()
        run = lambda s=slow, d=done: (s.collect(), d.set())  # noqa: E731
        threading.Thread(target=run, daemon=True).start()
        seen = False
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline and not seen:
            pool = sc.getPoolForName(pool_of(user))
            seen = pool.isDefined() and pool.get().runningTasks() > 0
            time.sleep(0.02)
        assert seen, f"no task of {user}'s statement ran in its pool"
        assert done.wait(300)
        assert sc.getPoolForName(user).isEmpty()  # never the name itself
    assert len({pool_of(u) for u in users}) == len(users)


def test_a_client_cannot_choose_its_pool(remote) -> None:
    s = remote("carol")
    with pytest.raises(Exception, match=r"spark\.scheduler\.pool"):
        s.conf.set("spark.scheduler.pool", "lakegate-0000000000000000")
    with pytest.raises(Exception, match=r"(?i)refused|not governed|not allowed|denied"):
        s.sql("SET spark.scheduler.pool=default").collect()
