"""What a SCIM push changes in governance (issue 37, item 3), end to end on a live server:
a provider group mapped to a policy group changes what its members read through the REST
statements API, and a deactivated user's next request is refused whatever token it shows,
on record in the audit log."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.api_testkit import LG, read_audit, token_of
from tests.identity.scim_kit import GROUP_SCHEMA, new_user, patch, scim_client, scim_server

ORDERS = "SELECT id FROM main.sales.orders ORDER BY id"


@pytest.fixture(scope="module")
def live(lakehouse, spark, tmp_path_factory) -> Iterator[tuple[object, str]]:
    with scim_server(lakehouse, spark, tmp_path_factory.mktemp("scim-gov")) as it:
        yield it


def _sql(url: str, user: str, statement: str) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=120) as c:
        return c.post(
            f"{LG}/statements",
            json={"statement": statement},
            headers={"Authorization": f"Bearer {token_of(user)}"},
        )


def test_a_scim_group_mapped_to_a_policy_group_changes_what_its_member_reads(live) -> None:
    url = live[1]
    assert _sql(url, "mallory", ORDERS).status_code == 403  # not an analyst by the policies
    with scim_client(url) as scim:
        mallory = new_user(scim, "Mallory")
        r = scim.post(
            "/Groups",
            json={
                "schemas": [GROUP_SCHEMA],
                "displayName": "Okta-Analysts",  # mapped to `analysts` (identity.scim.groups)
                "members": [{"value": mallory["id"]}],
            },
        )
        assert r.status_code == 201, r.text
        allowed = _sql(url, "mallory", ORDERS)
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["rows"]  # the analysts' grant (its row filters apply)
        group = r.json()
        r = patch(
            scim,
            f"/Groups/{group['id']}",
            {"op": "remove", "path": f'members[value eq "{mallory["id"]}"]'},
        )
        assert r.status_code == 200, r.text
        assert _sql(url, "mallory", ORDERS).status_code == 403  # left the group: at once


def test_a_deactivated_user_is_refused_at_its_next_request_and_it_is_audited(live) -> None:
    lg, url = live
    assert _sql(url, "bob", "SELECT 1 AS one").status_code == 200
    ended: list[str] = []
    service = _service(lg)
    service.on_deprovision.append(ended.append)
    try:
        with scim_client(url) as scim:
            bob = new_user(scim, "bob")
            r = patch(
                scim, f"/Users/{bob['id']}", {"op": "replace", "path": "active", "value": False}
            )
            assert r.status_code == 200 and r.json()["active"] is False
        refused = _sql(url, "bob", "SELECT 1 AS one")  # bob's own Lakegate token
        assert refused.status_code == 401
        assert refused.json()["message"] == "user deprovisioned by the identity provider"
        assert ended == ["bob"]  # the hook that ends console sessions was called
        line = read_audit(lg)[-1]  # on record as bob: his token was valid, bob is refused
        assert line["ugi"].startswith("bob ") and line["cmd"] == "executeStatement"
        assert line["allowed"] == "false" and line["reason"].startswith("user deprovisioned")
        with scim_client(url) as scim:  # reactivated: accepted again
            r = patch(
                scim, f"/Users/{bob['id']}", {"op": "replace", "path": "active", "value": True}
            )
            assert r.status_code == 200
        assert _sql(url, "bob", "SELECT 1 AS one").status_code == 200
    finally:
        service.on_deprovision.remove(ended.append)


def test_a_deleted_user_stays_refused(live) -> None:
    url = live[1]
    with scim_client(url) as scim:
        dana = new_user(scim, "dana")
        assert _sql(url, "dana", "SELECT 1 AS one").status_code == 200
        assert scim.delete(f"/Users/{dana['id']}").status_code == 204
    assert _sql(url, "dana", "SELECT 1 AS one").status_code == 401


def _service(lg):
    """The Service of the served app: the directory's subscriber that is a bound
    method of an object with `on_deprovision` (the app is made inside scim_kit)."""
    from api.directory import directory_of

    for callback in directory_of(lg)._subscribers:
        owner = getattr(callback, "__self__", None)
        if owner is not None and hasattr(owner, "on_deprovision"):
            return owner
    raise AssertionError("no Service subscribed to the directory")
