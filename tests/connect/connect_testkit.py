"""Helpers for the Spark Connect gateway tests: tokens, a throwaway CA, audit lines."""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
from pathlib import Path
from typing import Any

PERSONAS = ("alice", "bob", "carol", "dana", "erin", "frank", "mallory", "mira", "wes")


def token_of(user: str) -> str:
    return f"ctok-{user}-{hashlib.sha256(user.encode()).hexdigest()[:16]}"


def make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it:
    (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lakegate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def rows(df: Any) -> list[tuple]:
    """A DataFrame's rows as sorted tuples (order-free comparison with `s.sql`)."""
    return sorted((tuple(r) for r in df.collect()), key=repr)


def audit_lines(directory: Path) -> list[dict[str, str]]:
    """Every audit line as key -> raw value."""
    out = []
    for f in sorted(directory.glob("*.log*")):
        for line in f.read_text().splitlines():
            body = line.split(": ", 1)[1] if ": " in line else line
            out.append(dict(kv.split("=", 1) for kv in body.split("\t") if "=" in kv))
    return out


def jobs_in_group(spark: Any, group: str) -> list[int]:
    """The Spark jobs started so far under a job group (the listener bus drained first, so
    every job already submitted is counted)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def active_jobs(spark: Any) -> list[int]:
    """The Spark jobs running now, after the listener bus has caught up."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return list(spark.sparkContext._jsc.statusTracker().getActiveJobIds())
