"""Audit before effect (issue 10, item 5): a statement that changes anything has its intent on
record before it runs; when the intent cannot be written nothing runs, and when the outcome
cannot be written after it ran the caller is told so. Real Delta tables, a real audit log made
unwritable by putting a directory where `audit.log` should be."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from audit import AuditWriteError
from audit.query import query
from governance.errors import AuditUnavailable

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: u-all, principals: [u], privileges: [select, modify, create], on: "e.s.*"}
"""


@pytest.fixture(scope="module")
def elake(make_lakegate):
    return make_lakegate(
        "audit-effect",
        POLICIES,
        [
            "CREATE CATALOG e",
            "CREATE SCHEMA e.s",
            "CREATE TABLE e.s.t (id INT)",
            "INSERT INTO e.s.t VALUES (1), (2)",
        ],
    )


def delta_version(lg, table: str) -> int:
    """The newest commit number in the table's real Delta log."""
    info = lg.catalog.table(*table.split("."))
    return max(int(p.stem) for p in (Path(info.location) / "_delta_log").glob("*.json"))


@pytest.fixture
def unwritable_log(elake) -> Iterator[None]:
    """A directory in the place of audit.log: every append fails; restored afterwards."""
    log = elake.config.audit / "audit.log"
    kept = log.with_name("audit.log.kept")
    log.rename(kept)
    log.mkdir()
    yield
    log.rmdir()
    kept.rename(log)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO e.s.t VALUES (3)",
        "UPDATE e.s.t SET id = id + 10",
        "DELETE FROM e.s.t WHERE id = 1",
    ],
)
def test_a_write_whose_intent_cannot_be_recorded_never_runs(elake, unwritable_log, sql):
    before = delta_version(elake, "e.s.t")
    with pytest.raises(AuditUnavailable, match="access refused"):
        elake.session("u").sql(sql)
    assert delta_version(elake, "e.s.t") == before


def test_ddl_whose_intent_cannot_be_recorded_never_runs(elake, unwritable_log):
    with pytest.raises(AuditUnavailable):
        elake.session("u").sql("CREATE TABLE e.s.never (id INT)")
    assert elake.catalog.table("e", "s", "never") is None


def test_register_whose_intent_cannot_be_recorded_never_registers(elake, unwritable_log):
    location = elake.catalog.table("e", "s", "t").location
    with pytest.raises(AuditUnavailable):
        elake.register_table("e.s.again", location)
    assert elake.catalog.table("e", "s", "again") is None


def test_intent_is_on_record_before_the_write_and_outcome_after(elake):
    s = elake.session("u")
    s.sql("INSERT INTO e.s.t VALUES (5)")
    mine = [r for r in query(elake.config.audit).records if r.query_id == s.last_query_id]
    assert [(r.phase, r.succeeded, r.cmd, r.src) for r in mine] == [
        ("intent", False, "insert", "e.s.t"),
        ("outcome", True, "insert", "e.s.t"),
    ]
    assert s.last_query_id not in {
        r.query_id for r in query(elake.config.audit, pending=True).records
    }


def test_a_read_is_one_record_without_phase(elake):
    s = elake.session("u")
    s.sql("SELECT id FROM e.s.t").collect()
    mine = [r for r in query(elake.config.audit).records if r.query_id == s.last_query_id]
    assert [(r.phase, r.succeeded) for r in mine] == [(None, True)]


def test_outcome_that_cannot_be_recorded_is_reported_and_the_intent_stays_pending(
    elake, monkeypatch
):
    """Failure handling: the log fails only after the intent was written."""
    real = elake.audit.write
    calls: list[int] = []

    def fail_second(events):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) > 1:
            raise AuditWriteError("disk full (simulated)")
        real(events)

    monkeypatch.setattr(elake.audit, "write", fail_second)
    before = delta_version(elake, "e.s.t")
    s = elake.session("u")
    with pytest.raises(AuditUnavailable, match="intent is on record"):
        s.sql("INSERT INTO e.s.t VALUES (6)")
    monkeypatch.undo()
    assert delta_version(elake, "e.s.t") == before + 1  # it ran: said so honestly
    pending = query(elake.config.audit, pending=True).records
    assert [(r.query_id, r.phase) for r in pending] == [(s.last_query_id, "intent")]
