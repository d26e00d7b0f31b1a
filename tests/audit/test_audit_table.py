"""system.access.audit is a governed table: readable only where the policies grant it."""

from __future__ import annotations

import pytest

from governance import AccessDenied


def test_auditors_read_the_audit_log_through_governed_sql(lakehouse) -> None:
    lakehouse.session("alice").sql("SELECT count(*) FROM main.sales.orders").collect()
    rows = (
        lakehouse.session("frank")
        .sql(
            "SELECT user, cmd, src, allowed, succeeded FROM system.access.audit "
            "WHERE user = 'alice' AND src = 'main.sales.orders' ORDER BY ts DESC LIMIT 1"
        )
        .collect()
    )
    assert [tuple(r) for r in rows] == [("alice", "select", "main.sales.orders", True, True)]


def test_the_audit_log_does_not_exist_for_others(lakehouse) -> None:
    with pytest.raises(AccessDenied, match=r"no SELECT privilege on table system\.access\.audit"):
        lakehouse.session("alice").sql("SELECT * FROM system.access.audit")


def test_the_audit_log_view_is_not_reachable_by_its_temp_name(lakehouse) -> None:
    with pytest.raises(AccessDenied):
        lakehouse.session("frank").sql(f"SELECT * FROM {lakehouse.audit_view}")


def test_reads_of_the_audit_log_are_audited_too(lakehouse) -> None:
    s = lakehouse.session("frank")
    s.sql("SELECT count(*) FROM system.access.audit").collect()
    rows = s.sql(
        "SELECT count(*) AS n FROM system.access.audit "
        "WHERE user = 'frank' AND src = 'system.access.audit'"
    ).first()
    assert rows.n >= 1
