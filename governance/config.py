"""lakegate.yaml: where the warehouse, catalog, policies and audit log live, and Spark's setup."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from governance.errors import ConfigError
from governance.identity import InvalidName, canonical_user

_KEYS = {"warehouse", "catalog", "policies", "audit", "spark", "default_catalog",
         "default_schema", "verify_plans", "audit_max_bytes", "audit_backup_count", "api",
         "policies_ref", "policies_settle", "connect"}
_API_KEYS = {"tokens", "secret", "secret_env", "row_limit", "timeout", "products", "host",
             "port"}


@dataclass(frozen=True)
class ApiToken:
    """A bearer token's SHA-256 (hex) and the user it stands for; the token itself is never
    stored, so the config file is no secret."""

    user: str
    sha256: str


@dataclass(frozen=True)
class ApiConfig:
    """The `api:` section, read by `lakegate serve` (see api/README.md)."""

    tokens: tuple[ApiToken, ...] = ()
    secret: str | None = None  # HMAC key for signed tokens `user.expiry.signature`
    row_limit: int = 10_000  # rows a statement may return over HTTP
    timeout: float = 60.0  # seconds a statement may run
    products: Path | None = None  # data product YAML dir; None: `products/` beside policies
    host: str = "127.0.0.1"
    port: int = 8080


@dataclass(frozen=True)
class ConnectConfig:
    """The `connect:` section, read by `lakegate connect` (README: Spark Connect); tokens
    are the `api:` section's. PySpark sends a token only over TLS, hence cert and key."""

    host: str = "127.0.0.1"
    port: int = 15002
    tls_cert: Path | None = None
    tls_key: Path | None = None


@dataclass(frozen=True)
class Config:
    warehouse: Path
    catalog: str  # SQLite file path or URL
    policies: Path
    audit: Path
    spark_master: str = "local[*]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    default_catalog: str = "main"
    default_schema: str = "default"
    verify_plans: bool = True
    audit_max_bytes: int = 64 * 1024 * 1024
    audit_backup_count: int = 20
    policies_ref: str | None = None  # load the policies from this git ref's committed tree
    policies_settle: float = 1.0  # seconds a changed policy dir must stay unchanged
    path: Path | None = None
    api: ApiConfig = field(default_factory=ApiConfig)
    connect: ConnectConfig = field(default_factory=ConnectConfig)

    @property
    def products_dir(self) -> Path:
        """Data product YAML lives beside the policy dir, not in it: the policy loader reads
        every YAML file under the policy dir and `products:` is not in the policy contract."""
        return self.api.products or self.policies.parent / "products"

    @classmethod
    def default(cls, root: str | Path = ".lakegate") -> Config:
        """The embedded setup: everything under one directory, policies from ./policies."""
        base = Path(root).resolve()
        return cls(
            warehouse=base / "warehouse",
            catalog=str(base / "catalog.db"),
            policies=Path("policies").resolve(),
            audit=base / "audit",
        )

    @classmethod
    def load(cls, path: str | Path) -> Config:
        p = Path(path).resolve()
        if not p.is_file():
            raise ConfigError(f"config file {p} not found")
        try:
            raw: Any = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: expected a mapping of settings")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ConfigError(f"{p}: unknown setting(s) {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(sorted(_KEYS))}")
        base = p.parent

        def rel(key: str, default: str) -> Path:
            value = raw.get(key, default)
            if not isinstance(value, str):
                raise ConfigError(f"{p}: '{key}' must be a path")
            q = Path(value).expanduser()
            return q if q.is_absolute() else (base / q).resolve()

        catalog = raw.get("catalog", "catalog.db")
        if not isinstance(catalog, str):
            raise ConfigError(f"{p}: 'catalog' must be a file path or URL")
        if "://" not in catalog and catalog != ":memory:":
            catalog = str(rel("catalog", "catalog.db"))
        spark = raw.get("spark") or {}
        if not isinstance(spark, dict):
            raise ConfigError(f"{p}: 'spark' must be a mapping with master and conf")
        conf = spark.get("conf") or {}
        if not isinstance(conf, dict):
            raise ConfigError(f"{p}: 'spark.conf' must be a mapping")
        return cls(
            warehouse=rel("warehouse", "warehouse"),
            catalog=catalog,
            policies=rel("policies", "policies"),
            audit=rel("audit", "audit"),
            spark_master=str(spark.get("master", "local[*]")),
            spark_conf={str(k): str(v) for k, v in conf.items()},
            default_catalog=str(raw.get("default_catalog", "main")).lower(),
            default_schema=str(raw.get("default_schema", "default")).lower(),
            verify_plans=bool(raw.get("verify_plans", True)),
            audit_max_bytes=int(raw.get("audit_max_bytes", 64 * 1024 * 1024)),
            audit_backup_count=int(raw.get("audit_backup_count", 20)),
            policies_ref=str(raw["policies_ref"]) if raw.get("policies_ref") else None,
            policies_settle=float(raw.get("policies_settle", 1.0)),
            path=p,
            api=_api_config(p, raw.get("api"), rel_to=base),
            connect=_connect_config(p, raw.get("connect"), rel_to=base),
        )


def _api_config(p: Path, raw: Any, *, rel_to: Path) -> ApiConfig:
    import os

    if raw is None:
        return ApiConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: 'api' must be a mapping (tokens, secret, row_limit, timeout)")
    unknown = set(raw) - _API_KEYS
    if unknown:
        raise ConfigError(f"{p}: unknown api setting(s) {', '.join(sorted(unknown))}; "
                          f"known: {', '.join(sorted(_API_KEYS))}")
    tokens: list[ApiToken] = []
    for i, t in enumerate(raw.get("tokens") or []):
        if not isinstance(t, dict) or set(t) != {"user", "sha256"}:
            raise ConfigError(f"{p}: api.tokens[{i}] must be {{user: NAME, sha256: HEX}}")
        digest = str(t["sha256"]).strip().lower()
        if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
            raise ConfigError(f"{p}: api.tokens[{i}].sha256 is not 64 hex digits")
        try:
            user = canonical_user(t["user"])
        except InvalidName as e:
            raise ConfigError(f"{p}: api.tokens[{i}].user: {e}") from None
        tokens.append(ApiToken(user, digest))
    secret = raw.get("secret")
    if raw.get("secret_env"):
        secret = os.environ.get(str(raw["secret_env"])) or secret
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise ConfigError(f"{p}: api.secret must be a string of at least 16 characters")
    try:
        row_limit = int(raw.get("row_limit", 10_000))
        timeout = float(raw.get("timeout", 60.0))
        port = int(raw.get("port", 8080))
    except (TypeError, ValueError):
        raise ConfigError(f"{p}: api.row_limit, api.timeout and api.port must be numbers") \
            from None
    if row_limit < 1 or timeout <= 0:
        raise ConfigError(f"{p}: api.row_limit and api.timeout must be positive")
    products = raw.get("products")
    if products is not None and not isinstance(products, str):
        raise ConfigError(f"{p}: 'api.products' must be a path")
    prod_path = None
    if products is not None:
        q = Path(products).expanduser()
        prod_path = q if q.is_absolute() else (rel_to / q).resolve()
    return ApiConfig(tuple(tokens), secret, row_limit, timeout, prod_path,
                     str(raw.get("host", "127.0.0.1")), port)


def _connect_config(p: Path, raw: Any, *, rel_to: Path) -> ConnectConfig:
    if raw is None:
        return ConnectConfig()
    if not isinstance(raw, dict) or set(raw) - {"host", "port", "tls_cert", "tls_key"}:
        raise ConfigError(f"{p}: 'connect' must be a mapping of host, port, tls_cert, tls_key")
    paths = {}
    for key in ("tls_cert", "tls_key"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str):
                raise ConfigError(f"{p}: connect.{key} must be a path")
            q = Path(raw[key]).expanduser()
            paths[key] = q if q.is_absolute() else (rel_to / q).resolve()
    try:
        port = int(raw.get("port", 15002))
    except (TypeError, ValueError):
        raise ConfigError(f"{p}: connect.port must be a number") from None
    return ConnectConfig(str(raw.get("host", "127.0.0.1")), port, paths.get("tls_cert"),
                         paths.get("tls_key"))
