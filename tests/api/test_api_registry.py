"""The domain registry end to end through the API: domains, products, owners-only changes."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import pytest
from api_testkit import LG, read_audit


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_domains_with_asset_counts(as_user) -> None:
    doms = {d["name"]: d for d in as_user("alice").get(f"{LG}/domains").json()["domains"]}
    assert sorted(doms) == ["hr", "marketing", "sales"]
    assert (
        doms["sales"]["table_count"],
        doms["hr"]["table_count"],
        doms["marketing"]["table_count"],
    ) == (2, 1, 0)
    assert doms["hr"]["owners"] == ["group:hr-owners"] and doms["hr"]["schemas"] == ["main.hr"]
    assert doms["hr"]["products_by_stage"]["active"] >= 1
    assert not any(d["is_owner"] for d in doms.values())
    mine = as_user("mallory").get(f"{LG}/domains/marketing").json()
    assert mine["is_owner"] is True and mine["table_count"] == 1
    assert as_user("alice").get(f"{LG}/domains/nope").status_code == 404


def test_domain_tables_paginate_and_hide(as_user) -> None:
    alice = as_user("alice")
    first = alice.get(f"{LG}/domains/sales/tables", params={"max_results": 1}).json()
    second = alice.get(
        f"{LG}/domains/sales/tables",
        params={"max_results": 1, "page_token": first["next_page_token"]},
    ).json()
    assert [t["full_name"] for t in first["tables"] + second["tables"]] == [
        "main.sales.customers",
        "main.sales.orders",
    ]
    assert second.get("next_page_token") is None
    assert first["tables"][0]["tags"] == ["customer-data"]
    assert alice.get(f"{LG}/domains/marketing/tables").json()["tables"] == []


def test_yaml_product_is_listed_but_owned_by_its_file(as_user) -> None:
    p = as_user("alice").get(f"{LG}/products/headcount").json()
    assert (p["domain"], p["stage"], p["source"], p["classification"]) == (
        "hr",
        "active",
        "yaml:hr.yaml",
        "confidential",
    )
    assert p["output_tables"] == ["main.hr.employees"] and p["editable"] is False
    assert p["freshness_status"]["status"] == "fresh"
    # hr owners may not change it through the API: git review owns it
    r = as_user("harriet").patch(f"{LG}/products/headcount", json={"stage": "deprecated"})
    assert r.status_code == 409 and "hr.yaml" in r.json()["message"]
    # mallory cannot read employees: the product is listed without that table name
    hidden = as_user("mallory").get(f"{LG}/products/headcount").json()
    assert hidden["output_tables"] == [] and hidden["freshness_status"]["tables"] == []
    listed = as_user("bob").get(f"{LG}/domains/hr/products").json()["products"]
    assert [x["name"] for x in listed] == ["headcount"]


def test_only_domain_owners_register_and_change_products(as_user, api_lakegate) -> None:
    name = _name("orders-daily")
    spec = {
        "name": name,
        "domain": "sales",
        "description": "Daily orders",
        "output_tables": ["main.sales.orders"],
        "tags": ["finance"],
        "classification": "internal",
        "freshness": "3650d",
    }
    denied = as_user("bob").post(f"{LG}/products", json=spec)
    assert denied.status_code == 403 and denied.json()["error_code"] == "PERMISSION_DENIED"
    line = [ln for ln in read_audit(api_lakegate) if ln.get("dst") == f"product:{name}"][-1]
    assert (line["cmd"], line["allowed"], line["ugi"]) == (
        "createProduct",
        "false",
        "bob (auth:TOKEN)",
    )
    assert as_user("bob").get(f"{LG}/products/{name}").status_code == 404

    erin = as_user("erin")
    created = erin.post(f"{LG}/products", json=spec)
    assert created.status_code == 201, created.text
    assert created.json()["stage"] == "draft" and created.json()["editable"] is True
    assert created.json()["created_by"] == "erin"
    assert erin.post(f"{LG}/products", json=spec).status_code == 409

    assert (
        as_user("bob").patch(f"{LG}/products/{name}", json={"stage": "active"}).status_code == 403
    )
    assert as_user("mallory").post(f"{LG}/products/{name}/retire").status_code == 403
    active = erin.patch(f"{LG}/products/{name}", json={"stage": "active", "classification": None})
    assert active.status_code == 200
    assert (active.json()["stage"], active.json()["classification"]) == ("active", None)
    assert active.json()["tags"] == ["finance"]  # untouched fields stay
    back = erin.patch(f"{LG}/products/{name}", json={"stage": "draft"})
    assert back.status_code == 409
    assert erin.patch(f"{LG}/products/{name}", json={"stage": "deprecated"}).status_code == 200
    retired = erin.post(f"{LG}/products/{name}/retire")
    assert retired.status_code == 200 and retired.json()["stage"] == "retired"
    assert erin.patch(f"{LG}/products/{name}", json={"stage": "active"}).status_code == 409
    table = as_user("alice").get(f"{LG}/tables/main.sales.orders").json()
    assert name not in table["products"]  # retired products publish nothing
    ok = [
        ln
        for ln in read_audit(api_lakegate)
        if ln.get("dst") == f"product:{name}"
        and ln["allowed"] == "true"
        and ln.get("phase") != "intent"
    ]
    assert [ln["cmd"] for ln in ok] == [
        "createProduct",
        "createProduct",
        "updateProduct",
        "updateProduct",
        "updateProduct",
        "retireProduct",
        "updateProduct",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"output_tables": ["main.hr.employees"]}, "not in a schema of domain 'sales'"),
        ({"domain": "nowhere"}, "not defined"),
        ({"freshness": "0h"}, "duration"),
        ({"tags": ["Bad Tag"]}, "tags"),
        ({"stage": "live"}, "stage"),
        ({"owner": "me"}, "owner"),
    ],
)
def test_invalid_products_are_400(as_user, change: dict, message: str) -> None:
    spec = {"name": _name("bad"), "domain": "sales", **change}
    r = as_user("erin").post(f"{LG}/products", json=spec)
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_ARGUMENT" and message in r.json()["message"]


def test_freshness_objective_checked_against_commit_history(as_user) -> None:
    erin = as_user("erin")
    history = erin.get(f"{LG}/tables/main.sales.orders/history").json()["commits"]
    last = datetime.fromisoformat(history[0]["timestamp"].replace("Z", "+00:00")).timestamp()
    time.sleep(max(0.0, last + 1.2 - time.time()))  # make the newest commit > 1 s old
    stale = erin.post(
        f"{LG}/products",
        json={
            "name": _name("stale"),
            "domain": "sales",
            "output_tables": ["main.sales.orders"],
            "freshness": "1s",
        },
    ).json()["freshness_status"]
    assert stale["status"] == "stale" and stale["tables"][0]["fresh"] is False
    assert stale["tables"][0]["age_seconds"] >= 1
    fresh = erin.post(
        f"{LG}/products",
        json={
            "name": _name("fresh"),
            "domain": "sales",
            "output_tables": ["main.sales.orders", "main.sales.customers"],
            "freshness": "3650d",
        },
    ).json()["freshness_status"]
    assert fresh["status"] == "fresh" and len(fresh["tables"]) == 2
    unknown = erin.post(
        f"{LG}/products",
        json={
            "name": _name("later"),
            "domain": "sales",
            "output_tables": ["main.sales.not_yet"],
            "freshness": "1d",
        },
    ).json()["freshness_status"]
    assert unknown["status"] == "unknown"


def test_yaml_products_hot_reload_and_survive_broken_files(as_user, products_dir, app) -> None:
    """A changed product directory is picked up once the reload interval has passed (here:
    an interval of 0, instead of sleeping past the real one); a broken file keeps the last
    good products."""
    registry = app.state.service.registry
    name = _name("campaign-kpis")
    f = products_dir / f"{name}.yaml"
    f.write_text(
        f"products:\n  - name: {name}\n    domain: marketing\n"
        "    output_tables: [main.marketing.campaigns]\n    stage: active\n"
    )
    try:
        registry.sync_yaml(min_interval=0)
        got = as_user("mallory").get(f"{LG}/products/{name}").json()
        assert got["source"] == f"yaml:{name}.yaml"
        assert got["output_tables"] == ["main.marketing.campaigns"]
        assert as_user("bob").get(f"{LG}/products/{name}").json()["output_tables"] == []
        f.write_text("products: [unclosed\n")
        registry.sync_yaml(min_interval=0)
        assert registry.problems
        assert as_user("mallory").get(f"{LG}/products/{name}").status_code == 200
    finally:
        f.unlink()
    registry.sync_yaml(min_interval=0)
    assert as_user("mallory").get(f"{LG}/products/{name}").status_code == 404


def test_products_live_beside_the_policies_not_in_them(api_lakegate) -> None:
    from governance.config import Config
    from governance.policy.loader import policy_files

    assert Config.default().products_dir == Config.default().policies.parent / "products"
    assert not any("products" in p.parts for p in policy_files(api_lakegate.config.policies))


def test_a_product_change_is_on_record_before_it_happens(as_user, api_lakegate) -> None:
    """Audit before effect: each registry change's intent line (phase=intent, not yet
    succeeded) precedes its outcome line of the same queryId; a denial changes nothing and
    is one line."""
    name = _name("intent")
    spec = {"name": name, "domain": "sales", "output_tables": ["main.sales.orders"]}
    assert as_user("bob").post(f"{LG}/products", json=spec).status_code == 403
    assert as_user("erin").post(f"{LG}/products", json=spec).status_code == 201
    assert as_user("erin").post(f"{LG}/products/{name}/retire").status_code == 200
    lines = [ln for ln in read_audit(api_lakegate) if ln.get("dst") == f"product:{name}"]
    got = [(ln["ugi"].split()[0], ln["cmd"], ln.get("phase"), ln["succeeded"]) for ln in lines]
    assert got == [
        ("bob", "createProduct", None, "false"),
        ("erin", "createProduct", "intent", "false"),
        ("erin", "createProduct", "outcome", "true"),
        ("erin", "retireProduct", "intent", "false"),
        ("erin", "retireProduct", "outcome", "true"),
    ]
    assert lines[1]["queryId"] == lines[2]["queryId"] != lines[3]["queryId"] == lines[4]["queryId"]
    from audit.query import query

    pending = query(api_lakegate.config.audit, pending=True).records
    assert not [r for r in pending if r.query_id in {lines[1]["queryId"], lines[3]["queryId"]}]


def test_a_product_change_whose_intent_cannot_be_written_does_not_happen(
    as_user, api_lakegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: no intent line, no change (503), and the request's own line says why."""
    from audit import AuditWriteError

    log = api_lakegate.audit
    write = log.write

    def no_intents(events):
        if any(e.phase == "intent" for e in events):
            raise AuditWriteError("disk full (test)")
        return write(events)

    monkeypatch.setattr(log, "write", no_intents)
    name = _name("unrecorded")
    spec = {"name": name, "domain": "sales", "output_tables": ["main.sales.orders"]}
    r = as_user("erin").post(f"{LG}/products", json=spec)
    assert r.status_code == 503 and "audit log unavailable" in r.json()["message"]
    monkeypatch.undo()
    assert as_user("erin").get(f"{LG}/products/{name}").status_code == 404
    line = [ln for ln in read_audit(api_lakegate) if ln.get("dst") == f"product:{name}"][-1]
    assert (line["cmd"], line["succeeded"], line.get("phase")) == ("createProduct", "false", None)
