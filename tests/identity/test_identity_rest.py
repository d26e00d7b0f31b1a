"""Provider tokens on the REST API, end to end (issue 37): a live server over the demo
lakehouse whose `identity:` section trusts a real HTTPS issuer on loopback; what a user
sees is decided by the groups its token carries, mapped and nested by the YAML, and the
audit names the issuer and subject. Keycloak's own tokens: test_keycloak_*.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from governance.config import IdentityConfig, OidcProvider
from governance.identity import GroupMapping
from tests.api.api_testkit import LG, api_lakegate_on, read_audit, serve, token_of
from tests.identity.issuer import LocalIssuer, local_issuer


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIssuer]:
    with local_issuer(tmp_path_factory.mktemp("issuer-tls")) as it:
        yield it


@pytest.fixture(scope="module")
def oidc_lakegate(lakehouse, spark, issuer, tmp_path_factory):
    provider = OidcProvider(
        issuer=issuer.issuer,
        audience=("lakegate",),
        groups=GroupMapping((("Data Analysts", "analysts"),)),
        ca_file=issuer.ca_file,
    )
    lg = api_lakegate_on(
        lakehouse, spark, tmp_path_factory.mktemp("oidc-api"), identity=IdentityConfig((provider,))
    )
    yield lg
    lg.close()


@pytest.fixture(scope="module")
def server(oidc_lakegate) -> Iterator[str]:
    from api.app import create_app

    with serve(create_app(oidc_lakegate)) as url:
        yield url


def sql(server: str, token: str, statement: str) -> httpx.Response:
    return httpx.post(
        f"{server}{LG}/statements",
        json={"statement": statement},
        headers={"Authorization": f"Bearer {token}", "X-Lakegate-Caller-Context": uuid.uuid4().hex},
        timeout=120,
    )


EMPLOYEES = "SELECT count(*) AS n FROM main.hr.employees"


def test_a_user_unknown_to_the_policies_reads_what_its_provider_groups_allow(server, issuer):
    # mallory is in no YAML group: the token's group alone grants the analysts' read
    assert sql(server, issuer.mint("mallory", groups=["analysts"]), EMPLOYEES).status_code == 200
    assert sql(server, issuer.mint("mallory", groups=[]), EMPLOYEES).status_code in (403, 404)


def test_a_provider_group_is_mapped_to_the_policy_group_the_config_names(server, issuer):
    token = issuer.mint("mallory", groups=["Data Analysts"])
    assert sql(server, token, EMPLOYEES).status_code == 200


def test_yaml_nesting_applies_to_provider_groups(server, issuer):
    # groups.yaml: analysts: [..., group:emea-analysts]; the token says emea-analysts only
    token = issuer.mint("mallory", groups=["emea-analysts"])
    assert sql(server, token, EMPLOYEES).status_code == 200


def test_the_same_statement_of_the_same_user_with_fewer_groups_is_decided_again(server, issuer):
    """The plan cache and the enforcer's caches are keyed by the provider groups too: a
    plan made for a token with a group is never served to a token without it."""
    assert sql(server, issuer.mint("mallory", groups=["analysts"]), EMPLOYEES).status_code == 200
    assert sql(server, issuer.mint("mallory", groups=["pii-readers"]), EMPLOYEES).status_code in (
        403,
        404,
    )


def test_yaml_groups_still_add_to_a_provider_users_groups(server, issuer):
    # dana is an analyst by groups.yaml; her token says nothing about groups
    assert sql(server, issuer.mint("dana", groups=[]), EMPLOYEES).status_code == 200


def test_a_provider_tokens_lines_name_the_issuer_and_subject(server, issuer, oidc_lakegate):
    token = issuer.mint("mallory", groups=["analysts"], sub="kc-8d2f")
    assert sql(server, token, EMPLOYEES).status_code == 200
    lines = [r for r in read_audit(oidc_lakegate) if r.get("subject") == "kc-8d2f"]
    assert lines and all(r["ugi"] == "mallory (auth:OIDC)" for r in lines)
    assert all(r["issuer"] == issuer.issuer for r in lines)


def test_lakegate_tokens_lines_say_token_and_name_no_issuer(server, oidc_lakegate):
    assert sql(server, token_of("alice"), EMPLOYEES).status_code == 200
    last = [r for r in read_audit(oidc_lakegate) if r["ugi"].startswith("alice ")][-1]
    assert last["ugi"] == "alice (auth:TOKEN)"
    assert "issuer" not in last  # an older line's layout: the extension keys are not written


def test_a_refused_provider_token_is_401_on_record_and_says_why_in_one_line(
    server, issuer, oidc_lakegate
):
    r = sql(server, issuer.mint("mallory", aud="other-app"), EMPLOYEES)
    assert r.status_code == 401
    assert "another audience" in r.text and "\n" not in r.json()["message"]
    last = read_audit(oidc_lakegate)[-1]
    assert last["allowed"] == "false" and "another audience" in last["reason"]


def test_an_expired_provider_token_is_refused(server, issuer):
    import time

    token = issuer.mint("mallory", groups=["analysts"], exp=int(time.time()) - 120)
    assert sql(server, token, EMPLOYEES).status_code == 401


def test_discovery_lists_what_the_provider_groups_allow(server, issuer):
    def tables(token: str) -> set[str]:
        r = httpx.get(
            f"{server}/api/2.1/unity-catalog/tables",
            params={"catalog_name": "main", "schema_name": "hr"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        return {t["name"] for t in r.json().get("tables", [])} if r.status_code == 200 else set()

    assert "employees" in tables(issuer.mint("mallory", groups=["analysts"]))
    assert "employees" not in tables(issuer.mint("mallory", groups=[]))


def test_an_issuer_config_mistake_is_one_line(tmp_path):
    from governance.config import Config
    from governance.errors import ConfigError

    (tmp_path / "lakegate.yaml").write_text(
        "identity:\n  providers:\n    - {issuer: 'https://x/realms/a/', audience: lakegate}\n"
    )
    with pytest.raises(ConfigError, match="trailing '/'"):
        Config.load(tmp_path / "lakegate.yaml")


def test_a_console_provider_must_be_a_configured_issuer(tmp_path):
    from governance.config import Config
    from governance.errors import ConfigError

    (tmp_path / "lakegate.yaml").write_text(
        "identity:\n  providers:\n    - {issuer: 'https://x/realms/a', audience: lakegate}\n"
        "  console: {issuer: 'https://y/realms/b', client_id: lakegate}\n"
    )
    with pytest.raises(ConfigError, match=r"must be one of identity\.providers"):
        Config.load(tmp_path / "lakegate.yaml")
