"""The verified queries a Connect session keeps (api/connect/verified.py), as tables of
input and expected output; no JVM."""

from __future__ import annotations

import pytest
from pyspark.sql.connect.proto import relations_pb2

from api.connect.verified import KEPT, VerifiedQueries, VerifiedQuery, identity


def _sql(text: str, plan_id: int | None = None) -> relations_pb2.Relation:
    rel = relations_pb2.Relation(sql=relations_pb2.SQL(query=text))
    if plan_id is not None:
        rel.common.plan_id = plan_id
    return rel


SAME = identity(_sql("SELECT 1"), "sha256:a", 7)


@pytest.mark.parametrize(
    ("relation", "policy", "generation", "same"),
    [
        (_sql("SELECT 1", plan_id=3), "sha256:a", 7, True),  # the client's plan id
        (_sql("SELECT 2"), "sha256:a", 7, False),  # another governed plan
        (_sql("SELECT 1"), "sha256:b", 7, False),  # another policy version
        (_sql("SELECT 1"), "sha256:a", 8, False),  # the catalog changed
    ],
    ids=["root plan id ignored", "plan", "policy version", "catalog generation"],
)
def test_a_verified_query_is_known_by_its_plan_policies_and_catalog(
    relation: relations_pb2.Relation, policy: str, generation: int, same: bool
) -> None:
    assert (identity(relation, policy, generation) == SAME) is same


def test_a_plan_id_below_the_root_is_part_of_the_identity() -> None:
    """Only the root's `common` is left out: a child's plan id may be referred to."""
    outer = relations_pb2.Relation()
    outer.limit.input.CopyFrom(_sql("SELECT 1", plan_id=1))
    outer.limit.limit = 5
    other = relations_pb2.Relation()
    other.CopyFrom(outer)
    other.limit.input.common.plan_id = 2
    assert identity(outer, "v", 1) != identity(other, "v", 1)


def test_a_session_keeps_at_most_kept_queries_forgetting_the_least_recently_used() -> None:
    kept = VerifiedQueries()
    gone: list[str] = []
    for n in range(KEPT):
        gone += kept.remember(bytes([n]), VerifiedQuery(f"k{n}", ()))
    assert kept.get(bytes([0])) == VerifiedQuery("k0", ())  # used: now the most recent
    gone += kept.remember(b"new", VerifiedQuery("knew", ()))
    assert gone == ["k1"] and len(kept) == KEPT
    assert kept.get(bytes([1])) is None
    assert "k0" in kept and "knew" in kept and "k1" not in kept


def test_a_query_verified_again_replaces_its_dataset_and_the_old_one_is_forgotten() -> None:
    kept = VerifiedQueries()
    assert kept.remember(b"q", VerifiedQuery("first", ())) == []
    assert kept.remember(b"q", VerifiedQuery("second", ())) == ["first"]
    assert kept.get(b"q") == VerifiedQuery("second", ())
