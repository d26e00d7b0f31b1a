"""SCIM 2.0 provisioning at /scim/v2 (issue 37, item 3): each RFC 7643/7644 behaviour an
identity provider relies on, one test each, against a live server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.api_testkit import read_audit, token_of
from tests.identity.scim_kit import (
    ERROR_SCHEMA,
    GROUP_SCHEMA,
    SCIM_MEDIA,
    USER_SCHEMA,
    new_user,
    patch,
    scim_client,
    scim_server,
)


@pytest.fixture(scope="module")
def live(lakehouse, spark, tmp_path_factory) -> Iterator[tuple[object, str]]:
    with scim_server(lakehouse, spark, tmp_path_factory.mktemp("scim")) as it:
        yield it


@pytest.fixture(scope="module")
def scim(live) -> Iterator[httpx.Client]:
    with scim_client(live[1]) as c:
        yield c


def _error(r: httpx.Response, status: int, scim_type: str | None = None) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == SCIM_MEDIA
    body = r.json()
    assert body["schemas"] == [ERROR_SCHEMA] and body["status"] == str(status)
    assert body.get("scimType") == scim_type
    assert "\n" not in body["detail"]
    return body["detail"]


# discovery ------------------------------------------------------------------------------


def test_service_provider_config_says_patch_filter_and_etag_are_supported(scim) -> None:
    r = scim.get("/ServiceProviderConfig")
    assert r.status_code == 200 and r.headers["content-type"] == SCIM_MEDIA
    body = r.json()
    assert body["patch"]["supported"] and body["filter"] == {"supported": True, "maxResults": 200}
    assert body["bulk"]["supported"] is False and body["etag"]["supported"] is True
    types = {t["id"] for t in scim.get("/ResourceTypes").json()["Resources"]}
    assert types == {"User", "Group"}
    schemas = {s["id"] for s in scim.get("/Schemas").json()["Resources"]}
    assert schemas == {USER_SCHEMA, GROUP_SCHEMA}
    assert scim.get(f"/Schemas/{USER_SCHEMA}").json()["name"] == "User"


# users ----------------------------------------------------------------------------------


def test_create_user_answers_201_with_location_etag_and_canonical_user_name(scim) -> None:
    r = scim.post(
        "/Users",
        json={
            "schemas": [USER_SCHEMA],
            "userName": "Create.Me@Example.org",
            "externalId": "okta-00u1",
            "displayName": "Create Me",
            "emails": [{"value": "create.me@example.org", "primary": True, "type": "work"}],
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["userName"] == "create.me@example.org" and body["active"] is True
    assert body["meta"]["resourceType"] == "User" and r.headers["etag"] == body["meta"]["version"]
    assert r.headers["location"] == body["meta"]["location"]
    assert r.headers["location"].endswith(f"/scim/v2/Users/{body['id']}")
    assert body["emails"] == [{"value": "create.me@example.org", "type": "work", "primary": True}]


def test_duplicate_user_name_is_409_uniqueness_whatever_its_case(scim) -> None:
    new_user(scim, "dup-user")
    r = scim.post("/Users", json={"schemas": [USER_SCHEMA], "userName": "DUP-User"})
    assert "dup-user" in _error(r, 409, "uniqueness")


def test_invalid_user_name_is_400_invalid_value(scim) -> None:
    for name in ("\u212aarl", "a b", "x" * 129, "caf\u00e9"):
        r = scim.post("/Users", json={"schemas": [USER_SCHEMA], "userName": name})
        detail = _error(r, 400, "invalidValue")
        assert "invalid user name" in detail and name not in detail
    r = scim.post("/Users", json={"schemas": [USER_SCHEMA]})
    _error(r, 400, "invalidValue")  # userName is required


def test_get_user_by_id_and_404_for_an_unknown_id(scim) -> None:
    made = new_user(scim, "get-me")
    r = scim.get(f"/Users/{made['id']}")
    assert r.status_code == 200 and r.json()["userName"] == "get-me"
    _error(scim.get("/Users/00000000-0000-0000-0000-000000000000"), 404)
    _error(scim.get("/Users/not-an-id%09x"), 404)


def test_a_password_is_never_kept_and_other_attributes_come_back(scim, live) -> None:
    made = new_user(
        scim,
        "pw-user",
        password="s3cret-Pa55",
        name={"givenName": "Pat", "familyName": "Word"},
        title="Engineer",
    )
    assert "password" not in made
    got = scim.get(f"/Users/{made['id']}").json()
    assert got["name"] == {"givenName": "Pat", "familyName": "Word"}
    assert got["title"] == "Engineer" and "password" not in got
    from catalog.schema import directory_users

    with live[0].catalog.store.read() as conn:
        rows = conn.execute(directory_users.select()).mappings().all()
    assert not any("s3cret-Pa55" in str(dict(r)) for r in rows)


def test_list_users_with_filters(scim) -> None:
    new_user(
        scim,
        "flt-ann",
        externalId="ext-ann",
        displayName="Ann Filter",
        emails=[{"value": "ann@corp.example"}],
    )
    new_user(scim, "flt-bea", externalId="ext-bea", displayName="Bea Filter", active=False)
    new_user(scim, "flt-cid", emails=[{"value": "cid@other.example"}])

    def names(flt: str) -> set[str]:
        r = scim.get("/Users", params={"filter": flt})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["totalResults"] == len(body.get("Resources", []))
        return {u["userName"] for u in body.get("Resources", [])}

    assert names('userName eq "FLT-Ann"') == {"flt-ann"}
    assert names('userName eq "nobody-here"') == set()
    assert names('externalId eq "ext-bea"') == {"flt-bea"}
    assert names('userName sw "flt-"') == {"flt-ann", "flt-bea", "flt-cid"}
    assert names('displayName co "Filter" and active eq true') == {"flt-ann"}
    assert names('active eq false and userName sw "flt-"') == {"flt-bea"}
    assert names('emails.value co "corp.example"') == {"flt-ann"}
    assert names('emails[value ew "other.example"]') == {"flt-cid"}
    assert names('userName sw "flt-" and externalId pr') == {"flt-ann", "flt-bea"}
    assert names('userName eq "flt-ann" or userName eq "flt-cid"') == {"flt-ann", "flt-cid"}
    assert names('userName sw "flt-" and not (displayName pr)') == {"flt-cid"}


def test_list_users_pages_with_start_index_and_count(scim) -> None:
    for i in range(5):
        new_user(scim, f"page-{i}")
    flt = {"filter": 'userName sw "page-"'}
    first = scim.get("/Users", params={**flt, "startIndex": 1, "count": 2}).json()
    second = scim.get("/Users", params={**flt, "startIndex": 3, "count": 2}).json()
    last = scim.get("/Users", params={**flt, "startIndex": 5, "count": 2}).json()
    assert (first["totalResults"], first["itemsPerPage"], first["startIndex"]) == (5, 2, 1)
    seen = [u["userName"] for p in (first, second, last) for u in p["Resources"]]
    assert seen == [f"page-{i}" for i in range(5)]  # oldest first, none twice
    none = scim.get("/Users", params={**flt, "count": 0}).json()
    assert none["totalResults"] == 5 and none["itemsPerPage"] == 0
    big = scim.get("/Users", params={"count": 100000}).json()
    assert big["itemsPerPage"] <= 200
    _error(scim.get("/Users", params={"count": "ten"}), 400, "invalidValue")


@pytest.mark.parametrize(
    "flt",
    [
        "userName eq",  # syntax
        'nickName eq "x"',  # not an attribute Lakegate answers
        "title pr",
        'userName gt "a"',  # operator not supported
        'urn:ietf:params:scim:schemas:core:2.0:User:userName eq "a"',
        'name.familyName eq "x"',
        "x" * 2000,
    ],
)
def test_an_unsupported_or_bad_filter_is_400_invalid_filter_never_a_full_listing(
    scim, flt: str
) -> None:
    _error(scim.get("/Users", params={"filter": flt}), 400, "invalidFilter")


def test_put_replaces_the_user_and_moves_the_etag(scim) -> None:
    made = new_user(scim, "put-me", displayName="Before", externalId="e-1")
    r = scim.put(
        f"/Users/{made['id']}",
        json={"schemas": [USER_SCHEMA], "userName": "put-me", "displayName": "After"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["displayName"] == "After" and "externalId" not in body
    assert body["meta"]["version"] != made["meta"]["version"]
    stale = scim.put(
        f"/Users/{made['id']}",
        json={"schemas": [USER_SCHEMA], "userName": "put-me"},
        headers={"If-Match": made["meta"]["version"]},
    )
    _error(stale, 412)


def test_patch_user_add_replace_remove(scim) -> None:
    made = new_user(scim, "patch-me", displayName="P")
    uid = made["id"]
    r = patch(
        scim,
        f"/Users/{uid}",
        {"op": "add", "path": "emails", "value": [{"value": "p@example.org", "type": "work"}]},
        {"op": "replace", "path": "displayName", "value": "Patched"},
        {"op": "Replace", "value": {"externalId": "okta-p"}},  # Entra's capitalised op
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["displayName"] == "Patched" and body["externalId"] == "okta-p"
    assert body["emails"] == [{"value": "p@example.org", "type": "work"}]
    r = patch(scim, f"/Users/{uid}", {"op": "remove", "path": "displayName"})
    assert "displayName" not in r.json()
    r = patch(scim, f"/Users/{uid}", {"op": "replace", "path": "id", "value": "mine"})
    _error(r, 400, "mutability")
    r = patch(scim, f"/Users/{uid}", {"op": "replace", "path": "userName", "value": "a b"})
    _error(r, 400, "invalidValue")


def test_patch_active_false_deactivates_the_user(scim, live) -> None:
    made = new_user(scim, "deact-me")
    r = patch(scim, f"/Users/{made['id']}", {"op": "replace", "path": "active", "value": False})
    assert r.status_code == 200 and r.json()["active"] is False
    from api.directory import directory_of

    assert directory_of(live[0]).deprovisioned("deact-me")


def test_delete_user_is_204_then_404_and_stays_deprovisioned(scim, live) -> None:
    from api.directory import directory_of

    made = new_user(scim, "delete-me")
    assert scim.delete(f"/Users/{made['id']}").status_code == 204
    _error(scim.get(f"/Users/{made['id']}"), 404)
    _error(scim.delete(f"/Users/{made['id']}"), 404)
    assert directory_of(live[0]).deprovisioned("delete-me")  # a tombstone
    assert (
        scim.get("/Users", params={"filter": 'userName eq "delete-me"'}).json()["totalResults"] == 0
    )
    again = new_user(scim, "delete-me")  # provisioned again: its tombstone goes
    assert again["id"] != made["id"] and not directory_of(live[0]).deprovisioned("delete-me")


# groups ---------------------------------------------------------------------------------


def test_group_create_get_list_and_duplicate(scim) -> None:
    u = new_user(scim, "grp-member")
    r = scim.post(
        "/Groups",
        json={
            "schemas": [GROUP_SCHEMA],
            "displayName": "Grp One",
            "externalId": "g-1",
            "members": [{"value": u["id"]}],
        },
    )
    assert r.status_code == 201, r.text
    g = r.json()
    assert [(m["value"], m["display"]) for m in g["members"]] == [(u["id"], "grp-member")]
    assert scim.get(f"/Groups/{g['id']}").json()["displayName"] == "Grp One"
    listed = scim.get(
        "/Groups", params={"filter": 'displayName eq "Grp One"', "excludedAttributes": "members"}
    ).json()
    assert [x["id"] for x in listed["Resources"]] == [g["id"]]
    assert "members" not in listed["Resources"][0]
    member_of = scim.get("/Groups", params={"filter": f'members[value eq "{u["id"]}"]'}).json()
    assert [x["id"] for x in member_of["Resources"]] == [g["id"]]
    dup = scim.post("/Groups", json={"schemas": [GROUP_SCHEMA], "displayName": "Grp One"})
    _error(dup, 409, "uniqueness")
    unknown = scim.post(
        "/Groups",
        json={"schemas": [GROUP_SCHEMA], "displayName": "Grp Two", "members": [{"value": "nope"}]},
    )
    _error(unknown, 400, "invalidValue")


def test_patch_group_members_add_and_remove_by_value_path(scim) -> None:
    a, b, c = (new_user(scim, f"pm-{x}") for x in "abc")
    g = scim.post(
        "/Groups",
        json={
            "schemas": [GROUP_SCHEMA],
            "displayName": "Patch Grp",
            "members": [{"value": a["id"]}],
        },
    ).json()
    r = patch(
        scim,
        f"/Groups/{g['id']}",
        {"op": "add", "path": "members", "value": [{"value": b["id"]}, {"value": c["id"]}]},
    )
    assert r.status_code == 200, r.text
    assert {m["display"] for m in r.json()["members"]} == {"pm-a", "pm-b", "pm-c"}
    r = patch(
        scim, f"/Groups/{g['id']}", {"op": "remove", "path": f'members[value eq "{a["id"]}"]'}
    )
    assert {m["display"] for m in r.json()["members"]} == {"pm-b", "pm-c"}
    r = patch(
        scim, f"/Groups/{g['id']}", {"op": "replace", "path": "displayName", "value": "Patch Grp 2"}
    )
    assert r.json()["displayName"] == "Patch Grp 2"
    r = patch(scim, f"/Groups/{g['id']}", {"op": "remove", "path": "members"})
    assert "members" not in r.json()


def test_entra_style_patches_remove_members_by_value_and_make_a_missing_email(scim) -> None:
    a, b = new_user(scim, "entra-a"), new_user(scim, "entra-b")
    g = scim.post(
        "/Groups",
        json={
            "schemas": [GROUP_SCHEMA],
            "displayName": "Entra Grp",
            "members": [{"value": a["id"]}, {"value": b["id"]}],
        },
    ).json()
    r = patch(
        scim,
        f"/Groups/{g['id']}",
        {"op": "Remove", "path": "members", "value": [{"value": a["id"]}]},
    )
    assert r.status_code == 200, r.text
    assert [m["display"] for m in r.json()["members"]] == ["entra-b"]
    r = patch(
        scim,
        f"/Users/{a['id']}",
        {"op": "Replace", "path": 'emails[type eq "work"].value', "value": "a@corp.example"},
        {"op": "Replace", "path": "active", "value": "False"},  # Entra's string boolean
    )
    assert r.status_code == 200, r.text
    assert r.json()["emails"] == [{"value": "a@corp.example", "type": "work"}]
    assert r.json()["active"] is False


def test_put_and_delete_group(scim) -> None:
    a = new_user(scim, "pg-a")
    g = scim.post("/Groups", json={"schemas": [GROUP_SCHEMA], "displayName": "Put Grp"}).json()
    r = scim.put(
        f"/Groups/{g['id']}",
        json={"schemas": [GROUP_SCHEMA], "displayName": "Put Grp", "members": [{"value": a["id"]}]},
    )
    assert r.status_code == 200 and [m["value"] for m in r.json()["members"]] == [a["id"]]
    assert scim.delete(f"/Groups/{g['id']}").status_code == 204
    _error(scim.get(f"/Groups/{g['id']}"), 404)


# the SCIM client's token, and only it ---------------------------------------------------


def test_a_user_token_is_refused_on_scim(live) -> None:
    with scim_client(live[1], token_of("root")) as c:
        detail = _error(c.get("/Users"), 401)
        assert "SCIM client token" in detail
        assert c.get("/Users").headers["www-authenticate"].startswith("Bearer")
    with httpx.Client(base_url=f"{live[1]}/scim/v2") as anonymous:
        _error(anonymous.get("/ServiceProviderConfig"), 401)


def test_the_scim_token_is_no_user_token(live) -> None:
    from tests.identity.scim_kit import SCIM_TOKEN

    with httpx.Client(base_url=live[1], headers={"Authorization": f"Bearer {SCIM_TOKEN}"}) as c:
        assert c.get("/api/2.1/unity-catalog/catalogs").status_code == 401


def test_bounded_body_and_json_only(scim) -> None:
    big = {"schemas": [USER_SCHEMA], "userName": "big", "displayName": "x" * (1 << 20)}
    _error(scim.post("/Users", json=big), 413)
    _error(scim.post("/Users", content=b"{not json"), 400, "invalidSyntax")
    _error(scim.post("/Users", json=["a"]), 400, "invalidSyntax")
    _error(
        scim.post(
            "/Users", json={"schemas": [USER_SCHEMA], "userName": "long", "displayName": "y" * 300}
        ),
        400,
        "invalidValue",
    )


def test_every_scim_call_is_audited_as_the_scim_client(scim, live) -> None:
    made = new_user(scim, "audited-one")
    patch(scim, f"/Users/{made['id']}", {"op": "replace", "path": "active", "value": False})
    with scim_client(live[1], "wrong-token") as c:
        c.get("/Users")
    lines = read_audit(live[0])
    create = [
        x
        for x in lines
        if x.get("cmd") == "scimCreateUser" and x.get("resource") == "scim:user:audited-one"
    ]
    assert create and create[-1]["ugi"].startswith("scim ") and create[-1]["proto"] == "rest"
    deact = [
        x
        for x in lines
        if x.get("cmd") == "scimPatchUser" and x.get("resource") == "scim:user:audited-one"
    ]
    assert deact and deact[-1]["succeeded"] == "true"
    refused = [x for x in lines if x.get("cmd") == "scimListUsers" and x["allowed"] == "false"]
    assert refused and refused[-1]["ugi"].startswith("anonymous")


def test_a_scim_change_is_on_record_before_it_happens(scim, live) -> None:
    """Audit before effect: a provisioning change's intent line (phase=intent, not yet
    succeeded) precedes its outcome of the same queryId; reads are one line."""
    made = new_user(scim, "intent-one")
    patch(scim, f"/Users/{made['id']}", {"op": "replace", "path": "displayName", "value": "I"})
    assert scim.delete(f"/Users/{made['id']}").status_code == 204
    assert scim.get(f"/Users/{made['id']}").status_code == 404
    lines = [x for x in read_audit(live[0]) if x.get("cmd", "").startswith("scim")]
    mine = lines[-7:]
    got = [(x["cmd"], x.get("phase"), x["succeeded"]) for x in mine]
    assert got == [
        ("scimCreateUser", "intent", "false"),
        ("scimCreateUser", "outcome", "true"),
        ("scimPatchUser", "intent", "false"),
        ("scimPatchUser", "outcome", "true"),
        ("scimDeleteUser", "intent", "false"),
        ("scimDeleteUser", "outcome", "true"),
        ("scimGetUser", "null", "false"),
    ]
    for intent, outcome in (mine[0:2], mine[2:4], mine[4:6]):
        assert intent["queryId"] == outcome["queryId"] and intent["allowed"] == "true"
    assert mine[1]["resource"] == mine[5]["resource"] == "scim:user:intent-one"


def test_a_scim_change_whose_intent_cannot_be_written_does_not_happen(
    scim, live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: no intent line, no change, a 503 in SCIM's error shape."""
    from audit import AuditWriteError

    log = live[0].audit
    write = log.write

    def no_intents(events):
        if any(e.phase == "intent" for e in events):
            raise AuditWriteError("disk full (test)")
        return write(events)

    monkeypatch.setattr(log, "write", no_intents)
    r = scim.post("/Users", json={"schemas": [USER_SCHEMA], "userName": "never-made"})
    monkeypatch.undo()
    assert "audit log unavailable" in _error(r, 503)
    found = scim.get("/Users", params={"filter": 'userName eq "never-made"'}).json()
    assert found["totalResults"] == 0


# an outside conformance check ------------------------------------------------------------

#: what scim2-tester 0.5.2 reports that Lakegate does on purpose (docs/identity.md): no
#: server-root `/.search`; `remove active` leaves a user active (only `active: false`
#: deactivates); a member's `display` is the directory's user name, not what was sent
KNOWN = {
    ("search_with_attributes", "no such SCIM endpoint"),
    ("check_remove_attribute", "did not remove attribute 'active'"),
    ("check_add_attribute", "unexpected value for 'members'"),
    ("check_replace_attribute", "unexpected value for 'members'"),
}


class _HttpxScimClient:
    """scim2-client's network engine over httpx (its own needs the httpx2 package)."""

    @staticmethod
    def make(http: httpx.Client):
        from scim2_client.client import BaseSyncSCIMClient
        from scim2_client.errors import RequestNetworkException

        class Client(BaseSyncSCIMClient):
            def _stays_under_base_url(self, endpoint: str) -> bool:
                base, url = http.base_url, http.build_request("GET", endpoint).url
                same = (url.scheme, url.host, url.port) == (base.scheme, base.host, base.port)
                return same and url.raw_path.startswith(base.raw_path)

            def _parse_json(self, response):
                return response.json()

            def request(self, method: str, url: str, **kwargs):
                try:
                    return http.request(method, url, **kwargs)
                except httpx.RequestError as exc:
                    raise RequestNetworkException() from exc

        return Client()


def test_scim2_tester_finds_nothing_but_the_documented_choices(live) -> None:
    """scim2-tester (the python-scim project's conformance checker, through scim2-client)
    against the live endpoint: discovery, then create, read, replace, PATCH every attribute
    and delete of each resource type."""
    from scim2_tester import Status, check_server

    from tests.identity.scim_kit import SCIM_TOKEN

    with httpx.Client(
        base_url=f"{live[1]}/scim/v2", headers={"Authorization": f"Bearer {SCIM_TOKEN}"}
    ) as http:
        results = check_server(_HttpxScimClient.make(http))
    passed = [r for r in results if r.status == Status.SUCCESS]
    bad = [
        (r.title, r.reason)
        for r in results
        if r.status in (Status.ERROR, Status.CRITICAL)
        and not any(r.title == t and k in (r.reason or "") for t, k in KNOWN)
    ]
    assert not bad, bad
    assert len(passed) >= 100, len(passed)  # 106 of 111 with scim2-tester 0.5.2
