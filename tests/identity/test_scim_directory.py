"""The directory behind SCIM and the LDAP sync (catalog/directory.py): several servers on one
catalog database agree within the snapshot's bound, tombstones keep deleted users refused,
each source's snapshot is replaced whole, and a deprovisioned user's gateway sessions end."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from api.connect.sessions import SessionRegistry
from catalog.directory import DirectoryConflict, DirectoryError, DirectoryStore
from catalog.store import open_store
from governance.identity import GroupMapping


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


MAPPINGS = {
    "scim": GroupMapping((("Okta-Analysts", "analysts"),)).apply,
    "ldap": GroupMapping((("cn-pii", "pii-readers"),), "drop").apply,
}


def _two_servers(url: str) -> tuple[DirectoryStore, DirectoryStore, Clock, Callable[[], None]]:
    a_store, b_store = open_store(url), open_store(url)
    clock = Clock()
    a = DirectoryStore(a_store, MAPPINGS, max_age=2.0, clock=clock)
    b = DirectoryStore(b_store, MAPPINGS, max_age=2.0, clock=clock)

    def close() -> None:
        a_store.close()
        b_store.close()

    return a, b, clock, close


def _agree_within_the_bound(a: DirectoryStore, b: DirectoryStore, clock: Clock) -> None:
    seen: list[str] = []
    b.subscribe(seen.append)
    alice = a.create_user("alice")
    a.create_group("Okta-Analysts", member_ids=[alice.id])
    assert not b.deprovisioned("alice")  # b's first snapshot, read now
    clock.now += 2.5
    assert b.groups_of("alice") == {"analysts"}
    a.replace_user(
        alice.id, user_name="alice", external_id=None, display_name=None, emails=(), active=False
    )
    assert a.deprovisioned("alice")  # the writing server: at once
    assert not b.deprovisioned("alice")  # the other: its snapshot is younger than 2 s
    clock.now += 1.0
    assert not b.deprovisioned("alice")
    clock.now += 1.1  # 2.1 s after its last read: the generation moved, it reloads
    assert b.deprovisioned("alice") and seen == ["alice"]
    clock.now += 5
    assert b.deprovisioned("alice") and seen == ["alice"]  # told once


def test_two_servers_on_one_sqlite_catalog_agree_within_the_refresh_bound(tmp_path) -> None:
    a, b, clock, close = _two_servers(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        _agree_within_the_bound(a, b, clock)
    finally:
        close()


def test_two_servers_on_one_postgresql_catalog_agree_within_the_refresh_bound(
    postgres_url: str,
) -> None:
    a, b, clock, close = _two_servers(postgres_url)
    try:
        _agree_within_the_bound(a, b, clock)
    finally:
        close()


def test_a_deleted_user_stays_deprovisioned_until_provisioned_again(tmp_path) -> None:
    store = open_store(tmp_path / "c.db")
    d = DirectoryStore(store, MAPPINGS)
    try:
        bob = d.create_user("bob")
        d.create_group("Okta-Analysts", member_ids=[bob.id])
        d.delete_user(bob.id)
        assert d.deprovisioned("bob") and d.groups_of("bob") == frozenset()
        assert d.get_user(bob.id) is None and d.find_user("bob") is None
        assert d.get_group(d.list_groups()[0].id).members == ()  # it left its groups
        again = d.create_user("bob")
        assert again.id != bob.id and not d.deprovisioned("bob")
    finally:
        store.close()


def test_renaming_a_user_leaves_the_old_name_refused(tmp_path) -> None:
    store = open_store(tmp_path / "c.db")
    d = DirectoryStore(store, MAPPINGS)
    try:
        carl = d.create_user("carl")
        d.create_user("other")
        with pytest.raises(DirectoryConflict):
            d.replace_user(
                carl.id,
                user_name="other",
                external_id=None,
                display_name=None,
                emails=(),
                active=True,
            )
        d.replace_user(
            carl.id,
            user_name="carl2",
            external_id=None,
            display_name=None,
            emails=(),
            active=True,
        )
        assert d.deprovisioned("carl") and not d.deprovisioned("carl2")
    finally:
        store.close()


def test_a_source_snapshot_is_replaced_whole_and_mapped_by_its_own_mapping(tmp_path) -> None:
    store = open_store(tmp_path / "c.db")
    d = DirectoryStore(store, MAPPINGS)
    try:
        d.replace_source_groups("ldap", {"cn-pii": ["dana", "erin"], "cn-other": ["dana"]})
        assert d.groups_of("dana") == {"pii-readers"}  # ldap drops unmapped names
        d.replace_source_groups("ldap", {"cn-pii": ["erin"]})
        assert d.groups_of("dana") == frozenset() and d.groups_of("erin") == {"pii-readers"}
        d.replace_source_groups("nobody-maps-this", {"analysts": ["erin"]})
        assert d.groups_of("erin") == {"pii-readers"}  # a source without a mapping: nothing
        with pytest.raises(DirectoryError):
            d.replace_source_groups("scim", {})
        assert [g.display_name for g in d.list_groups("ldap")] == ["cn-pii"]
    finally:
        store.close()


def test_scim_group_members_must_be_directory_users(tmp_path) -> None:
    store = open_store(tmp_path / "c.db")
    d = DirectoryStore(store, MAPPINGS)
    try:
        with pytest.raises(DirectoryError, match="must be users"):
            d.create_group("g", member_ids=["not-a-user"])
        assert d.list_groups() == []  # nothing half-written
    finally:
        store.close()


def test_ending_a_users_sessions_releases_each_of_them_and_no_one_elses() -> None:
    released: list[tuple[str, str]] = []
    reg = SessionRegistry(
        per_user=4, total=10, idle_timeout=3600, release=lambda u, s: released.append((u, s))
    )
    reg.admit("mallory", "s1")
    running = reg.admit("mallory", "s2")
    reg.started(running)  # a running statement's session ends too
    reg.admit("alice", "s3")
    assert sorted(reg.end_user("mallory")) == [("mallory", "s1"), ("mallory", "s2")]
    assert sorted(released) == [("mallory", "s1"), ("mallory", "s2")]
    assert reg.count("mallory") == 0 and reg.held("alice", "s3")
