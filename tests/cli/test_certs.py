"""TLS and tokens in one command (issue 27): `lakegate certs` makes a private CA and a
server certificate owner-only and points lakegate.yaml at them; `lakegate token create
--save` prints a token once and stores only its hash; `doctor` checks certificates (valid,
key owner-only and matching, naming the host clients use) and that a token exists.
(The gateway tests' stock clients connect with these certificates: connect_testkit.)
"""

from __future__ import annotations

import datetime as dt
import json
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from api.auth import TokenAuth
from cli import main
from governance.config import Config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "lakegate.yaml"
    path.write_text(yaml.safe_dump({"connect": {"host": "127.0.0.1", "port": 15002}}))
    return path


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _doctor(config: Path, capsys) -> dict[str, dict[str, str]]:
    capsys.readouterr()
    main(["--config", str(config), "doctor", "-o", "json"])
    return {c["check"]: c for c in json.loads(capsys.readouterr().out)}


def test_certs_makes_an_owner_only_ca_and_server_certificate_and_sets_connect_and_api(
    config: Path, capsys
) -> None:
    argv = ["--config", str(config), "certs", "--name", "gw.example.test", "--name", "127.0.0.1"]
    assert main(argv) == 0
    tls = config.parent / "tls"
    assert _mode(tls) == 0o700
    assert {p.name: _mode(p) for p in tls.iterdir()} == {
        "ca.pem": 0o600,
        "ca.key": 0o600,
        "server.pem": 0o600,
        "server.key": 0o600,
    }
    raw = yaml.safe_load(config.read_text())
    assert raw["connect"] == {
        "host": "127.0.0.1",
        "port": 15002,
        "tls_cert": "tls/server.pem",
        "tls_key": "tls/server.key",
    }
    assert raw["api"] == {"tls_cert": "tls/server.pem", "tls_key": "tls/server.key"}
    assert _mode(config) == 0o600
    ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((tls / "server.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["gw.example.test"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    cfg = Config.load(config)
    assert (cfg.connect.tls_cert, cfg.api.tls_key) == (tls / "server.pem", tls / "server.key")


def test_certs_does_not_replace_certificates_without_force(config: Path, capsys) -> None:
    assert main(["--config", str(config), "certs"]) == 0
    first = (config.parent / "tls" / "server.key").read_bytes()
    capsys.readouterr()
    assert main(["--config", str(config), "certs"]) == 2
    assert capsys.readouterr().err == (
        f"lakegate: {config.parent / 'tls'} already holds a certificate (--force replaces it)\n"
    )
    assert (config.parent / "tls" / "server.key").read_bytes() == first
    assert main(["--config", str(config), "certs", "--force"]) == 0
    assert (config.parent / "tls" / "server.key").read_bytes() != first


def test_token_create_save_prints_the_token_once_and_stores_only_its_hash(
    config: Path, capsys
) -> None:
    assert main(["--config", str(config), "token", "create", "-u", "Alice", "--save"]) == 0
    token, note = capsys.readouterr().out.splitlines()
    assert note.startswith("# alice's token; its SHA-256 is now under api.tokens")
    assert token not in config.read_text()
    assert _mode(config) == 0o600
    cfg = Config.load(config)
    assert [t.user for t in cfg.api.tokens] == ["alice"]
    assert TokenAuth(cfg.api).authenticate(f"Bearer {token}").user == "alice"


def test_doctor_passes_certificates_and_tokens_made_by_the_two_commands(
    config: Path, capsys
) -> None:
    before = _doctor(config, capsys)
    assert before["tokens"]["status"] == "warn"
    assert before["connect tls"] == {
        "check": "connect tls",
        "status": "warn",
        "detail": "connect.tls_cert/tls_key not set: lakegate connect will not start "
        "(lakegate certs makes them)",
    }
    assert main(["--config", str(config), "certs"]) == 0
    assert main(["--config", str(config), "token", "create", "-u", "carol", "--save"]) == 0
    after = _doctor(config, capsys)
    assert after["tokens"] == {"check": "tokens", "status": "ok", "detail": "1 token(s)"}
    assert after["connect tls"]["status"] == "ok"
    assert after["connect tls"]["detail"].startswith(
        f"{config.parent / 'tls' / 'server.pem'} for 127.0.0.1, valid until "
    )
    assert after["api tls"]["status"] == "ok"


def test_doctor_fails_a_certificate_that_does_not_name_the_host_clients_use(
    config: Path, capsys
) -> None:
    assert main(["--config", str(config), "certs", "--name", "localhost"]) == 0
    raw = yaml.safe_load(config.read_text())
    raw["connect"]["host"] = "127.0.0.1"
    config.write_text(yaml.safe_dump(raw))
    cert = config.parent / "tls" / "server.pem"
    assert _doctor(config, capsys)["connect tls"] == {
        "check": "connect tls",
        "status": "FAIL",
        "detail": f"{cert} names localhost, not 127.0.0.1, which clients use "
        "(lakegate certs --name HOST --force)",
    }


def test_doctor_fails_a_key_others_can_read_and_an_expired_certificate(
    config: Path, capsys
) -> None:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    assert main(["--config", str(config), "certs"]) == 0
    key_path = config.parent / "tls" / "server.key"
    key_path.chmod(0o644)
    assert _doctor(config, capsys)["connect tls"] == {
        "check": "connect tls",
        "status": "FAIL",
        "detail": f"{key_path} (644) is readable by others: chmod 600 it",
    }
    key_path.chmod(0o600)
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    ended = dt.datetime(2025, 1, 2, tzinfo=dt.UTC)
    expired = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
        .not_valid_after(ended)
        .sign(key, hashes.SHA256())
    )
    cert = config.parent / "tls" / "server.pem"
    cert.write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    assert _doctor(config, capsys)["connect tls"] == {
        "check": "connect tls",
        "status": "FAIL",
        "detail": f"{cert} is not valid now (until 2025-01-02)",
    }
