"""LDAP groups decide, end to end (issue 37, item 4): the servers' sync (api/directory.py
`directory_sync`) reads a real slapd into the directory, its mapping turns a directory
group into a policy group, and what a user reads over REST follows the directory at the
next sync; a directory that goes away leaves the last good groups in force."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.directory import directory_of, directory_sync
from governance.config import IdentityConfig, LdapConfig
from governance.identity import GroupMapping
from tests.api.api_testkit import LG, api_lakegate_on, serve, token_of
from tests.identity.slapd import GROUPS, Slapd, user_dn

EMAIL = "SELECT email FROM main.sales.customers ORDER BY id LIMIT 1"


@pytest.fixture(scope="module")
def ldap_lakegate(lakehouse, spark, slapd: Slapd, tmp_path_factory) -> Iterator:
    root: Path = tmp_path_factory.mktemp("ldap-api")
    secret = root / "ldap.pw"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(slapd.password + "\n")
    slapd.start()
    slapd.add_group("pii-team", user_dn("carol"))
    ldap = LdapConfig(
        url=slapd.url,
        group_base=GROUPS,
        bind_dn=slapd.bind_dn,
        password_file=secret,
        timeout=5.0,
        interval=3600.0,  # the test runs each sync itself
        groups=GroupMapping((("pii-team", "pii-readers"),)),
    )
    lg = api_lakegate_on(lakehouse, spark, root, identity=IdentityConfig(ldap=ldap))
    yield lg
    lg.close()
    slapd.start()
    slapd.delete(f"cn=pii-team,{GROUPS}")


@pytest.fixture(scope="module")
def server(ldap_lakegate) -> Iterator[str]:
    from api.app import create_app

    with serve(create_app(ldap_lakegate)) as url:
        yield url


def email_of_first_customer(server: str, user: str) -> str:
    r = httpx.post(
        f"{server}{LG}/statements",
        json={"statement": EMAIL},
        headers={
            "Authorization": f"Bearer {token_of(user)}",
            "X-Lakegate-Caller-Context": uuid.uuid4().hex,
        },
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()["rows"][0][0]


def test_a_directory_group_mapped_to_a_policy_group_decides_and_follows_the_directory(
    server, ldap_lakegate, slapd
):
    directory = directory_of(ldap_lakegate)
    assert "@" not in email_of_first_customer(server, "carol")  # hashed: not a pii reader
    with directory_sync(ldap_lakegate) as sync:
        assert sync is not None
        result = sync.run_once()
        assert result.ok, result.error
        directory.refresh(force=True)
        assert "pii-readers" in directory.groups_of("carol")
        assert "@" in email_of_first_customer(server, "carol")  # the mapped group exempts her

        slapd.add_member("pii-team", user_dn("bob"))  # a groupOfNames is never empty
        slapd.remove_member("pii-team", user_dn("carol"))
        assert sync.run_once().ok
        directory.refresh(force=True)
        assert "@" not in email_of_first_customer(server, "carol")
        assert "@" in email_of_first_customer(server, "bob")

        slapd.stop()  # unreachable: the last good set stays in force
        try:
            assert not sync.run_once().ok
            directory.refresh(force=True)
            assert "@" in email_of_first_customer(server, "bob")
        finally:
            slapd.start()
    slapd.add_member("pii-team", user_dn("carol"))
    slapd.remove_member("pii-team", user_dn("bob"))


def test_no_ldap_section_runs_no_sync(lakehouse):
    with directory_sync(lakehouse) as sync:
        assert sync is None
