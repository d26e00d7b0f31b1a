"""Fairness between users (issue 39 item 3): the gateway's Spark schedules FAIR, and each
user's statements run in a scheduler pool of their own, named by a hash of the verified
user (a user name, hostile text, never names a pool), so one user's heavy jobs share one
pool's slots and another user's short job is not queued behind their tasks
(api/connect/ConnectBackend.java `pool`). A client cannot move its statements to another
pool."""

from __future__ import annotations

import hashlib

import pytest


def pool_of(user: str) -> str:
    return "lakegate-" + hashlib.sha256(user.encode()).hexdigest()[:16]


def test_each_users_jobs_run_in_a_pool_named_by_a_hash_of_the_user(remote, spark) -> None:
    sc = spark.sparkContext._jsc.sc()
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"
    users = ("carol", "dana")
    for user in users:
        assert sc.getPoolForName(pool_of(user)).isEmpty()  # made by a job's first task set
        rows = remote(user).sql("SELECT count(*) AS n FROM main.sales.orders").collect()
        assert rows[0].n > 0
        assert sc.getPoolForName(pool_of(user)).isDefined(), user
        assert sc.getPoolForName(user).isEmpty()  # never the name itself
    assert len({pool_of(u) for u in users}) == len(users)


def test_a_client_cannot_choose_its_pool(remote) -> None:
    s = remote("carol")
    with pytest.raises(Exception, match=r"spark\.scheduler\.pool"):
        s.conf.set("spark.scheduler.pool", "lakegate-0000000000000000")
    with pytest.raises(Exception, match=r"(?i)refused|not governed|not allowed|denied"):
        s.sql("SET spark.scheduler.pool=default").collect()
