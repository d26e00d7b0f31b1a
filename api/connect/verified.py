"""Verified queries a session may run again without a second verification.

`spark.sql(q)` is answered by the gateway: it governs `q` and has the backend analyse the
governed plan (as plain Spark Connect analyses `q`), so a refusal reads at `spark.sql` as
it would on Spark. The client then runs the same `sql` relation (`collect`, `show`,
`toPandas`). The gateway used to govern it again and have the backend analyse and verify
it a second time; now the Dataset the first verification accepted is kept in the backend
session, and a later use whose governed plan is byte for byte the same, under the same
policy version, catalog generation and pinned sources (governance/execute/sources.py: a pin dropped
after a schema change is made again under the same name), runs that Dataset. Its audit
lines name the columns the first verification found.

Why this is the same guarantee: the plan that runs is the one Spark analysed and the
verifier accepted in this very backend session; the identity covers everything governance
put in it (the placed views' SQL, the inlined entitlements, table locations, temp views
expanded), so a change to any of them is a new identity, verified afresh. Data written
between the two uses is read at execution (Delta resolves a table's snapshot when a plan
runs, and refuses a plan whose table schema changed since its analysis).

A session keeps at most `KEPT` such Datasets, the oldest forgotten in the backend first;
they go with the backend session when it is released.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from pyspark.sql.connect.proto.relations_pb2 import Relation

KEPT = 8  # verified queries kept per Connect session

Columns = tuple[tuple[str, int, tuple[int, ...]], ...]  # governance.verify.plan.columns_used


@dataclass(frozen=True)
class VerifiedQuery:
    """A kept, verified Dataset: its backend key and the columns it reads of each view."""

    key: str
    columns: Columns


def identity(governed: Relation, policy_version: str, generation: object) -> bytes:
    """What a verified query is known by: its governed plan, the policies and the catalog.
    The root's `common` (the client's plan id, its call site) is left out: nothing above
    the root can refer to it, and the client's run of `spark.sql(q)` carries one that the
    gateway's own answer to spark.sql did not."""
    root = Relation()
    root.CopyFrom(governed)
    root.ClearField("common")
    h = hashlib.sha256(root.SerializeToString(deterministic=True))
    h.update(b"\0" + policy_version.encode() + b"\0" + repr(generation).encode())
    return h.digest()


class VerifiedQueries:
    """One session's kept verified queries, least recently used first (used under the
    session's lock)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[bytes, VerifiedQuery] = OrderedDict()

    def get(self, ident: bytes) -> VerifiedQuery | None:
        found = self._kept.get(ident)
        if found is not None:
            self._kept.move_to_end(ident)
        return found

    def remember(self, ident: bytes, query: VerifiedQuery) -> list[str]:
        """Keep `query`; the backend keys of those it pushed out (for the caller to forget)."""
        gone = []
        old = self._kept.pop(ident, None)
        if old is not None and old.key != query.key:
            gone.append(old.key)
        self._kept[ident] = query
        while len(self._kept) > KEPT:
            gone.append(self._kept.popitem(last=False)[1].key)
        return gone

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: str) -> bool:
        """Whether the backend key `key` is kept here."""
        return any(q.key == key for q in self._kept.values())
