"""An AnalyzePlan request is answered about the very Dataset the verifier accepted (issue 31):
each plan it carries is kept in the backend session under a fresh unguessable key and
forwarded as a CachedRemoteRelation of that key, so the backend analyses nothing again and
answers about what was checked. The keys live only while the call does; clients can never
name such a relation; what was refused (explain, input_files, the cache) stays refused."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from connect_testkit import hand_made_cached_relations, swap_governed_views, token_of

from api.connect.backend import Backend

ORDERS = "SELECT id, region, amount FROM main.sales.orders"
REFUSED = "server-side cached DataFrames are refused through the Lakegate gateway"


@pytest.fixture
def forwarded(gateway, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every AnalyzePlan request the gateway forwarded to the backend (then forwarded)."""
    seen: list[Any] = []
    stub = gateway.service.stub
    real = stub.AnalyzePlan

    def forward(request: Any, **kw: Any) -> Any:
        copy = type(request)()
        copy.CopyFrom(request)
        seen.append(copy)
        return real(request, **kw)

    monkeypatch.setattr(stub, "AnalyzePlan", forward)
    yield seen


def _fields(s: Any) -> list[tuple[str, str, bool]]:
    return [(f.name, f.dataType.simpleString(), f.nullable) for f in s.fields]


def _tree_string(df: Any) -> str:
    """The tree_string analysis of `df` (Spark 4's `printSchema` prints its schema locally;
    Spark 3.5's asks for this)."""
    client = df._session.client
    return client._analyze(method="tree_string", plan=df._plan.to_proto(client)).tree_string


def _plans(request: Any) -> list[Any]:
    """The root relations of every plan an AnalyzePlan request carries."""
    kind = request.WhichOneof("analyze")
    msg = getattr(request, kind)
    return [v.root for fd, v in msg.ListFields() if fd.message_type.name == "Plan"]


def test_analyzed_schema_is_the_verified_plans(
    remote, gateway, connect_lakegate, monkeypatch
) -> None:
    """Between the verifier's analysis and the backend's answer every pinned source and
    governed view the governed SQL names is replaced by one whose columns are all strings
    (a concurrent re-pin, as a schema change makes): `df.schema`, `df.columns` and
    `printSchema` still answer the schema of the plan that was verified."""
    spark = connect_lakegate.spark
    embedded = connect_lakegate.session("carol").sql(ORDERS)
    want = _fields(embedded.schema)
    real = Backend.keep
    swapped: list[str] = []

    def keep_then_swap(self: Backend, relation: bytes, user: str, sid: str, key: str) -> Any:
        from pyspark.sql.types import StringType, StructField, StructType

        def as_text(schema: StructType) -> StructType:
            return StructType([StructField(f.name, StringType()) for f in schema])

        plan = real(self, relation, user, sid, key)
        swapped.extend(swap_governed_views(spark, as_text))
        return plan

    s = remote("carol")
    answers = []
    for ask in (lambda df: df.schema, lambda df: df.columns, _tree_string):
        df = s.sql(ORDERS)  # verified against the views as they are
        monkeypatch.setattr(Backend, "keep", keep_then_swap)
        try:
            answers.append(ask(df))
        finally:
            monkeypatch.undo()
            connect_lakegate.sources.forget()  # the next statement makes its pins afresh
    schema, columns, tree = answers
    assert swapped, "the governed SQL read pinned sources"
    assert ("id", "string", True) not in want
    assert _fields(schema) == want
    assert columns == [name for name, _, _ in want]
    assert tree == embedded._jdf.schema().treeString()


def test_every_analyzed_plan_is_forwarded_as_its_kept_dataset(
    remote, gateway, keys, forwarded
) -> None:
    """schema, tree_string, is_local, is_streaming, semantic_hash and both plans of
    same_semantics: each plan forwarded is a CachedRemoteRelation of a key kept for it in
    this call (a fresh key per plan), and no key is kept once the call has answered."""
    s = remote("dana")
    answers: dict[str, Any] = {}
    calls: dict[str, Callable[[], Any]] = {
        "schema": lambda: s.sql(ORDERS).schema,
        "tree_string": lambda: _tree_string(s.sql(ORDERS)),
        "is_local": lambda: s.sql(ORDERS).isLocal(),
        "is_streaming": lambda: s.sql(ORDERS).isStreaming,
        "semantic_hash": lambda: s.sql(ORDERS).semanticHash(),
        "same_semantics": lambda: s.sql(ORDERS).sameSemantics(s.sql(ORDERS).select("id")),
    }
    for kind, call in calls.items():
        before = len(keys)
        answers[kind] = call()
        request = forwarded[-1]
        assert request.WhichOneof("analyze") == kind
        made = [k for _, _, k in keys[before:]]
        roots = _plans(request)
        assert [r.WhichOneof("rel_type") for r in roots] == ["cached_remote_relation"] * len(roots)
        assert [r.cached_remote_relation.relation_id for r in roots] == made
        assert len(made) == (2 if kind == "same_semantics" else 1)
        assert not any(gateway.backend.kept(*k) for k in keys[before:])
    assert all(k.startswith("lakegate-") and len(k) == 41 for _, _, k in keys)
    assert len({k for _, _, k in keys}) == len(keys)
    assert answers["is_local"] is False and answers["is_streaming"] is False
    assert answers["same_semantics"] is False
    assert isinstance(answers["semantic_hash"], int)


def test_kept_analysis_entries_removed_after_a_refusal(remote, gateway, keys) -> None:
    """sameSemantics whose second plan reads a table the user may not read: the first
    plan's Dataset was kept, the call is refused, and the key is forgotten."""
    s = remote("mira")
    with pytest.raises(Exception, match="denied"):
        s.sql(ORDERS).sameSemantics(s.table("main.acl.user_regions"))
    assert len(keys) == 1 and not gateway.backend.kept(*keys[0])


def test_kept_analysis_entries_removed_after_a_backend_failure(
    remote, gateway, keys, monkeypatch
) -> None:
    """The backend's analysis fails (here: it is asked about a key nobody kept) while the
    call's own key is still kept: the client reads class + query id, and the key goes."""
    from pyspark.sql.connect.proto import relations_pb2

    stub = gateway.service.stub
    real = stub.AnalyzePlan
    still_kept: list[bool] = []

    def fail(request: Any, **kw: Any) -> Any:
        still_kept.append(all(gateway.backend.kept(*k) for k in keys))
        request.schema.plan.root.CopyFrom(
            relations_pb2.Relation(
                cached_remote_relation=relations_pb2.CachedRemoteRelation(
                    relation_id=f"lakegate-{uuid.uuid4().hex}"
                )
            )
        )
        return real(request, **kw)

    monkeypatch.setattr(stub, "AnalyzePlan", fail)
    failed = r"statement failed: \[[A-Za-z_.]+\] \(query [0-9a-f]{32}\)\Z"
    with pytest.raises(Exception, match=failed) as e:
        remote("erin").sql(ORDERS).schema  # noqa: B018 (the property is the call)
    assert "lakegate-" not in str(e.value)  # no key reaches the caller
    assert still_kept == [True]
    assert keys and not any(gateway.backend.kept(*k) for k in keys)


def test_client_cannot_analyze_a_cached_remote_relation(gateway, connect_lakegate, keys) -> None:
    """A hand-made schema request naming a CachedRemoteRelation, as the plan or inside it,
    is refused before anything is analysed or kept."""
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    cached, inside = hand_made_cached_relations()
    creds = grpc.ssl_channel_credentials(root_certificates=connect_lakegate.ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{gateway.port}", creds) as ch:
        stub = base_pb2_grpc.SparkConnectServiceStub(ch)
        for rel in (cached, inside):
            req = base_pb2.AnalyzePlanRequest(session_id=str(uuid.uuid4()))
            req.schema.plan.root.CopyFrom(rel)
            with pytest.raises(grpc.RpcError) as e:
                stub.AnalyzePlan(req, metadata=[("authorization", f"Bearer {token_of('erin')}")])
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert e.value.details() == REFUSED
    assert keys == []


@pytest.mark.parametrize(
    ("call", "line"),
    [
        (
            lambda df: df.explain(),
            "explain is refused through the gateway: it shows the governed views' storage "
            "locations and policy expressions",
        ),
        (lambda df: df.inputFiles(), "input_files is refused: it shows storage locations"),
        (
            lambda df: df.storageLevel,
            "persist/cache, unpersist and storageLevel are refused through the gateway: "
            "Spark's cache is shared by every user of the backend",
        ),
    ],
    ids=["explain", "input_files", "storage_level"],
)
def test_refused_analyze_kinds_keep_nothing(remote, keys, call, line) -> None:
    """explain, input_files and the cache stay refused, before any plan is kept."""
    with pytest.raises(Exception, match=re.escape(line)):
        call(remote("dana").sql(ORDERS))
    assert keys == []
