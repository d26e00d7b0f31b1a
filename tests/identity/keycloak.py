"""A real Keycloak for the identity tests: `kc.sh start-dev` over HTTPS on 127.0.0.1.

The tests verify Lakegate's OIDC side against the identity provider it will meet in
production, not a stand-in: tokens are minted by Keycloak, signed with its keys and
published in its JWKS. `make test` installs the distribution (the Makefile's
KEYCLOAK_VERSION, unpacked into .cache/keycloak/dist); this module starts it with a realm of
users, groups and clients it writes itself, and stops it. Anything that keeps Keycloak from
starting raises KeycloakUnavailable with the reason (the fixture fails on it, never skips).

Each run gets its own Keycloak home in a temporary folder (a copy of bin/, links to the
distribution's lib/, conf/, themes/ and providers/) so the embedded H2 database and the realm
import live there, not in the shared distribution.
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / ".cache" / "keycloak" / "dist"
REALM = "lakegate"
CLIENT_ID = "lakegate"
OTHER_CLIENT_ID = "other-app"
MIN_JAVA = 21
# Access tokens live this long unless a test shortens them (set_access_token_lifespan).
ACCESS_TOKEN_LIFESPAN = 300
# Seconds to wait for the discovery document: a cold first start (Quarkus build, then the
# database schema) takes ~30 s on an idle 2-core machine and ~2 min on a loaded one.
START_TIMEOUT = float(os.environ.get("LAKEGATE_KEYCLOAK_START_TIMEOUT", "300"))
HEAP = "-Xms64m -Xmx512m"
# C1 only: on a loaded 2-core machine the server is ready in about half the time (41 s
# against 77 s, 63 s against 121 s) and 10% smaller; tests need no peak speed. The opening
# lets jboss-threads reset thread locals on Java 24+ (else stack traces at shutdown).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 --add-opens=java.base/java.lang=ALL-UNNAMED"

# Users and the groups they start in; `engineering/platform` is a nested group, empty at
# start, for tests of subgroup membership.
USERS: dict[str, list[str]] = {
    "alice": ["analysts"],
    "bob": ["analysts"],
    "carol": ["emea-analysts"],
    "dana": ["pii-readers"],
    "mallory": [],
}
# The clients' redirect URIs at start: Keycloak ignores the port of an http loopback
# redirect URI (RFC 8252 7.3, tested), so a console on any http://127.0.0.1 port may sign
# in; an https callback on a test's port needs set_redirect_uris.
REDIRECT_URIS = ["http://127.0.0.1/*", "https://127.0.0.1/*"]
GROUPS = ["analysts", "emea-analysts", "pii-readers", "engineering", "engineering/platform"]


class KeycloakUnavailable(RuntimeError):
    """Keycloak could not be installed, started or reached; the message says why."""


def java_version(java_home: Path) -> int | None:
    """The feature version of the JDK/JRE at `java_home` (21 for 21.0.4), from its
    `release` file, or None when it is not a Java installation."""
    if not (java_home / "bin" / "java").is_file():
        return None
    release = java_home / "release"
    text = release.read_text(errors="replace") if release.is_file() else ""
    m = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', text, re.M)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def find_java(jvm_root: Path = Path("/usr/lib/jvm")) -> Path:
    """A Java home with Java 21 or newer: JAVA_HOME if it is one, else the newest under
    `jvm_root`."""
    env = os.environ.get("JAVA_HOME")
    if env and (java_version(Path(env)) or 0) >= MIN_JAVA:
        return Path(env)
    found = [
        (v, p)
        for p in sorted(jvm_root.glob("*"))
        if not p.is_symlink() and (v := java_version(p)) is not None and v >= MIN_JAVA
    ]
    if not found:
        raise KeycloakUnavailable(
            f"Keycloak needs Java {MIN_JAVA}+: JAVA_HOME={env or '(unset)'} is not one and "
            f"none is under {jvm_root} (install e.g. openjdk-21-jre-headless)"
        )
    return max(found)[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rsa_pem() -> str:
    """A new 2048-bit RSA private key, PKCS#8 PEM (OpenSSL makes it in milliseconds;
    Keycloak's own generation takes seconds on a loaded machine)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def rsa_key_provider(
    name: str, provider: str, algorithm: str, use: str, priority: int
) -> dict[str, Any]:
    """A realm key provider component holding a key made by rsa_pem."""
    return {
        "name": name,
        "providerId": provider,
        "config": {
            "privateKey": [rsa_pem()],
            "priority": [str(priority)],
            "algorithm": [algorithm],
            "keyUse": [use],
            "enabled": ["true"],
            "active": ["true"],
        },
    }


def realm_representation(passwords: dict[str, str], secrets_: dict[str, str]) -> dict[str, Any]:
    """The `lakegate` realm Keycloak imports at start: USERS in their groups, the
    confidential `lakegate` client (password grant for tests; authorization code with PKCE
    S256 for the console) and `other-app`, whose tokens are for another audience."""

    def groups_claim() -> dict[str, Any]:
        return {
            "name": "groups",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-group-membership-mapper",
            "config": {
                "claim.name": "groups",
                "full.path": "false",
                "access.token.claim": "true",
                "id.token.claim": "true",
                "userinfo.token.claim": "true",
                "introspection.token.claim": "true",
            },
        }

    def audience(client_id: str) -> dict[str, Any]:
        return {
            "name": f"audience-{client_id}",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-audience-mapper",
            "config": {
                "included.client.audience": client_id,
                "access.token.claim": "true",
                "id.token.claim": "false",
                "introspection.token.claim": "true",
            },
        }

    def client(client_id: str) -> dict[str, Any]:
        return {
            "clientId": client_id,
            "enabled": True,
            "protocol": "openid-connect",
            "publicClient": False,
            "clientAuthenticatorType": "client-secret",
            "secret": secrets_[client_id],
            "standardFlowEnabled": True,
            "directAccessGrantsEnabled": True,
            "serviceAccountsEnabled": False,
            "implicitFlowEnabled": False,
            "redirectUris": REDIRECT_URIS,
            "webOrigins": ["+"],
            "attributes": {
                "pkce.code.challenge.method": "S256",
                "post.logout.redirect.uris": "+",
            },
            "protocolMappers": [groups_claim(), audience(client_id)],
        }

    def group(path: str) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        subs = [
            group(g) for g in GROUPS if g.startswith(path + "/") and "/" not in g[len(path) + 1 :]
        ]
        return {"name": name, "path": "/" + path, "subGroups": subs}

    return {
        "id": REALM,
        "realm": REALM,
        "enabled": True,
        "sslRequired": "external",
        "accessTokenLifespan": ACCESS_TOKEN_LIFESPAN,
        "registrationAllowed": False,
        "bruteForceProtected": False,
        # Every password grant checks a password: Keycloak's default hash (argon2) costs a
        # few hundred ms a check on a loaded machine; these tests do not test hashing.
        "passwordPolicy": "hashAlgorithm(pbkdf2-sha256) and hashIterations(1000)",
        # Keys made here rather than by Keycloak at import (seconds each under load).
        "components": {
            "org.keycloak.keys.KeyProvider": [
                rsa_key_provider("rsa-lakegate", "rsa", "RS256", "sig", 100),
                rsa_key_provider("rsa-enc-lakegate", "rsa-enc", "RSA-OAEP", "enc", 100),
                {
                    "name": "hmac-generated",
                    "providerId": "hmac-generated",
                    "config": {"priority": ["100"], "algorithm": ["HS512"]},
                },
                {
                    "name": "aes-generated",
                    "providerId": "aes-generated",
                    "config": {"priority": ["100"]},
                },
            ]
        },
        "groups": [group(g) for g in GROUPS if "/" not in g],
        "users": [
            {
                "username": name,
                "enabled": True,
                "email": f"{name}@example.test",
                "emailVerified": True,
                "firstName": name.capitalize(),
                "lastName": "Tester",
                "credentials": [{"type": "password", "value": passwords[name], "temporary": False}],
                "groups": ["/" + g for g in groups],
            }
            for name, groups in USERS.items()
        ],
        "clients": [client(CLIENT_ID), client(OTHER_CLIENT_ID)],
    }


class Keycloak:
    """A running Keycloak (started by `start`, stopped by `stop`) and the calls tests make
    on it: tokens by the password grant, group and user changes and key rotation through
    the admin REST API. Every HTTPS call trusts only `ca_file`."""

    def __init__(self, workdir: Path, dist: Path = DIST, heap: str = HEAP) -> None:
        self.workdir = workdir
        self.dist = dist
        self.heap = heap
        self.home = workdir / "home"
        self.log_file = workdir / "keycloak.log"
        self.ca_file = workdir / "tls" / "ca.pem"
        self.realm = REALM
        self.client_id = CLIENT_ID
        self.passwords = {u: secrets.token_urlsafe(12) for u in USERS}
        self.client_secrets = {c: secrets.token_urlsafe(24) for c in (CLIENT_ID, OTHER_CLIENT_ID)}
        self.admin_username = "admin"
        self.admin_password = secrets.token_urlsafe(16)
        self.port = 0
        self.started_in = 0.0  # seconds from launch to the discovery document answering
        self._proc: subprocess.Popen[bytes] | None = None
        self.pid = 0  # kc.sh's pid (and process group) of the last launch
        self._http: httpx.Client | None = None
        self._admin_token: tuple[str, float] | None = None
        self._key_priority = 1000

    # -- addresses ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{self.realm}"

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    @property
    def client_secret(self) -> str:
        return self.client_secrets[CLIENT_ID]

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS client context trusting the throwaway CA only (for httpx, PyJWKClient)."""
        return ssl.create_default_context(cafile=self.ca_file)

    @property
    def http(self) -> httpx.Client:
        """An HTTP client that trusts the throwaway CA only."""
        if self._http is None:
            self._http = httpx.Client(verify=self.ssl_context(), timeout=30.0)
        return self._http

    # -- life cycle --------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start Keycloak and wait until the realm's discovery document answers; on any
        failure it is stopped and KeycloakUnavailable says why (with the log's tail)."""
        if not (self.dist / "bin" / "kc.sh").is_file():
            raise KeycloakUnavailable(
                f"no Keycloak distribution at {self.dist}: run `make test` (or `make keycloak`),"
                " which fetches it with mvn"
            )
        java = find_java()
        self._prepare_home()
        from cli.certs import make_certificates

        tls = make_certificates(self.workdir / "tls", ["127.0.0.1", "localhost"], days=2)
        # The first start re-augments the shared distribution (lib/quarkus); two runs doing
        # that at once would corrupt it, so starts take turns.
        lock = (self.dist.parent / ".start.lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for attempt in range(2):
                try:
                    self._launch(java, tls["cert"], tls["key"], timeout)
                    return
                except KeycloakUnavailable:
                    self.stop()
                    # a free port taken by someone else between our look and Keycloak's bind
                    if attempt == 0 and "Address already in use" in self._log_tail():
                        continue
                    raise
        finally:
            lock.close()

    def _prepare_home(self) -> None:
        if self.home.exists():
            shutil.rmtree(self.home)
        (self.home / "data" / "import").mkdir(parents=True)
        shutil.copytree(self.dist / "bin", self.home / "bin")
        for part in ("lib", "conf", "themes", "providers"):
            (self.home / part).symlink_to(self.dist / part)
        realm = realm_representation(self.passwords, self.client_secrets)
        path = self.home / "data" / "import" / f"{REALM}-realm.json"
        path.write_text(json.dumps(realm, indent=1))
        path.chmod(0o600)

    def _launch(self, java: Path, cert: Path, key: Path, timeout: float) -> None:
        self.port = free_port()
        # Keycloak reads every KC_* variable as an option: only the harness's own count.
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("KC_", "KEYCLOAK_"))},
            "JAVA_HOME": str(java),
            "JAVA_OPTS_KC_HEAP": self.heap,
            "JAVA_OPTS_APPEND": f"{os.environ.get('JAVA_OPTS_APPEND', '')} {JVM_OPTIONS}".strip(),
            "KC_BOOTSTRAP_ADMIN_USERNAME": self.admin_username,
            "KC_BOOTSTRAP_ADMIN_PASSWORD": self.admin_password,
        }
        env.pop("JAVA_OPTS", None)  # it would replace kc.sh's defaults, heap included
        args = [
            str(self.home / "bin" / "kc.sh"),
            "start-dev",
            "--import-realm",
            "--http-host=127.0.0.1",
            f"--http-port={free_port()}",  # start-dev always opens plain HTTP too
            f"--https-port={self.port}",
            f"--https-certificate-file={cert}",
            f"--https-certificate-key-file={key}",
            f"--hostname={self.base_url}",
        ]
        log = self.log_file.open("wb")
        began = time.monotonic()
        self._proc = subprocess.Popen(
            args,
            cwd=self.home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.pid = self._proc.pid
        deadline = began + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise KeycloakUnavailable(
                    f"Keycloak exited with status {self._proc.returncode} while starting; "
                    f"{self.log_file}:\n{self._log_tail()}"
                )
            try:
                r = self.http.get(self.discovery_url, timeout=2.0)
                if r.status_code == 200 and r.json().get("issuer") == self.issuer:
                    self.started_in = time.monotonic() - began
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        raise KeycloakUnavailable(
            f"Keycloak did not answer {self.discovery_url} within {timeout:.0f} s; "
            f"{self.log_file}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Terminate kc.sh and its JVM (the whole process group), then kill what is left."""
        if self._http is not None:
            self._http.close()
            self._http = None
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def rss_bytes(self) -> int:
        """Resident memory of Keycloak's JVM (the child of kc.sh), for the record."""
        if self._proc is None:
            return 0
        out = subprocess.run(
            ["ps", "-o", "rss=", "--sid", str(self._proc.pid)], capture_output=True, text=True
        ).stdout
        return sum(int(x) for x in out.split()) * 1024

    # -- tokens ------------------------------------------------------------------------
    def tokens(
        self, user: str, password: str | None = None, client: str = CLIENT_ID, scope: str = "openid"
    ) -> dict[str, Any]:
        """Keycloak's token response for `user` by the password grant: access_token,
        id_token, refresh_token, expires_in, ... Raises httpx.HTTPStatusError when refused."""
        r = self.http.post(
            self.token_endpoint,
            data={
                "grant_type": "password",
                "client_id": client,
                "client_secret": self.client_secrets[client],
                "username": user,
                "password": self.passwords[user] if password is None else password,
                "scope": scope,
            },
        )
        r.raise_for_status()
        return r.json()

    def token(self, user: str, password: str | None = None, client: str = CLIENT_ID) -> str:
        """An access token (a signed JWT) for `user`, audience `client`."""
        return self.tokens(user, password, client)["access_token"]

    def refresh(self, refresh_token: str, client: str = CLIENT_ID) -> dict[str, Any]:
        """The token response for a refresh grant (raises when Keycloak refuses it)."""
        r = self.http.post(
            self.token_endpoint,
            data={
                "grant_type": "refresh_token",
                "client_id": client,
                "client_secret": self.client_secrets[client],
                "refresh_token": refresh_token,
            },
        )
        r.raise_for_status()
        return r.json()

    def discovery(self) -> dict[str, Any]:
        r = self.http.get(self.discovery_url)
        r.raise_for_status()
        return r.json()

    def jwks(self) -> dict[str, Any]:
        r = self.http.get(self.jwks_uri)
        r.raise_for_status()
        return r.json()

    def login(self, authorize_url: str, user: str, password: str | None = None) -> str:
        """Sign `user` in on Keycloak's login page for an authorization request (the URL a
        relying party redirects the browser to) and return where Keycloak redirects back:
        the redirect URI with `code` and `state`. Raises when no redirect comes."""
        with httpx.Client(verify=self.ssl_context(), timeout=30.0) as browser:
            page = browser.get(authorize_url)
            if page.status_code in (302, 303):
                return page.headers["location"]
            page.raise_for_status()
            m = re.search(r'<form[^>]*id="kc-form-login"[^>]*action="([^"]+)"', page.text)
            if not m:
                raise RuntimeError(f"no login form on {authorize_url}: {page.text[:300]}")
            action = urljoin(str(page.url), html.unescape(m.group(1)))
            sent = browser.post(
                action,
                data={
                    "username": user,
                    "password": self.passwords[user] if password is None else password,
                    "credentialId": "",
                },
            )
            if sent.status_code not in (302, 303):
                raise RuntimeError(f"Keycloak did not sign {user} in (HTTP {sent.status_code})")
            return sent.headers["location"]

    # -- admin REST API ----------------------------------------------------------------
    def _admin_bearer(self) -> str:
        # the master realm's tokens live 60 s; take a new one well before that
        if self._admin_token is None or time.monotonic() - self._admin_token[1] > 30:
            r = self.http.post(
                f"{self.base_url}/realms/master/protocol/openid-connect/token",
                data={
                    "grant_type": "password",
                    "client_id": "admin-cli",
                    "username": self.admin_username,
                    "password": self.admin_password,
                },
            )
            r.raise_for_status()
            self._admin_token = (r.json()["access_token"], time.monotonic())
        return self._admin_token[0]

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A call on the realm's admin REST API: `path` is relative to
        /admin/realms/lakegate ("" for the realm itself); raises on an HTTP error."""
        r = self.http.request(
            method,
            f"{self.base_url}/admin/realms/{self.realm}{path}",
            headers={"Authorization": f"Bearer {self._admin_bearer()}"},
            **kwargs,
        )
        r.raise_for_status()
        return r

    def user_id(self, user: str) -> str:
        found = self.admin("GET", "/users", params={"username": user, "exact": "true"}).json()
        if len(found) != 1:
            raise KeyError(f"no user {user!r} in realm {self.realm}")
        return found[0]["id"]

    def group_id(self, group: str) -> str:
        """The id of a group by its path ("analysts", "engineering/platform")."""
        return self.admin("GET", f"/group-by-path/{group.strip('/')}").json()["id"]

    def add_to_group(self, user: str, group: str) -> None:
        self.admin("PUT", f"/users/{self.user_id(user)}/groups/{self.group_id(group)}")

    def remove_from_group(self, user: str, group: str) -> None:
        self.admin("DELETE", f"/users/{self.user_id(user)}/groups/{self.group_id(group)}")

    def groups_of(self, user: str) -> list[str]:
        """The user's group names as Keycloak holds them now (direct memberships)."""
        return sorted(
            g["name"] for g in self.admin("GET", f"/users/{self.user_id(user)}/groups").json()
        )

    def set_enabled(self, user: str, enabled: bool) -> None:
        """Disable (or enable again) a user: a disabled user gets no new tokens."""
        uid = self.user_id(user)
        rep = self.admin("GET", f"/users/{uid}").json()
        rep["enabled"] = enabled
        self.admin("PUT", f"/users/{uid}", json=rep)

    def _client(self, client: str) -> dict[str, Any]:
        found = self.admin("GET", "/clients", params={"clientId": client}).json()
        if len(found) != 1:
            raise KeyError(f"no client {client!r} in realm {self.realm}")
        return found[0]

    def _update_client(self, client: str, change: dict[str, Any]) -> None:
        rep = self._client(client)
        for k, v in change.items():
            if k == "attributes":
                rep.setdefault("attributes", {}).update(v)
            else:
                rep[k] = v
        self.admin("PUT", f"/clients/{rep['id']}", json=rep)

    def set_access_token_lifespan(self, seconds: int | None, client: str = CLIENT_ID) -> None:
        """Access tokens for `client` live `seconds` from now on (None: the realm's
        ACCESS_TOKEN_LIFESPAN again); for expiry tests."""
        self._update_client(
            client,
            {"attributes": {"access.token.lifespan": "" if seconds is None else str(seconds)}},
        )

    def set_redirect_uris(self, uris: list[str], client: str = CLIENT_ID) -> None:
        """Replace the client's allowed redirect URIs (e.g. a console's callback on its
        test port)."""
        self._update_client(client, {"redirectUris": uris})

    @contextlib.contextmanager
    def user_state(self, user: str) -> Iterator[None]:
        """Put the user's groups and enabled flag back as they were after the block, so
        tests sharing the session's Keycloak do not see each other's changes."""
        uid = self.user_id(user)
        groups = [g["path"] for g in self.admin("GET", f"/users/{uid}/groups").json()]
        enabled = self.admin("GET", f"/users/{uid}").json()["enabled"]
        try:
            yield
        finally:
            now = [g["path"] for g in self.admin("GET", f"/users/{uid}/groups").json()]
            for g in set(now) - set(groups):
                self.remove_from_group(user, g)
            for g in set(groups) - set(now):
                self.add_to_group(user, g)
            self.set_enabled(user, enabled)

    # -- signing keys ------------------------------------------------------------------
    def signing_kid(self) -> str:
        """The kid of the key Keycloak signs RS256 tokens with now."""
        return self.admin("GET", "/keys").json()["active"]["RS256"]

    def rotate_keys(self, keep_old: bool = False) -> str:
        """A new RS256 signing key with a higher priority, so new tokens carry a new kid.
        Every older RS256 key is removed (gone from the JWKS), or with keep_old the active
        ones are made passive (still in the JWKS for verification, no longer used to sign).
        Returns the new kid."""
        old = [
            c
            for c in self.admin(
                "GET", "/components", params={"type": "org.keycloak.keys.KeyProvider"}
            ).json()
            if c["providerId"] in ("rsa-generated", "rsa")
            and c.get("config", {}).get("algorithm", ["RS256"]) == ["RS256"]
        ]
        self._key_priority += 100
        self.admin(
            "POST",
            "/components",
            json={
                **rsa_key_provider(
                    f"rsa-rotated-{self._key_priority}", "rsa", "RS256", "sig", self._key_priority
                ),
                "providerType": "org.keycloak.keys.KeyProvider",
                "parentId": self.admin("GET", "").json()["id"],
            },
        )
        for c in old:
            if keep_old and c.get("config", {}).get("active", ["true"]) == ["true"]:
                c["config"]["active"] = ["false"]
                self.admin("PUT", f"/components/{c['id']}", json=c)
            elif not keep_old:
                self.admin("DELETE", f"/components/{c['id']}")
        return self.signing_kid()
