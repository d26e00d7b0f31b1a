"""Connect reads are planned once and verified once (issue 12): a governed read is planned
through the plan cache and audited per use, never run in the embedded session first; the
composed plan's verification in the backend is what lets it run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from connect_testkit import audit_lines

import api.connect.relations as relations
from governance.planning import dispatch
from governance.session.governed import GovernedSession

# a text no other test sends, so the first use here is a miss
QUERY = "SELECT id, region FROM main.sales.orders WHERE id <> -4242"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often a statement was planned, run in the embedded session, and verified."""
    counts = {"plan": 0, "embedded": 0, "verify": 0}

    def counting(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            counts[name] += 1
            return real(*args, **kw)

        return wrapper

    monkeypatch.setattr(dispatch.Planner, "plan", counting("plan", dispatch.Planner.plan))
    monkeypatch.setattr(GovernedSession, "_execute", counting("embedded", GovernedSession._execute))
    monkeypatch.setattr(relations, "verify_plan", counting("verify", relations.verify_plan))
    yield counts


def test_spark_sql_collect_plans_once_and_runs_nothing_embedded(
    remote, embedded, calls, audit_dir
) -> None:
    s = remote("carol")
    before = len(audit_lines(audit_dir))
    got = sorted((tuple(r) for r in s.sql(QUERY).collect()), key=repr)
    new = audit_lines(audit_dir)[before:]
    assert calls["plan"] == 1  # the SqlCommand planned it; the client's execution hit
    assert calls["embedded"] == 0
    # spark.sql verified it in the backend; the collect ran that verified Dataset
    # (api/connect/verified.py), its governed plan being the same
    assert calls["verify"] == 1
    selects = [ln for ln in new if ln["cmd"] == "select" and ln["src"] == "main.sales.orders"]
    assert len(selects) == 2 and all(ln["proto"] == "connect" for ln in selects)
    # spark.sql read nothing yet; the run names the columns the verification found
    assert [ln["columns"] for ln in selects] == ["null", "id,region"]
    assert got == embedded("carol", QUERY)


def test_a_repeated_table_read_is_not_planned_again_but_verified_again(remote, calls) -> None:
    s = remote("erin")
    first = s.table("main.sales.customers").select("id").collect()
    calls.update(plan=0, embedded=0, verify=0)
    second = s.table("main.sales.customers").select("id").collect()
    assert first == second
    assert calls == {"plan": 0, "embedded": 0, "verify": 1}


def test_a_spark_sql_query_run_later_reads_the_rows_written_meanwhile(remote, embedded) -> None:
    """The Dataset verified at spark.sql(q) is the one its collect runs (verified.py): data
    written between the two is read, as plain Spark Connect analysing q again would."""
    s = remote("carol")
    df = s.sql("SELECT id, amount FROM main.sales.orders WHERE id >= 93")
    assert df.collect() == []
    s.sql("INSERT INTO main.sales.orders VALUES (93, 1, 'EMEA', 5.00, DATE'2026-05-03', false)")
    try:
        assert [tuple(r) for r in df.collect()] == [(93, 5.0)]
    finally:
        s.sql("DELETE FROM main.sales.orders WHERE id = 93")
    assert df.collect() == []


def test_a_kept_query_is_verified_again_once_pinned_sources_are_dropped(
    remote, gateway, calls
) -> None:
    """A schema change behind the catalog's back drops the pins (governance/execute/sources.py) and
    they are made again under the same names: a Dataset analysed before holds the old ones,
    so it is not run again."""
    s = remote("carol")
    df = s.sql(QUERY.replace("-4242", "-4243"))
    gateway.service.lg.sources.forget()
    calls.update(verify=0)
    df.collect()
    assert calls["verify"] == 1
    calls.update(verify=0)
    df.collect()  # only spark.sql keeps what it verified; a run verifies its own
    assert calls["verify"] == 1


def test_a_spark_sql_query_runs_the_dataset_spark_sql_kept_and_keeps_it(
    remote, gateway, monkeypatch
) -> None:
    """Its runs name the Dataset spark.sql kept (no key of their own), which stays kept for
    the session's next run."""
    from api.connect.backend import Backend

    kept: list[tuple[str, str, str]] = []
    real = Backend.keep

    def keep(self: Backend, relation: bytes, user: str, sid: str, key: str) -> Any:
        kept.append((user, sid, key))
        return real(self, relation, user, sid, key)

    secured: list[tuple[str, str]] = []
    real_secure = Backend.secure

    def secure(self: Backend, user: str, sid: str) -> None:
        secured.append((user, sid))
        real_secure(self, user, sid)

    monkeypatch.setattr(Backend, "keep", keep)
    monkeypatch.setattr(Backend, "secure", secure)
    s = remote("dana")
    df = s.sql(QUERY.replace("-4242", "-4244"))
    assert len(kept) == 1 and secured == []
    first = sorted(map(tuple, df.collect()), key=repr)
    assert sorted(map(tuple, df.collect()), key=repr) == first
    assert len(kept) == 1 and gateway.backend.kept(*kept[0])
    # each run checks the session's governed settings, as a verification does
    assert secured == [kept[0][:2]] * 2
