"""The console shows each person only what the policies let them see, in its HTML and in the
JSON behind every page: an analyst (alice), a steward of the sales domain (erin), an admin
(root). Pages are read over HTTP with the session cookie; the JSON with the bearer token."""

from __future__ import annotations

import pytest
from api_testkit import LG
from console_testkit import FORBIDDEN, PAGES, signed_in


def _html_pages(user: str) -> list[str]:
    return [
        *PAGES,
        "/ui/catalog?q=customers",
        "/ui/catalog?q=pii",
        "/ui/catalog/main.sales.customers",
        "/ui/catalog/main.sales.orders",
        "/ui/access?table=main.sales.customers",
        "/ui/access?table=main.sales.orders",
        f"/ui/access?user={user}",
        "/ui/policies?old=HEAD~1&new=HEAD",
        "/ui/audit?denied=on",
        "/ui/audit?table=main.sales.customers",
    ]


def _json_routes(user: str) -> list[str]:
    return [
        f"{LG}/access/tables/main.sales.customers",
        f"{LG}/access/tables/main.sales.orders",
        f"{LG}/access/users/{user}",
        f"{LG}/policy-diff?old=HEAD~1&new=HEAD",
        f"{LG}/audit/records",
        f"{LG}/audit/records?denied=true",
        f"{LG}/audit/summary",
        f"{LG}/tables/main.sales.customers",
        f"{LG}/search?q=pii",
    ]


@pytest.mark.parametrize("user", sorted(FORBIDDEN))
def test_no_page_or_json_shows_what_the_viewer_may_not_see(
    user: str, console_server: str, bearer
) -> None:
    seen: dict[str, str] = {}
    with signed_in(console_server, user) as c:
        for path in _html_pages(user):
            r = c.get(path)
            assert r.status_code == 200, (path, r.status_code)
            assert r.headers["content-type"].startswith("text/html")
            seen[path] = r.text
    for path in _json_routes(user):
        r = bearer(user).get(path)
        assert r.status_code == 200, (path, r.text)
        seen[path] = r.text
    leaks = [
        (path, word)
        for path, text in seen.items()
        for word in FORBIDDEN[user]
        if word.lower() in text.lower()
    ]
    assert leaks == []


def test_the_admin_sees_every_table_reader_filter_and_change(console_server: str, bearer) -> None:
    root = bearer("root")
    with signed_in(console_server, "root") as c:
        html = "".join(c.get(p).text for p in _html_pages("root"))
        html += c.get("/ui/catalog/main.marketing.campaigns").text
    for word in ("main.marketing.campaigns", "salary", "NOT is_test", "analysts-no-ssn"):
        assert word in html, word
    diff = root.get(f"{LG}/policy-diff").json()
    assert diff["scope"] == "all"
    got = {(c["user"], c["table"], c["detail"]) for c in diff["changes"]}
    assert ("alice", "main.marketing.campaigns", "loses SELECT") in got
    assert ("bob", "main.sales.customers", "column phone hidden") in got
    assert (
        "carol",
        "main.sales.orders",
        "row filter emea-only changed: region IN ('EMEA') -> region = 'EMEA'",
    ) in got
    assert root.get(f"{LG}/audit/records").json()["scope"] == "all"


def test_a_steward_sees_every_reader_of_their_domain_with_filter_text(bearer) -> None:
    body = bearer("erin").get(f"{LG}/access/tables/main.sales.orders").json()
    assert body["scope"] == "managers"
    readers = {r["user"]: r for r in body["readers"]}
    assert {"alice", "bob", "carol", "dana", "erin", "root"} <= set(readers)
    assert {(f["id"], f["where"]) for f in readers["carol"]["row_filters"]} == {
        ("emea-only", "region = 'EMEA'"),
        ("no-test-orders", "NOT is_test"),
    }
    person = bearer("erin").get(f"{LG}/access/users/alice").json()
    assert person["scope"] == "domains"
    assert {t["table"] for t in person["tables"]} == {"main.sales.customers", "main.sales.orders"}


def test_an_analyst_sees_only_their_own_access_without_policy_ids(bearer) -> None:
    alice = bearer("alice")
    body = alice.get(f"{LG}/access/tables/main.sales.customers").json()
    assert body["scope"] == "self"
    assert body["readers"] == [
        {
            "user": "alice",
            "privileges": ["select"],
            "columns": ["id", "name", "email", "phone", "country"],
            "masks": [{"column": "email", "mask": "hash"}, {"column": "phone", "mask": "hash"}],
            "row_filter_applies": False,
        }
    ]
    r = alice.get(f"{LG}/access/users/bob")
    assert (r.status_code, r.json()["message"]) == (
        403,
        "you may see only your own access (or that on tables you manage)",
    )


def test_an_analyst_sees_their_own_policy_changes_without_filter_text(bearer) -> None:
    diff = bearer("alice").get(f"{LG}/policy-diff").json()
    assert diff["scope"] == "visible"
    assert [(c["user"], c["table"], c["detail"]) for c in diff["changes"]] == [
        ("alice", "main.sales.orders", "row filter no-test-orders added")
    ]


def test_an_analyst_sees_their_own_audit_lines_on_readable_tables_only(bearer) -> None:
    body = bearer("alice").get(f"{LG}/audit/records", params={"limit": 5000}).json()
    assert body["scope"] == "own"
    assert {r["user"] for r in body["records"]} == {"alice"}
    tables = {r["src"] for r in body["records"] if r["src"]}
    assert "main.marketing.campaigns" not in tables
    refused = [
        r for r in body["records"] if r["src"] == "main.sales.customers" and not r["allowed"]
    ]
    assert refused, "alice's refused SELECT ssn is on her timeline"
    assert all(r["reason"] == "refused" and r["policies"] == [] for r in refused)


def test_a_steward_sees_others_lines_on_their_tables_only(bearer) -> None:
    body = bearer("erin").get(f"{LG}/audit/records", params={"limit": 5000}).json()
    assert body["scope"] == "domains"
    others = {(r["user"], r["src"]) for r in body["records"] if r["user"] != "erin"}
    assert ("alice", "main.sales.customers") in others
    assert {src for _, src in others} <= {"main.sales.customers", "main.sales.orders"}


def test_the_summary_counts_masked_and_clear_reads_of_tagged_columns(bearer) -> None:
    body = bearer("root").get(f"{LG}/audit/summary").json()
    tagged = {t["column"]: t for t in body["tagged_columns"]}
    email = tagged["main.sales.customers.email"]
    assert email["masked"] >= 2 and email["clear"] >= 1  # alice, erin hashed; dana clear
    assert body["chain"]["ok"] is True
    denied = {t["table"]: t["denied"] for t in body["by_table"]}
    assert denied["main.marketing.campaigns"] >= 1


def test_a_hidden_table_page_reads_like_a_missing_one(console_server: str) -> None:
    with signed_in(console_server, "alice") as c:
        hidden = c.get("/ui/catalog/main.marketing.campaigns")
        missing = c.get("/ui/catalog/main.marketing.nothing")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.text.replace("campaigns", "X") == missing.text.replace("nothing", "X")


def test_policy_changes_need_the_policy_directory_in_git(app) -> None:
    """The shared API server's policies are a plain directory: one clear refusal, page too."""
    from api_testkit import token_of
    from starlette.testclient import TestClient

    with TestClient(app, headers={"Authorization": f"Bearer {token_of('root')}"}) as c:
        r = c.get(f"{LG}/policy-diff")
        page = c.get("/ui/policies")
    assert (r.status_code, r.json()) == (
        409,
        {
            "error_code": "INVALID_STATE",
            "message": "the policy directory is not in a git repository",
        },
    )
    assert "the policy directory is not in a git repository" in page.text


def test_mask_ids_are_shown_to_the_tables_managers_only(console_server: str, bearer) -> None:
    """docs/console.md: a non-steward sees the kind of each mask on their columns, not its id."""
    with signed_in(console_server, "carol") as c:
        own = (
            c.get("/ui/catalog/main.sales.customers").text
            + c.get("/ui/access?table=main.sales.customers").text
        )
    assert "hash" in own and "last4" in own
    assert "hide-pii" not in own and "phone-last4" not in own
    detail = bearer("carol").get(f"{LG}/tables/main.sales.customers").json()
    assert {(m["column"], m["kind"], m["policy"]) for m in detail["access"]["masked_columns"]} == {
        ("email", "hash", None),
        ("phone", "last4", None),
    }
    with signed_in(console_server, "erin") as c:
        managed = (
            c.get("/ui/catalog/main.sales.customers").text
            + c.get("/ui/access?table=main.sales.customers").text
        )
    assert "hide-pii" in managed and "phone-last4" in managed
