"""Helpers shared by the REST API tests (fixtures are in conftest.py)."""

from __future__ import annotations

import hashlib

import httpx

PERSONAS = ("alice", "bob", "carol", "dana", "erin", "frank", "harriet", "mallory", "root")
SECRET = "test-secret-0123456789abcdef"
PRODUCTS_YAML = """\
domain: hr
products:
  - name: headcount
    description: Employees by department, for planning
    output_tables: [main.hr.employees]
    stage: active
    tags: [planning]
    classification: confidential
    freshness: 3650d
"""


def token_of(user: str) -> str:
    return f"tok-{user}-{hashlib.sha256(user.encode()).hexdigest()[:12]}"


def read_audit(lg) -> list[dict[str, str]]:
    """The audit lines as key -> value dicts (values unescaped enough for tests)."""
    out = []
    for line in (lg.config.audit / "audit.log").read_text().splitlines():
        _, _, rest = line.partition(": ")
        out.append(dict(f.split("=", 1) for f in rest.split("\t") if "=" in f))
    return out


UC = "/api/2.1/unity-catalog"
LG = "/api/lakegate/v1"


def uc_tables(client: httpx.Client, catalog: str, schema: str) -> dict[str, list[str]]:
    """Full table name -> listed column names, following every page."""
    out: dict[str, list[str]] = {}
    token = None
    while True:
        params = {"catalog_name": catalog, "schema_name": schema, "max_results": 1}
        if token:
            params["page_token"] = token
        r = client.get(f"{UC}/tables", params=params)
        if r.status_code == 404:
            return out
        r.raise_for_status()
        body = r.json()
        for t in body["tables"]:
            out[f"{t['catalog_name']}.{t['schema_name']}.{t['name']}"] = [
                c["name"] for c in t["columns"]
            ]
        token = body.get("next_page_token")
        if not token:
            return out


def all_visible(client: httpx.Client) -> dict[str, list[str]]:
    """Everything a caller can discover by walking catalogs -> schemas -> tables."""
    out: dict[str, list[str]] = {}
    for c in client.get(f"{UC}/catalogs").json()["catalogs"]:
        for s in client.get(f"{UC}/schemas", params={"catalog_name": c["name"]}).json()["schemas"]:
            out.update(uc_tables(client, c["name"], s["name"]))
    return out
