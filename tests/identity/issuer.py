"""A small identity provider of the tests' own, on 127.0.0.1 over HTTPS: a discovery
document, a key set, and tokens signed the way an attacker would like them to be.

Keycloak (tests/identity/keycloak.py) is the real provider every end-to-end test uses; this
one exists for what a real provider never issues: forged key ids, `alg: none`, HS256 signed
with the public key, `jku` headers, tokens for other audiences. The server is real HTTP
(http.server in a thread); only the tokens are hand-made.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from cli.certs import make_certificates


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class LocalIssuer:
    """Keys (RSA, EC), the documents an OIDC provider serves, and a mint for tokens."""

    def __init__(self, tls_dir: Path) -> None:
        self.certs = make_certificates(tls_dir, ["127.0.0.1", "localhost"], 1)
        self.ca_file = self.certs["ca"]
        self.keys: dict[str, Any] = {}  # kid -> private key
        self.published: list[str] = []  # kids in the JWKS
        self.requests: list[str] = []  # paths asked for, in order
        self.down = False  # answer 503 to everything
        self.discovery_issuer: str | None = None  # a lying discovery document
        self.date_offset = 0.0  # seconds added to the HTTP Date header (a skewed clock)
        self.add_key("rsa-1")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certs["cert"], self.certs["key"])
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.issuer = f"https://127.0.0.1:{self._server.server_address[1]}/realms/test"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # keys -------------------------------------------------------------------------------

    def add_key(self, kid: str, kind: str = "rsa", publish: bool = True) -> None:
        key: Any = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "rsa"
            else ec.generate_private_key(ec.SECP256R1())
        )
        self.keys[kid] = key
        if publish:
            self.published.append(kid)

    def rotate(self) -> str:
        """A new key replaces every published one (the old ones leave the key set)."""
        kid = f"rsa-{len(self.keys) + 1}"
        self.add_key(kid)
        self.published = [kid]
        return kid

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in self.published:
            key = self.keys[kid]
            alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
            algo = jwt.get_algorithm_by_name(alg)
            jwk = json.loads(algo.to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
        return {"keys": out}

    # tokens -----------------------------------------------------------------------------

    def claims(self, user: str = "alice", **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.issuer,
            "sub": f"sub-{user}",
            "aud": "lakegate",
            "exp": now + 300,
            "iat": now,
            "typ": "Bearer",
            "preferred_username": user,
            "groups": ["analysts"],
            "jti": uuid.uuid4().hex,
        }
        base.update(extra)
        return {k: v for k, v in base.items() if v is not None}

    def mint(
        self,
        user: str = "alice",
        *,
        kid: str | None = None,
        alg: str | None = None,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        kid = kid or self.published[0]
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(
            self.claims(user, **claims), key, algorithm=alg, headers={"kid": kid, **(headers or {})}
        )

    def unsigned(self, user: str = "alice") -> str:
        """`alg: none` with an empty signature."""
        header = b64url(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
        body = b64url(json.dumps(self.claims(user)).encode())
        return f"{header}.{body}."

    def hs256_with_public_key(self, user: str = "alice") -> str:
        """The RS/HS confusion: HMAC-SHA256 keyed with the published RSA key's PEM."""
        import hashlib
        import hmac

        from cryptography.hazmat.primitives import serialization

        pem = (
            self.keys[self.published[0]]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        header = b64url(
            json.dumps({"alg": "HS256", "typ": "JWT", "kid": self.published[0]}).encode()
        )
        body = b64url(json.dumps(self.claims(user)).encode())
        sig = hmac.new(pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
        return f"{header}.{body}.{b64url(sig)}"

    # the server -------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.requests.append(self.path)
                if issuer.down:
                    self.send_error(503)
                    return
                prefix = "/realms/test"
                if self.path == f"{prefix}/.well-known/openid-configuration":
                    doc = {
                        "issuer": issuer.discovery_issuer or issuer.issuer,
                        "jwks_uri": f"{issuer.issuer}/protocol/openid-connect/certs",
                    }
                elif self.path == f"{prefix}/protocol/openid-connect/certs":
                    doc = issuer.jwks()
                else:
                    self.send_error(404)
                    return
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

            def date_time_string(self, timestamp: float | None = None) -> str:
                now = time.time() if timestamp is None else timestamp
                return super().date_time_string(now + issuer.date_offset)

        return Handler

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def local_issuer(tls_dir: Path) -> Iterator[LocalIssuer]:
    issuer = LocalIssuer(tls_dir)
    try:
        yield issuer
    finally:
        issuer.stop()
