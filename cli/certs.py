"""`lakegate certs`: a private CA and a server certificate for `lakegate connect` and
`lakegate serve` in one command, written owner-only, with lakegate.yaml pointing at them.

PySpark sends a token only over TLS, so a gateway without a certificate cannot be used; this
makes the first deployment a copy-paste. A certificate from an organisation's own CA works
the same way: set `connect.tls_cert`/`tls_key` (and `api.tls_cert`/`tls_key`) to it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
from pathlib import Path
from typing import Any

import click

from cli.kit import (
    EXIT_OK,
    EXIT_USAGE,
    config_option,
    config_path,
    fail,
    output_option,
)
from cli.settings import update_config


def default_names(cfg_hosts: list[str]) -> list[str]:
    """The names clients may use: this host's names, loopback, and the configured
    listen addresses that are real names (not the wildcard)."""
    names = [socket.getfqdn(), socket.gethostname(), "localhost", "127.0.0.1"]
    names += [h for h in cfg_hosts if h not in ("0.0.0.0", "::", "")]
    return list(dict.fromkeys(n.lower() for n in names if n))


def _san(names: list[str]) -> Any:
    from cryptography import x509

    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def _write_private(path: Path, data: bytes) -> None:
    """Owner-only from the first byte (not chmod after a readable write)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def make_certificates(directory: Path, names: list[str], days: int) -> dict[str, Path]:
    """ca.pem/ca.key (a CA for this deployment only) and server.pem/server.key for
    `names`, all 0600 in a 0700 directory."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"Lakegate private CA ({names[0]})")]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    out = {
        "ca": directory / "ca.pem",
        "ca_key": directory / "ca.key",
        "cert": directory / "server.pem",
        "key": directory / "server.key",
    }
    _write_private(out["ca_key"], ca_key.private_bytes(pem, pkcs8, plain))
    _write_private(out["ca"], ca.public_bytes(pem))
    _write_private(out["key"], key.private_bytes(pem, pkcs8, plain))
    _write_private(out["cert"], cert.public_bytes(pem))
    return out


@click.command("certs")
@config_option
@click.option(
    "--name",
    "names",
    multiple=True,
    help="a host name or address clients use (repeatable; default: this host's names, "
    "localhost, 127.0.0.1 and the configured hosts)",
)
@click.option(
    "--dir",
    "directory",
    default="tls",
    show_default=True,
    help="where to write them, relative to lakegate.yaml",
)
@click.option(
    "--days", type=click.IntRange(1, 3650), default=397, show_default=True, help="validity"
)
@click.option("--force", is_flag=True, help="replace certificates already there")
@output_option("text", "json", default="text")
def certs(names: tuple[str, ...], directory: str, days: int, force: bool, output: str) -> int:
    """Make a private CA and a server certificate, and use them.

    Writes ca.pem, ca.key, server.pem and server.key owner-only and sets connect.tls_cert/
    tls_key and api.tls_cert/tls_key in lakegate.yaml. Clients need ca.pem only."""
    import json

    import yaml

    from governance.errors import ConfigError

    path = config_path().resolve()
    if not path.is_file():
        fail(f"config file {path} not found (lakegate demo makes one)")
        return EXIT_USAGE
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    target = (path.parent / directory).resolve()
    if (target / "server.key").exists() and not force:
        fail(f"{target} already holds a certificate (--force replaces it)")
        return EXIT_USAGE
    hosts = [
        str((raw.get(s) or {}).get("host", "127.0.0.1"))
        for s in ("connect", "api")
        if isinstance(raw.get(s) or {}, dict)
    ]
    chosen = [n.lower() for n in names] or default_names(hosts)
    made = make_certificates(target, chosen, days)

    def rel(p: Path) -> str:
        return os.path.relpath(p, path.parent)

    def point(cfg: dict[str, Any]) -> None:
        for section in ("connect", "api"):
            block = cfg.get(section)
            block = block if isinstance(block, dict) else {}
            block.update({"tls_cert": rel(made["cert"]), "tls_key": rel(made["key"])})
            cfg[section] = block

    update_config(path, point)
    if output == "json":
        click.echo(json.dumps({"names": chosen, **{k: str(v) for k, v in made.items()}}))
    else:
        click.echo(f"CA certificate (give it to clients): {made['ca']}")
        click.echo(f"server certificate for {', '.join(chosen)}: {made['cert']}")
        click.echo(
            f"valid {days} days; {path.name}: connect.tls_cert/tls_key, api.tls_cert/tls_key"
        )
    return EXIT_OK
