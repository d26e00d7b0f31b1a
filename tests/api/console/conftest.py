"""A live server whose policy directory is a git repository with two revisions, audit lines
from several personas, and the console's forbidden strings per persona.

Revision 1 (HEAD~1) differs from the reference policies (HEAD, in force): analysts may read
main.marketing.campaigns, bob may read customers.phone, carol's EMEA filter is worded
`region IN ('EMEA')`, and no-test-orders does not exist. So between them alice loses
campaigns (a table she may no longer see), bob loses phone, carol's filter changes and every
analyst gains no-test-orders.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from api_testkit import LG, api_lakegate_on, serve, token_of
from console_testkit import TRAFFIC

CAMPAIGNS_GRANT = """
grants:
  - id: analysts-read-campaigns
    principals: [group:analysts]
    privileges: [select]
    on: main.marketing.campaigns
"""
BOB_NO_PHONE = """  - id: bob-no-phone
    principals: [bob]
    effect: deny
    privileges: [select]
    on: main.sales.customers
    columns: [phone]
"""
NO_TEST_ORDERS = """  - id: no-test-orders
    on: main.sales.orders
    principals: [group:analysts]
    where: "NOT is_test"
    kind: restrictive
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="session")
def policy_repo(lakehouse, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference policies at HEAD of a git repository, revision 1 at HEAD~1."""
    repo = tmp_path_factory.mktemp("console-policies") / "policies"
    shutil.copytree(lakehouse.config.policies, repo)
    reference = {p.name: p.read_text() for p in repo.glob("*.yaml")}
    sales = reference["sales.yaml"]
    assert BOB_NO_PHONE in sales and NO_TEST_ORDERS in sales
    sales = sales.replace(BOB_NO_PHONE, "").replace(NO_TEST_ORDERS, "")
    (repo / "sales.yaml").write_text(sales.replace("region = 'EMEA'", "region IN ('EMEA')"))
    (repo / "marketing.yaml").write_text(reference["marketing.yaml"] + CAMPAIGNS_GRANT)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "revision 1")
    for name, text in reference.items():
        (repo / name).write_text(text)
    _git(repo, "commit", "-q", "-am", "revision 2: the reference policies")
    return repo


@pytest.fixture(scope="session")
def console_lakegate(lakehouse, spark, policy_repo, tmp_path_factory):
    lg = api_lakegate_on(lakehouse, spark, tmp_path_factory.mktemp("console"), policies=policy_repo)
    yield lg
    lg.close()


@pytest.fixture(scope="session")
def console_app(console_lakegate):
    from api.app import create_app

    return create_app(console_lakegate)


@pytest.fixture(scope="session")
def console_server(console_app) -> Iterator[str]:
    """The console's server, with the personas' statements already in its audit log."""
    with serve(console_app) as url:
        for user, sql in TRAFFIC:
            r = httpx.post(
                f"{url}{LG}/statements",
                json={"statement": sql},
                headers={"Authorization": f"Bearer {token_of(user)}"},
                timeout=300,
            )
            assert r.status_code in (200, 403), (user, sql, r.text)
        yield url


@pytest.fixture(scope="session")
def bearer(console_server: str) -> Iterator[Callable[[str], httpx.Client]]:
    """`bearer("alice")`: an httpx client for the console's server with alice's token."""
    clients: dict[str, httpx.Client] = {}

    def make(user: str) -> httpx.Client:
        if user not in clients:
            clients[user] = httpx.Client(
                base_url=console_server,
                timeout=60,
                headers={"Authorization": f"Bearer {token_of(user)}"},
            )
        return clients[user]

    yield make
    for c in clients.values():
        c.close()
