"""A query runs as the very Dataset the verifier accepted (issue 31 item 4): the gateway keeps
the verified Dataset in the backend session under an unguessable key and forwards a
CachedRemoteRelation of that key, so Spark analyses nothing again and runs what was
checked. Only the gateway may name such a relation, and the entry lives only while its
execution does."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest
from connect_testkit import hand_made_cached_relations, rows, swap_governed_views, token_of

from api.connect.backend import Backend

ORDERS = "SELECT id, region, amount FROM main.sales.orders"
REFUSED = "server-side cached DataFrames are refused through the Lakegate gateway"


def _raw_execute(gateway: Any, ca: Any, user: str, rel: Any) -> grpc.RpcError:
    """A hand-made ExecutePlan of `rel` (no stock client API sends one of these) as `user`."""
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    req = base_pb2.ExecutePlanRequest(session_id=str(uuid.uuid4()))
    req.user_context.user_id = user
    req.plan.root.CopyFrom(rel)
    with grpc.secure_channel(f"127.0.0.1:{gateway.port}", creds) as ch:
        stub = base_pb2_grpc.SparkConnectServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.ExecutePlan(req, metadata=[("authorization", f"Bearer {token_of(user)}")]))
    return e.value


def test_client_cannot_send_cached_remote_relation(gateway, connect_lakegate, keys) -> None:
    """Neither as the plan nor inside one, and whatever key it names: a client never reaches
    a Dataset the gateway kept (nor one Spark's own caching would have made)."""
    cached, inside = hand_made_cached_relations()
    for rel in (cached, inside):
        e = _raw_execute(gateway, connect_lakegate.ca, "erin", rel)
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED
        assert e.details() == REFUSED
    assert keys == []  # refused before anything was analysed or kept


def test_verified_plan_is_the_plan_executed(
    remote, embedded, gateway, connect_lakegate, monkeypatch
) -> None:
    """Between the verifier's analysis and the execution, every pinned source and governed
    view the governed SQL names is replaced by an empty one (a concurrent re-pin, as a
    schema change makes): the backend still runs the plan that was verified, so the answer
    is the governed rows, not what a second analysis of the SQL would now read."""
    spark = connect_lakegate.spark
    real = Backend.keep
    swapped: list[str] = []

    def keep_then_swap(self: Backend, relation: bytes, user: str, sid: str, key: str) -> Any:
        plan = real(self, relation, user, sid, key)
        swapped.extend(swap_governed_views(spark, lambda schema: schema))
        return plan

    s = remote("carol")
    want = embedded("carol", ORDERS)
    monkeypatch.setattr(Backend, "keep", keep_then_swap)
    try:
        got = rows(s.sql(ORDERS))
    finally:
        monkeypatch.undo()
        connect_lakegate.sources.forget()  # the next statement makes its pins afresh
    assert swapped, "the governed SQL read pinned sources"
    assert want and got == want


def test_cached_plan_entry_removed_after_execution(remote, gateway, keys) -> None:
    s = remote("dana")
    assert rows(s.sql(ORDERS).select("*"))  # not spark.sql's own run (test_connect_plan_once)
    assert keys and all(k.startswith("lakegate-") and len(k) == 41 for _, _, k in keys)
    assert len({k for _, _, k in keys}) == len(keys)  # a fresh key per execution
    # the client has its rows before the gateway's stream ends (Spark 3.5's client returns
    # at its ResultComplete): the key goes when the call ends
    _until(lambda: not any(gateway.backend.kept(*k) for k in keys))


def test_cached_plan_entry_removed_after_a_failed_execution(remote, gateway, keys) -> None:
    s = remote("alice")
    with pytest.raises(Exception, match=r"statement failed: \[") as e:
        s.sql("SELECT to_number(name, '9') AS n FROM main.sales.customers").select("n").collect()
    assert "(query " in str(e.value)
    assert keys and not any(gateway.backend.kept(*k) for k in keys)


def test_cached_plan_entry_removed_when_the_client_stops_reading(remote, gateway, keys) -> None:
    s = remote("erin")
    it = s.sql(ORDERS).select("*").toLocalIterator()
    assert next(it) is not None
    it.close()
    assert keys
    _until(lambda: not any(gateway.backend.kept(*k) for k in keys))


def test_cached_plan_entry_is_per_session(remote, monkeypatch) -> None:
    """A key kept for one session is not in another session of the same user, nor in the
    session with the same id of another user."""
    seen: list[bool] = []
    real = Backend.keep

    def keep_and_look(self: Backend, relation: bytes, user: str, sid: str, key: str) -> Any:
        plan = real(self, relation, user, sid, key)
        seen.append(self.kept(user, sid, key))
        seen.append(self.kept(user, str(uuid.uuid4()), key))
        seen.append(self.kept("mallory", sid, key))
        return plan

    monkeypatch.setattr(Backend, "keep", keep_and_look)
    assert rows(remote("bob").sql(ORDERS))
    assert seen[:3] == [True, False, False]


def _until(check: Any, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the kept Dataset was not forgotten"
        time.sleep(0.1)
