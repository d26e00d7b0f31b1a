"""Provider tokens on the Spark Connect gateway with the stock client (issue 37): the token
in the connection string is an identity provider's JWT; its groups decide what the session
reads, its issuer and subject are on every line, and its `exp` bounds the session."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from connect_testkit import kept

from governance.config import IdentityConfig, OidcProvider
from tests.identity.issuer import LocalIssuer, local_issuer

EMPLOYEES = "SELECT count(*) AS n FROM main.hr.employees"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIssuer]:
    with local_issuer(tmp_path_factory.mktemp("issuer-tls")) as it:
        yield it


def _gateway_trusting(connect_lakegate, provider: OidcProvider) -> Iterator[Callable[[str], Any]]:
    """`connect(token)`: a stock client of a gateway whose `identity:` section trusts the
    provider; its sessions and the gateway are stopped after."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    from api.connect.server import Gateway

    saved = connect_lakegate.config
    connect_lakegate.config = replace(saved, identity=IdentityConfig((provider,)))
    try:
        gw = Gateway(connect_lakegate, host="127.0.0.1", port=0)
    finally:
        connect_lakegate.config = saved
    gw.start()
    made: list[Any] = []

    def connect(token: str) -> Any:
        url = f"sc://127.0.0.1:{gw.port}/;use_ssl=true;token={token}"
        s = kept(RemoteSession.builder.remote(url).create())
        made.append(s)
        return s

    connect.port = gw.port  # type: ignore[attr-defined]
    yield connect
    for s in made:
        with contextlib.suppress(Exception):  # a session whose token expired cannot say bye
            s.stop()
    gw.stop()


@pytest.fixture(scope="module")
def oidc_remote(gateway, connect_lakegate, issuer) -> Iterator[Callable[[str], Any]]:
    """A gateway trusting the hand-made issuer (no clock skew, so a short-lived token
    expires when it says)."""
    provider = OidcProvider(
        issuer=issuer.issuer, audience=("lakegate",), ca_file=issuer.ca_file, clock_skew=0
    )
    yield from _gateway_trusting(connect_lakegate, provider)


@pytest.fixture(scope="module")
def keycloak_remote(gateway, connect_lakegate, keycloak) -> Iterator[Callable[[str], Any]]:
    """A gateway trusting the tests' real Keycloak."""
    provider = OidcProvider(
        issuer=keycloak.issuer, audience=("lakegate",), ca_file=keycloak.ca_file
    )
    yield from _gateway_trusting(connect_lakegate, provider)


def lines_of(audit_dir, subject: str) -> list[dict[str, str]]:
    out = []
    for path in sorted(audit_dir.glob("audit.log*")):
        for line in path.read_text().splitlines():
            fields = dict(f.split("=", 1) for f in line.partition(": ")[2].split("\t") if "=" in f)
            if fields.get("subject") == subject:
                out.append(fields)
    return out


def test_the_tokens_groups_decide_what_a_connect_session_reads(oidc_remote, issuer):
    analyst = oidc_remote(issuer.mint("mallory", groups=["analysts"]))
    assert analyst.sql(EMPLOYEES).collect()[0]["n"] > 0
    nobody = oidc_remote(issuer.mint("mallory", groups=[]))
    with pytest.raises(Exception) as e:
        nobody.sql(EMPLOYEES).collect()
    assert "main.hr.employees" in str(e.value) or "TABLE_OR_VIEW_NOT_FOUND" in str(e.value)


def test_identity_functions_are_the_tokens_user_and_groups(oidc_remote, issuer):
    s = oidc_remote(issuer.mint("mallory", groups=["emea-analysts"]))
    row = s.sql(
        "SELECT current_user() AS u, is_member('emea-analysts') AS e, is_member('analysts') AS a,"
        " is_member('pii-readers') AS p"
    ).collect()[0]
    # analysts through the YAML's nesting of emea-analysts
    assert (row["u"], row["e"], row["a"], row["p"]) == ("mallory", True, True, False)


def test_every_line_of_a_connect_session_names_the_issuer_and_subject(
    oidc_remote, issuer, audit_dir
):
    s = oidc_remote(issuer.mint("mallory", groups=["analysts"], sub="kc-connect-1"))
    s.sql(EMPLOYEES).collect()
    lines = lines_of(audit_dir, "kc-connect-1")
    assert lines and {ln["proto"] for ln in lines} == {"connect"}
    assert {ln["ugi"] for ln in lines} == {"mallory (auth:OIDC)"}
    assert {ln["issuer"] for ln in lines} == {issuer.issuer}
    assert any(ln.get("src") == "main.hr.employees" for ln in lines)


def test_a_token_for_another_audience_opens_no_session(oidc_remote, issuer):
    with pytest.raises(Exception) as e:
        oidc_remote(issuer.mint("mallory", aud="other-app")).sql("SELECT 1").collect()
    assert "another audience" in str(e.value) or "UNAUTHENTICATED" in str(e.value)


def test_a_session_ends_when_its_token_expires(oidc_remote, issuer):
    s = oidc_remote(issuer.mint("mallory", groups=["analysts"], exp=int(time.time()) + 6))
    assert s.sql("SELECT 1 AS one").collect()[0]["one"] == 1
    time.sleep(7)
    with pytest.raises(Exception) as e:
        s.sql(EMPLOYEES).collect()
    assert "expired" in str(e.value) or "UNAUTHENTICATED" in str(e.value)


def test_a_keycloak_token_in_the_stock_clients_connection_string_decides(
    keycloak_remote, keycloak, audit_dir
):
    """The stock client with a token Keycloak issued: Keycloak's groups decide (mallory is
    in no YAML group), and a group change reaches the next session's token."""
    with keycloak.user_state("mallory"):
        keycloak.add_to_group("mallory", "/analysts")
        s = keycloak_remote(keycloak.token("mallory"))
        assert s.sql(EMPLOYEES).collect()[0]["n"] > 0
        keycloak.remove_from_group("mallory", "/analysts")
        later = keycloak_remote(keycloak.token("mallory"))
        with pytest.raises(Exception) as e:
            later.sql(EMPLOYEES).collect()
        assert "main.hr.employees" in str(e.value) or "TABLE_OR_VIEW_NOT_FOUND" in str(e.value)
    subject = keycloak.user_id("mallory")
    lines = lines_of(audit_dir, subject)
    assert lines and {ln["issuer"] for ln in lines} == {keycloak.issuer}


def test_lakegate_sql_reaches_the_gateway_with_a_provider_token(
    oidc_remote, issuer, connect_lakegate, tmp_path, capsys
):
    """`lakegate sql --gateway` is a stock client too: a provider token in the token file."""
    import json

    from cli import main

    token = tmp_path / "sso.token"
    token.write_text(issuer.mint("mallory", groups=["emea-analysts"]) + "\n")
    token.chmod(0o600)
    argv = ["sql", "--gateway", f"sc://127.0.0.1:{oidc_remote.port}"]
    argv += ["--ca-file", str(connect_lakegate.ca), "--token-file", str(token), "-o", "json"]
    rc = main([*argv, "SELECT current_user() AS u, is_member('analysts') AS a"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert json.loads(out) == [{"u": "mallory", "a": True}]
