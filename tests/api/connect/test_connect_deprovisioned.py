"""A user the identity provider deprovisions (SCIM on another server of the same catalog,
issue 37 item 3) loses the gateway within the directory's refresh bound: its open Spark
Connect sessions are released without any call of its own, and its next call is refused,
on record as that user."""

from __future__ import annotations

import time

import pytest
from connect_testkit import audit_lines

from api.directory import directory_of
from catalog.directory import DirectoryStore
from catalog.store import open_store
from governance.identity import GroupMapping

BOUND = 2.0  # catalog/directory.py MAX_AGE: the documented bound


def test_a_deprovisioned_users_sessions_end_and_its_next_call_is_refused(
    remote, gateway, connect_lakegate, audit_dir
) -> None:
    frank = remote("frank")
    assert frank.sql("SELECT 1 AS one").collect()[0][0] == 1
    sessions = gateway.service.sessions
    assert sessions.count("frank") >= 1
    other_store = open_store(connect_lakegate.config.catalog)  # "another server"
    other = DirectoryStore(other_store, {"scim": GroupMapping().apply})
    user = other.create_user("frank")
    try:
        other.replace_user(
            user.id,
            user_name="frank",
            external_id=None,
            display_name=None,
            emails=(),
            active=False,
        )
        deactivated = time.monotonic()
        while sessions.count("frank") and time.monotonic() - deactivated < BOUND + 3:
            time.sleep(0.05)
        took = time.monotonic() - deactivated
        assert sessions.count("frank") == 0, "frank's sessions were not ended"
        assert took < BOUND + 1.5  # the watch thread's period, plus a slow machine's slack
        with pytest.raises(Exception, match="deprovisioned by the identity provider"):
            frank.sql("SELECT 1 AS one").collect()
        refused = [ln for ln in audit_lines(audit_dir) if ln.get("allowed") == "false"][-1]
        assert refused["ugi"].startswith("frank ") and refused["proto"] == "connect"
    finally:
        other.delete_user(user.id)
        other_store.close()
        # frank is a persona of the other gateway tests: give him back at once (the
        # tombstone goes with the directory rows of this test)
        from sqlalchemy import delete

        from catalog.schema import directory_users

        with connect_lakegate.catalog.store.write() as conn:
            conn.execute(delete(directory_users).where(directory_users.c.user_name == "frank"))
        directory_of(connect_lakegate).refresh(force=True)
        assert not directory_of(connect_lakegate).deprovisioned("frank")
