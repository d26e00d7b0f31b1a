"""Helpers for the Spark Connect gateway tests: tokens, a throwaway CA, audit lines."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

PERSONAS = ("alice", "bob", "carol", "dana", "erin", "frank", "mallory", "mira", "wes", "agnes")


def token_of(user: str) -> str:
    return f"ctok-{user}-{hashlib.sha256(user.encode()).hexdigest()[:16]}"


# Every stock Connect session a test makes stays referenced until the run ends. The stock
# client's SparkSession.__del__ closes its client, which takes the reattach iterator's class
# lock; a session the cyclic GC collects inside a thread that another thread is starting
# while it holds that lock (creating the release pool after a stop) deadlocks both threads,
# and every later query of the process waits on the lock (pyspark 3.5's client, a known
# upstream bug: SPARK-52076, SPARK-55406 reworked that pool in 4.x; seen here as the
# "gateway stops answering" hang of test_connect_limits.py, which py-spy showed to be the
# client's). Kept sessions are collected only at interpreter exit, by one thread.
_KEPT: list[Any] = []


def kept(session: Any) -> Any:
    """The session, referenced until the test run ends (see _KEPT)."""
    _KEPT.append(session)
    return session


def close_clients() -> None:
    """Close every stock Connect client of this process that is still open (no RPC: the
    channel only). A client left open runs its exit hook at interpreter exit, which sends
    an ML cache clean-up to a gateway that has stopped by then and retries for minutes
    (pyspark 4's `SparkConnectClient._on_exit`): the test run would hang before exiting.
    A session whose `stop()` failed (a test that stopped its gateway, say) is one such."""
    import gc

    from pyspark.sql.connect.client.core import SparkConnectClient

    for obj in gc.get_objects():
        if isinstance(obj, SparkConnectClient) and not obj.is_closed:
            with contextlib.suppress(Exception):
                obj.close()


def make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """The CA and server certificate `lakegate certs` makes, for 127.0.0.1/localhost:
    (ca.pem, server.pem, server.key); every gateway test's stock client trusts that CA."""
    from cli.certs import make_certificates

    made = make_certificates(directory / "tls", ["localhost", "127.0.0.1"], days=1)
    return made["ca"], made["cert"], made["key"]


def rows(df: Any) -> list[tuple]:
    """A DataFrame's rows as sorted tuples (order-free comparison with `s.sql`)."""
    return sorted((tuple(r) for r in df.collect()), key=repr)


def audit_lines(directory: Path) -> list[dict[str, str]]:
    """Every audit line as key -> raw value."""
    out = []
    for f in sorted(directory.glob("*.log*")):
        for line in f.read_text().splitlines():
            body = line.split(": ", 1)[1] if ": " in line else line
            out.append(dict(kv.split("=", 1) for kv in body.split("\t") if "=" in kv))
    return out


def jobs_in_group(spark: Any, group: str) -> list[int]:
    """The Spark jobs started so far under a job group (the listener bus drained first, so
    every job already submitted is counted)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def active_jobs(spark: Any) -> list[int]:
    """The Spark jobs running now, after the listener bus has caught up."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return list(spark.sparkContext._jsc.statusTracker().getActiveJobIds())


def swap_governed_views(spark: Any, retype: Callable[[Any], Any]) -> list[str]:
    """Replace every pinned source and governed view (global temp views `__lg_*`) by an
    empty one of the schema `retype` makes of its own: a concurrent re-pin between a
    statement's check and its run. The names replaced."""
    swapped = []
    for t in spark.catalog.listTables("global_temp"):
        if t.name.startswith("__lg_"):
            schema = retype(spark.table(f"global_temp.{t.name}").schema)
            spark.createDataFrame([], schema).createOrReplaceGlobalTempView(t.name)
            swapped.append(t.name)
    return swapped


def hand_made_cached_relations() -> tuple[Any, Any]:
    """A CachedRemoteRelation a client made up, as the plan and inside one (under a limit):
    what the gateway must refuse wherever it appears, whatever key it names."""
    import uuid

    from pyspark.sql.connect.proto import relations_pb2

    cached = relations_pb2.Relation(
        cached_remote_relation=relations_pb2.CachedRemoteRelation(
            relation_id=f"lakegate-{uuid.uuid4().hex}"
        )
    )
    inside = relations_pb2.Relation()
    inside.limit.input.CopyFrom(cached)
    inside.limit.limit = 1
    return cached, inside
