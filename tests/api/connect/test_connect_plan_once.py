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
from governance.session import GovernedSession

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
    assert calls["verify"] == 2  # each use verified in the backend before it ran
    selects = [ln for ln in new if ln["cmd"] == "select" and ln["src"] == "main.sales.orders"]
    assert len(selects) == 2 and all(ln["proto"] == "connect" for ln in selects)
    assert got == embedded("carol", QUERY)


def test_a_repeated_table_read_is_not_planned_again_but_verified_again(remote, calls) -> None:
    s = remote("erin")
    first = s.table("main.sales.customers").select("id").collect()
    calls.update(plan=0, embedded=0, verify=0)
    second = s.table("main.sales.customers").select("id").collect()
    assert first == second
    assert calls == {"plan": 0, "embedded": 0, "verify": 1}
