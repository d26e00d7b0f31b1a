"""Every statement kind gets an outcome (issue 42, item 1): the intents a dead writer left
for a DROP, a CREATE SCHEMA, a CREATE TABLE whose commit is in a set-aside leftover, a
removal of a leftover and a statement's extra lines (policyRead, tagPropagate) are judged
by the catalog and the Delta logs, and `recover` writes an outcome for each: nothing stays
unknown. A real catalog (SQLite), real audit log and real Delta logs (delta-rs, no JVM).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from audit import AuditEvent, AuditLog
from audit.landing import commit_tag, recover
from audit.query import query
from catalog.catalog import Catalog
from catalog.store import open_store
from governance.session.recovery import CatalogJudge, table_locator


def _intent(query_id: str, cmd: str, src: str | None, dst: str | None = None) -> AuditEvent:
    return AuditEvent(allowed=True, user="u", auth="TOKEN", cmd=cmd, src=src, dst=dst,
                      query_id=query_id, policy_version="sha256:test", phase="intent",
                      proto="rest")  # fmt: skip


def test_every_kind_of_pending_intent_gets_an_outcome_that_agrees_with_the_catalog(
    tmp_path: Path,
) -> None:
    warehouse = tmp_path / "warehouse"
    catalog = Catalog(open_store(str(tmp_path / "catalog.db")), warehouse)
    catalog.create_catalog("l", if_not_exists=True)
    catalog.create_schema("l", "s", if_not_exists=True)
    # a CTAS whose commit a later CREATE of the name moved aside
    aside = warehouse / "l" / "s" / "copy.orphan-20261206T000102Z-0123abcd"
    write_deltalake(
        str(aside),
        pa.table({"id": [1]}),
        commit_properties=_tagged("q-ctas"),
    )
    leftover = warehouse / "l" / "s" / "gone.orphan-20261206T000102Z-89abcdef"  # removed
    directory = tmp_path / "audit"
    with AuditLog(directory, writer_id="crashed-server") as crashed:
        crashed.write(
            [
                _intent("q-drop", "drop", "l.s.dropped"),
                _intent("q-schema", "create", "l.s"),
                _intent("q-schema-lost", "create", "l.t"),
                _intent("q-ctas", "create", "l.s.src0", "l.s.copy"),
                _intent("q-ctas", "tagPropagate", "l.s.src0", "l.s.copy"),
                _intent("q-ctas", "policyRead", "l.s.map", "l.s.copy"),
                _intent("q-remove", "removeLeftover", str(leftover)),
            ]
        )
    judge = CatalogJudge(catalog)
    with AuditLog(directory, writer_id="new-server") as log:
        examined = recover(log, table_locator(catalog), judge)
    said = {(r.intent.query_id, r.intent.cmd): str(r.landing) for r in examined}
    assert said == {
        ("q-drop", "drop"): "landed: l.s.dropped is no longer in the catalog",
        ("q-schema", "create"): "landed: l.s is in the catalog",
        ("q-schema-lost", "create"): "not landed: l.t is not in the catalog",
        ("q-ctas", "create"): f"set aside: committed to {aside} (version 0), never registered",
        ("q-ctas", "tagPropagate"): f"set aside: committed to {aside} (version 0), never "
        "registered",
        ("q-ctas", "policyRead"): f"set aside: committed to {aside} (version 0), never registered",
        ("q-remove", "removeLeftover"): f"landed: {leftover} is gone",
    }
    assert query(directory, pending=True).records == []
    outcomes = {
        (r.query_id, r.cmd): r.succeeded for r in query(directory).records if r.phase == "recovered"
    }
    assert outcomes[("q-drop", "drop")] is True
    assert outcomes[("q-ctas", "create")] is False


def _tagged(query_id: str):
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": commit_tag(query_id)})
