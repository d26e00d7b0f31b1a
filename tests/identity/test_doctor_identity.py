"""`lakegate doctor`'s identity checks (issue 37, item 6), against the tests' real HTTPS
issuer on 127.0.0.1 (tests/identity/issuer.py): a reachable, honest provider passes; one
that is down, lies about its issuer, is trusted through the wrong CA, publishes no key the
configured algorithms can use, or whose clock is off fails with the one fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from cli import main
from cli.certs import make_certificates
from cli.doctor_identity import identity_checks, provider_checks
from governance.config import (
    ConsoleSignIn,
    IdentityConfig,
    LdapConfig,
    OidcProvider,
    ScimConfig,
)
from tests.identity.issuer import LocalIssuer, local_issuer


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIssuer]:
    with local_issuer(tmp_path_factory.mktemp("issuer-tls")) as it:
        yield it


@pytest.fixture
def provider(issuer: LocalIssuer) -> OidcProvider:
    issuer.down, issuer.discovery_issuer, issuer.date_offset = False, None, 0.0
    issuer.published = ["rsa-1"]
    return OidcProvider(
        issuer=issuer.issuer,
        audience=("lakegate",),
        ca_file=issuer.ca_file,
        clock_skew=60.0,
        timeout=2.0,
    )


def _rows(provider: OidcProvider) -> dict[str, tuple[str, str]]:
    return {name: (status, detail) for name, status, detail in provider_checks(provider)}


def test_a_reachable_honest_provider_passes_every_check(provider: OidcProvider) -> None:
    rows = _rows(provider)
    assert list(rows) == ["identity tls", "identity discovery", "identity keys", "identity clock"]
    assert {s for s, _ in rows.values()} == {"ok"}
    assert "1 of 1 key(s) usable (rsa-1)" in rows["identity keys"][1]


def test_a_provider_that_is_down_fails_discovery_and_skips_the_rest(
    provider: OidcProvider, issuer: LocalIssuer
) -> None:
    issuer.down = True
    rows = _rows(provider)
    status, detail = rows["identity discovery"]
    assert status == "FAIL" and "Service Unavailable" in detail
    assert detail.endswith("(check the issuer URL and that this host can reach it)")
    assert [rows[n][0] for n in ("identity keys", "identity clock")] == ["skip", "skip"]


def test_a_discovery_document_naming_another_issuer_fails(
    provider: OidcProvider, issuer: LocalIssuer
) -> None:
    issuer.discovery_issuer = "https://evil.example/realms/test"
    status, detail = _rows(provider)["identity discovery"]
    assert status == "FAIL"
    assert "names another issuer" in detail and "set identity.providers[].issuer" in detail


def test_an_issuer_certificate_the_configured_ca_did_not_sign_fails(
    provider: OidcProvider, tmp_path: Path
) -> None:
    other = make_certificates(tmp_path / "other", ["127.0.0.1"], 1)["ca"]
    rows = _rows(replace(provider, ca_file=other))
    assert rows["identity tls"][0] == "ok"  # a readable CA, just not the issuer's
    status, detail = rows["identity discovery"]
    assert status == "FAIL" and "CERTIFICATE_VERIFY_FAILED" in detail
    assert "set ca_file to the CA that signed the issuer's certificate" in detail


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "does not exist"), ("not a certificate\n", "holds no PEM certificate")],
)
def test_a_ca_file_that_is_missing_or_not_pem_fails_tls(
    provider: OidcProvider, tmp_path: Path, content: str | None, expected: str
) -> None:
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    rows = _rows(replace(provider, ca_file=ca))
    assert rows["identity tls"][0] == "FAIL" and expected in rows["identity tls"][1]
    assert rows["identity discovery"][0] == "skip"


@pytest.mark.parametrize(
    ("published", "algorithms", "status"),
    [
        (["rsa-1"], ("RS256",), "ok"),
        (["rsa-1"], ("ES256",), "FAIL"),  # an RSA key cannot verify ES256
        (["rsa-1", "ec-1"], ("ES256",), "ok"),
        (["ec-1"], ("RS256", "PS256"), "FAIL"),
    ],
)
def test_the_key_set_needs_a_key_usable_with_the_configured_algorithms(
    provider: OidcProvider,
    issuer: LocalIssuer,
    published: list[str],
    algorithms: tuple[str, ...],
    status: str,
) -> None:
    if "ec-1" not in issuer.keys:
        issuer.add_key("ec-1", "ec", publish=False)
    issuer.published = published
    got, detail = _rows(replace(provider, algorithms=algorithms))["identity keys"]
    assert got == status, detail
    if status == "FAIL":
        assert "set algorithms to what the provider signs with" in detail


@pytest.mark.parametrize(
    ("offset", "status", "words"),
    [
        (0.0, "ok", "clocks agree"),
        (30.0, "ok", "clocks agree"),
        (-30.0, "ok", "clocks agree"),
        (120.0, "FAIL", "behind the provider's"),
        (-120.0, "FAIL", "ahead of the provider's"),
    ],
)
def test_clock_skew_past_the_configured_leeway_fails(
    provider: OidcProvider, issuer: LocalIssuer, offset: float, status: str, words: str
) -> None:
    issuer.date_offset = offset
    got, detail = _rows(provider)["identity clock"]
    assert got == status and words in detail, detail
    if status == "FAIL":
        assert "clock_skew 60 s" in detail and "NTP" in detail


def _secret(tmp_path: Path, mode: int | None) -> Path:
    path = tmp_path / "secret"
    if mode is not None:
        path.write_text("s3cret\n")
        path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("mode", "status", "words"),
    [(0o600, "ok", "owner-only"), (0o644, "FAIL", "chmod 600"), (None, "FAIL", "fix the path")],
)
def test_ldap_password_and_console_secret_files_must_be_owner_only(
    tmp_path: Path, mode: int | None, status: str, words: str
) -> None:
    path = _secret(tmp_path, mode)
    identity = IdentityConfig(
        ldap=LdapConfig("ldaps://ldap.example", "ou=groups", password_file=path),
        console=ConsoleSignIn("https://idp.example", "lakegate", path),
    )
    rows = {n: (s, d) for n, s, d in identity_checks(identity)}
    for name in ("identity ldap", "identity console"):
        assert rows[name][0] == status and words in rows[name][1]


@pytest.mark.parametrize(("tokens", "status"), [((), "FAIL"), (("a" * 64,), "ok")])
def test_scim_needs_a_token(tokens: tuple[str, ...], status: str) -> None:
    ((name, got, detail),) = identity_checks(IdentityConfig(scim=ScimConfig(tokens)))
    assert (name, got) == ("identity scim", status)
    if status == "FAIL":
        assert "identity.scim.tokens" in detail


def test_without_an_identity_section_doctor_checks_no_provider() -> None:
    assert identity_checks(IdentityConfig()) == []


def test_doctor_command_shows_the_identity_rows_and_fails_when_the_provider_is_down(
    tmp_path: Path, issuer: LocalIssuer, capsys: pytest.CaptureFixture[str]
) -> None:
    issuer.down, issuer.discovery_issuer, issuer.date_offset = False, None, 0.0
    issuer.published = ["rsa-1"]
    config = tmp_path / "lakegate.yaml"
    config.write_text(
        "warehouse: wh\ncatalog: cat.db\npolicies: policies\naudit: audit\n"
        f"identity:\n  providers:\n    - issuer: {issuer.issuer}\n"
        f"      audience: lakegate\n      ca_file: {issuer.ca_file}\n"
    )
    config.chmod(0o600)
    (tmp_path / "policies").mkdir()

    def doctor() -> dict[str, str]:
        capsys.readouterr()
        main(["--config", str(config), "doctor", "-o", "json"])
        rows = json.loads(capsys.readouterr().out)
        return {r["check"]: r["status"] for r in rows if r["check"].startswith("identity")}

    assert doctor() == {
        "identity tls": "ok",
        "identity discovery": "ok",
        "identity keys": "ok",
        "identity clock": "ok",
    }
    issuer.down = True
    assert main(["--config", str(config), "doctor"]) == 1
    assert "1 check(s) failed: identity discovery" in capsys.readouterr().out
    issuer.down = False
