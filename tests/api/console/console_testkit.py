"""What the console tests share: the personas' statements, each viewer's forbidden strings,
and a client signed in through the console's form."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from api_testkit import token_of

PAGES = ("/ui/catalog", "/ui/access", "/ui/policies", "/ui/audit")

# Statements run before the pages are read, so the audit log has reads, masked reads of
# tagged columns, and refusals on tables and columns some viewers may not see.
TRAFFIC = (
    ("alice", "SELECT name, email FROM main.sales.customers"),
    ("alice", "SELECT ssn FROM main.sales.customers"),
    ("alice", "SELECT name, salary FROM main.hr.employees"),
    ("alice", "SELECT * FROM main.marketing.campaigns"),
    ("alice", "SELECT region, amount FROM main.sales.orders"),
    ("erin", "SELECT email, ssn FROM main.sales.customers"),
    ("dana", "SELECT email FROM main.sales.customers"),
    ("harriet", "SELECT name, salary, birth_date FROM main.hr.employees"),
    ("mallory", "SELECT name, budget FROM main.marketing.campaigns"),
)

# What each viewer may not find anywhere in the console's HTML or the JSON behind it: tables
# they cannot read, hidden columns, policy ids that name hidden columns, filter text of
# policies they do not manage, raw values of masked or hidden columns, other people's lines.
FORBIDDEN = {
    "alice": (
        "main.marketing",
        "campaigns",
        "budget",
        "ssn",
        "salary",
        "111-22-3333",
        "anna@example.de",
        "185000",
        "NOT is_test",
        "region = 'EMEA'",
        "IN ('EMEA')",
        "bob-no-phone",
        "hide-pii",  # the id of the mask on her own columns: the kind only (hash)
        "mallory",
        "harriet",
    ),
    "erin": (
        "main.hr",
        "employees",
        "salary",
        "birth_date",
        "185000",
        "Grace Hopper",
        "main.marketing",
        "campaigns",
        "budget",
        "mallory",
        "harriet",
        "111-22-3333",
    ),
}


@contextmanager
def signed_in(base_url: str, user: str) -> Iterator[httpx.Client]:
    """An httpx client signed in through the console's form (cookies kept)."""
    with httpx.Client(base_url=base_url, timeout=60) as c:
        c.get("/ui/signin")
        r = c.post("/ui/signin", data={"token": token_of(user), "csrf": c.cookies["lakegate_csrf"]})
        assert r.status_code == 303, r.text
        yield c
