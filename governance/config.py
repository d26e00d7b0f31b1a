"""lakegate.yaml: where the warehouse, catalog, policies and audit log live, and Spark's setup.

The file is checked by pydantic models (`_File` and the models it holds: types, bounds,
unknown keys) and read into the frozen dataclasses the rest of the code uses, which code may
also build directly. A mistake is one line naming the file and the key (`_message`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from audit.checkpoint import CheckpointSettings
from governance.errors import ConfigError
from governance.identity import GroupMapping, canonical_group, canonical_user


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
    tls_cert: Path | None = None  # HTTPS when both are set (lakegate certs sets them)
    tls_key: Path | None = None
    # threads running REST statements at once (more wait for one): a statement's thread
    # blocks on Spark, not on Python's CPU, so this bounds Spark work in flight, not CPU
    statement_threads: int = 32
    # seconds an idle HTTP/1.1 connection is kept open: longer than a client's or a load
    # balancer's own idle timeout (60 s on common ones), so the caller closes first. A server
    # that closes first (uvicorn's default is 5 s) can do so while the caller's next request
    # is on its way, and that request fails with a reset connection.
    keep_alive_seconds: int = 75


@dataclass(frozen=True)
class ConnectConfig:
    """The `connect:` section, read by `lakegate connect` (README: Spark Connect); tokens
    are the `api:` section's. PySpark sends a token only over TLS, hence cert and key."""

    host: str = "127.0.0.1"
    port: int = 15002
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # limits (README: Spark Connect, "Limits"); None: the `api:` section's value, as REST
    statement_timeout: float | None = None  # seconds; then the statement's jobs are cancelled
    row_limit: int | None = None  # rows a query may return; more is refused
    max_statements_per_user: int = 8  # statements of one user running at once
    max_sessions_per_user: int = 16  # open Connect sessions of one user
    max_sessions: int = 96  # open sessions in all (Spark's backend keeps at most 100)
    session_idle_timeout: float = 3600.0  # seconds unused, then a session is released
    # seconds a statement over max_statements_per_user waits for a slot before it is
    # refused as busy (0: refused at once); at most max_statements_per_user wait per user
    statement_queue_wait: float = 30.0
    # slots shared fairly while more than one user is active (0: off): a user then runs at
    # most max(1, min(max_statements_per_user, fair_share_slots // active users)) statements;
    # None (`auto` in lakegate.yaml, the default): the backend's task slots, read at start
    fair_share_slots: int | None = None
    # seconds after their last statement ended that a user still counts as active
    fair_share_window: float = 5.0
    # seconds a busy answer asks the client to wait before it retries (gRPC's RetryInfo;
    # 0: none). Spark 4's stock client retries such an answer itself, waiting at least this
    # and backing off (about 10 minutes in all) before it raises the busy error; Spark 3.5's
    # raises it at once. Without it a refused client's own retry loop can flood the gateway.
    busy_retry_delay: float = 2.0


@dataclass(frozen=True)
class OidcProvider:
    """An identity provider whose JWT access tokens Lakegate accepts (`identity.providers`,
    docs/identity.md). Keys come from the issuer's JWKS, found through its discovery document;
    only asymmetric algorithms are allowed, so no shared secret can sign a token."""

    issuer: str  # exactly as the tokens' `iss` says
    audience: tuple[str, ...]  # a token must name one of these in `aud`
    user_claim: str = "preferred_username"
    groups_claim: str | None = "groups"  # a dotted path (`realm_access.roles`); None: none
    groups: GroupMapping = field(default_factory=GroupMapping)
    known_groups: tuple[str, ...] = ()  # provider group names it sends (policy review)
    algorithms: tuple[str, ...] = ("RS256",)
    ca_file: Path | None = None  # trust for the issuer's TLS (else the system's)
    jwks_max_age: float = 300.0  # seconds a fetched key set may be used; then fetched again
    clock_skew: float = 60.0  # seconds of leeway on exp, nbf and iat
    timeout: float = 5.0  # seconds for one discovery or JWKS request


@dataclass(frozen=True)
class ScimConfig:
    """`identity.scim`: the provisioning endpoint `/scim/v2` an identity provider pushes
    users and groups to, with bearer tokens of its own (their SHA-256 only)."""

    tokens: tuple[str, ...] = ()
    groups: GroupMapping = field(default_factory=GroupMapping)
    known_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class LdapConfig:
    """`identity.ldap`: groups read from a directory on a schedule (api/ldap_sync.py)."""

    url: str
    group_base: str
    bind_dn: str | None = None
    password_file: Path | None = None
    ca_file: Path | None = None
    group_filter: str = "(objectClass=groupOfNames)"
    group_name_attribute: str = "cn"
    member_attribute: str = "member"
    user_attribute: str = "uid"  # the member DN's attribute that is the user name
    interval: float = 300.0  # seconds between syncs
    timeout: float = 10.0
    groups: GroupMapping = field(default_factory=GroupMapping)
    known_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConsoleSignIn:
    """`identity.console`: the console signs in with this provider (authorization code with
    PKCE); the token form stays for service accounts."""

    issuer: str  # one of identity.providers
    client_id: str
    client_secret_file: Path | None = None
    scopes: tuple[str, ...] = ("openid", "profile")


@dataclass(frozen=True)
class IdentityConfig:
    """The `identity:` section: who is asking is the organisation's answer (issue 37)."""

    providers: tuple[OidcProvider, ...] = ()
    scim: ScimConfig | None = None
    ldap: LdapConfig | None = None
    console: ConsoleSignIn | None = None

    def provider(self, issuer: str) -> OidcProvider | None:
        return next((p for p in self.providers if p.issuer == issuer), None)

    def provider_groups(self) -> dict[str, str] | None:
        """Policy group -> the first source that can send it (its mapping's targets and its
        `known_groups` through the mapping), for policy review (docs/identity.md); None
        without any source, when policies keep today's rule (groups: defines every group)."""
        sources: list[tuple[str, GroupMapping, tuple[str, ...]]] = [
            (p.issuer, p.groups, p.known_groups) for p in self.providers
        ]
        if self.scim is not None:
            sources.append(("scim", self.scim.groups, self.scim.known_groups))
        if self.ldap is not None:
            sources.append(("ldap", self.ldap.groups, self.ldap.known_groups))
        if not sources:
            return None
        out: dict[str, str] = {}
        for name, mapping, known in sources:
            for group in sorted(mapping.targets() | mapping.apply(known)):
                out.setdefault(group, name)
        return out


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
    pinned_sources: bool = True  # queries read tables through DataFrames loaded once
    # a query's governed views are global temp views over those, made once per body
    # (governance/execute/sources.py); off: each statement carries its views' text
    governed_views: bool = True
    # a mapping-table lookup answering at most this many keys is inlined as literals at plan
    # time (docs/mapping-tables.md); larger ones, and 0, keep the subquery
    mapping_inline_max_keys: int = 10_000
    audit_max_bytes: int = 64 * 1024 * 1024
    audit_backup_count: int = 20
    # the Merkle tree, signed checkpoints and the witness (audit/README.md); off when None
    audit_checkpoints: CheckpointSettings | None = None
    policies_ref: str | None = None  # load the policies from this git ref's committed tree
    policies_settle: float = 1.0  # seconds a changed policy dir must stay unchanged
    path: Path | None = None
    api: ApiConfig = field(default_factory=ApiConfig)
    connect: ConnectConfig = field(default_factory=ConnectConfig)
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    # Spark's working directory: its relative scratch (spark-warehouse, artifacts,
    # metastore_db, derby.log) and local dirs go here; None: the process's own directory.
    state: Path | None = None

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
            state=base / "state",
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
        try:
            f = _File.model_validate(raw)
        except ValidationError as e:
            raise ConfigError(f"{p}: {_message(e.errors())}") from None
        base = p.parent

        def rel(value: str) -> Path:
            q = Path(value).expanduser()
            return q if q.is_absolute() else (base / q).resolve()

        catalog = f.catalog
        if "://" not in catalog and catalog != ":memory:":
            catalog = str(rel(catalog))
        spark = f.spark or _Spark()
        api = f.api
        return cls(
            warehouse=rel(f.warehouse),
            catalog=catalog,
            policies=rel(f.policies),
            audit=rel(f.audit),
            spark_master=spark.master,
            spark_conf={str(k): str(v) for k, v in (spark.conf or {}).items()},
            default_catalog=f.default_catalog.lower(),
            default_schema=f.default_schema.lower(),
            verify_plans=f.verify_plans,
            pinned_sources=f.pinned_sources,
            governed_views=f.governed_views,
            mapping_inline_max_keys=f.mapping_inline_max_keys,
            audit_max_bytes=f.audit_max_bytes,
            audit_backup_count=f.audit_backup_count,
            audit_checkpoints=None
            if (cp := f.audit_checkpoints) is None
            else CheckpointSettings(
                key=rel(cp.key),
                public_key=None if cp.public_key is None else rel(cp.public_key),
                every_lines=cp.every_lines,
                every_seconds=cp.every_seconds,
                witness=None if cp.witness is None else rel(cp.witness),
                origin=cp.origin,
                witness_url=cp.witness_url,
                witness_unreachable=cp.witness_unreachable,
                witness_timeout=cp.witness_timeout,
            ),
            policies_ref=f.policies_ref or None,
            policies_settle=f.policies_settle,
            path=p,
            api=ApiConfig()
            if api is None
            else ApiConfig(
                tuple(ApiToken(t.user, t.sha256) for t in api.tokens or ()),
                api.secret,
                api.row_limit,
                api.timeout,
                None if api.products is None else rel(api.products),
                api.host,
                api.port,
                None if api.tls_cert is None else rel(api.tls_cert),
                None if api.tls_key is None else rel(api.tls_key),
                statement_threads=api.statement_threads,
                keep_alive_seconds=api.keep_alive_seconds,
            ),
            state=rel(f.state),
            connect=ConnectConfig()
            if f.connect is None
            else ConnectConfig(
                f.connect.host,
                f.connect.port,
                None if f.connect.tls_cert is None else rel(f.connect.tls_cert),
                None if f.connect.tls_key is None else rel(f.connect.tls_key),
                f.connect.statement_timeout,
                f.connect.row_limit,
                f.connect.max_statements_per_user,
                f.connect.max_sessions_per_user,
                f.connect.max_sessions,
                f.connect.session_idle_timeout,
                f.connect.statement_queue_wait,
                None if f.connect.fair_share_slots == "auto" else f.connect.fair_share_slots,
                f.connect.fair_share_window,
                f.connect.busy_retry_delay,
            ),
            identity=IdentityConfig() if f.identity is None else f.identity.build(rel),
        )


# --- the file's schema -----------------------------------------------------------------------
# A field's description, where it has one, is its message for a value of the wrong kind.

_PATH = "'{where}' must be a path"
_NUMBERS = "'{where}': api.row_limit, api.timeout and api.port must be numbers"
_LIMITS = "'{where}' must be a positive number"


_ENV_SECRETS: dict[str, str] = {}


def env_secret(name: str) -> str | None:
    """The secret in environment variable `name`, taken out of the environment on first read
    (kept in this process's memory only): a Spark driver started later, and any child
    process, never inherits it, so no statement can read it back (issue 24)."""
    value = os.environ.pop(name, None)
    if value:
        _ENV_SECRETS[name] = value
    return _ENV_SECRETS.get(name)


class _Token(BaseModel):
    model_config = ConfigDict(extra="forbid")
    WHAT: ClassVar[str] = "'{where}' must be {user: NAME, sha256: HEX}"  # the item's shape

    # InvalidName is a ValueError: its one line (never echoing the name) becomes the message
    user: Annotated[str, AfterValidator(canonical_user)]
    sha256: Annotated[
        str, StringConstraints(strip_whitespace=True, to_lower=True, pattern=r"^[0-9a-fA-F]{64}$")
    ] = Field(description="{where}: not 64 hex digits", coerce_numbers_to_str=True)


class _Api(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[_Token] | None = None
    secret: Annotated[str, StringConstraints(min_length=16)] | None = Field(
        None, description="'{where}' must be a string of at least 16 characters"
    )
    secret_env: str | None = None
    row_limit: PositiveInt = Field(10_000, description=_NUMBERS)
    timeout: PositiveFloat = Field(60.0, description=_NUMBERS)
    products: str | None = Field(None, description=_PATH)
    host: str = "127.0.0.1"
    port: int = Field(8080, description=_NUMBERS)
    tls_cert: str | None = Field(None, description=_PATH)
    tls_key: str | None = Field(None, description=_PATH)
    statement_threads: Annotated[int, Field(gt=0, le=1024)] = Field(
        32, description="'{where}' must be a whole number of threads from 1 to 1024"
    )
    keep_alive_seconds: Annotated[int, Field(gt=0, le=3600)] = Field(
        75, description="'{where}' must be a whole number of seconds from 1 to 3600"
    )

    @model_validator(mode="before")
    @classmethod
    def _secret_from_env(cls, data: Any) -> Any:
        """`secret_env` names a variable whose value, when set, is the secret."""
        if isinstance(data, dict) and data.get("secret_env"):
            return {**data, "secret": env_secret(str(data["secret_env"])) or data.get("secret")}
        return data


class _Spark(BaseModel):
    master: str = "local[*]"
    conf: dict[Any, Any] | None = Field(None, description="'{where}' must be a mapping")


class _Connect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(15002, description="'{where}' must be a number")
    tls_cert: str | None = Field(None, description=_PATH)
    tls_key: str | None = Field(None, description=_PATH)
    statement_timeout: PositiveFloat | None = Field(None, description=_LIMITS)
    row_limit: PositiveInt | None = Field(None, description=_LIMITS)
    max_statements_per_user: PositiveInt = Field(8, description=_LIMITS)
    max_sessions_per_user: PositiveInt = Field(16, description=_LIMITS)
    max_sessions: Annotated[int, Field(gt=0, le=100)] = Field(
        96, description="'{where}' must be a number from 1 to 100 (Spark's backend keeps 100)"
    )
    session_idle_timeout: PositiveFloat = Field(3600.0, description=_LIMITS)
    statement_queue_wait: NonNegativeFloat = Field(
        30.0, description="'{where}' must be a number of seconds, 0 or more"
    )
    fair_share_slots: NonNegativeInt | Literal["auto"] = Field(
        "auto", description="'{where}' must be auto, 0 (off) or a whole number"
    )
    fair_share_window: NonNegativeFloat = Field(
        5.0, description="'{where}' must be a number of seconds, 0 or more"
    )
    busy_retry_delay: Annotated[float, Field(ge=0, le=600)] = Field(
        2.0, description="'{where}' must be a number of seconds from 0 (off) to 600"
    )


class _Checkpoints(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(description=_PATH)
    public_key: str | None = Field(None, description=_PATH)
    every_lines: int = Field(10_000, gt=0)
    every_seconds: float = Field(60.0, gt=0)
    witness: str | None = Field(None, description=_PATH)
    origin: str | None = None
    # an HTTP witness (audit/README.md, "HTTP witness"): POST each checkpoint, GET to verify
    witness_url: str | None = Field(
        None, pattern=r"^https?://", description="'{where}' must be an http:// or https:// URL"
    )
    witness_unreachable: Literal["refuse", "record"] = Field(
        "refuse", description="'{where}' must be refuse or record"
    )
    witness_timeout: float = Field(5.0, gt=0, le=60)


_ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
_URL = r"^https?://[^\s]+$"


class _Groups(BaseModel):
    model_config = ConfigDict(extra="forbid")

    map: dict[str, Annotated[str, AfterValidator(canonical_group)]] = Field(
        default_factory=dict, description="'{where}' must map provider group names to groups"
    )
    unmapped: Literal["keep", "drop"] = Field("keep", description="'{where}' must be keep or drop")

    def build(self) -> GroupMapping:
        return GroupMapping(tuple(sorted(self.map.items())), self.unmapped)


# A provider's own group name, as it sends it (case-sensitive; `groups.map` may rename it).
_KnownGroup = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_KNOWN = "'{where}' must list the provider's group names"


def _no_trailing_slash(issuer: str) -> str:
    if issuer.endswith("/"):
        raise ValueError("an issuer has no trailing '/' (tokens' iss is compared exactly)")
    return issuer


class _Provider(BaseModel):
    model_config = ConfigDict(extra="forbid")

    issuer: Annotated[str, StringConstraints(pattern=_URL), AfterValidator(_no_trailing_slash)]
    audience: str | list[str]
    user_claim: str = "preferred_username"
    groups_claim: str | None = "groups"
    groups: _Groups = Field(default_factory=_Groups)
    known_groups: list[_KnownGroup] = Field(default_factory=list, description=_KNOWN)
    algorithms: list[Literal[_ASYMMETRIC]] = Field(  # type: ignore[valid-type]
        ["RS256"],
        min_length=1,
        description="'{where}' must list asymmetric algorithms: "
        + ", ".join(_ASYMMETRIC)
        + " (never none or HS*)",
    )
    ca_file: str | None = Field(None, description=_PATH)
    jwks_max_age: float = Field(300.0, gt=0, le=86_400)
    clock_skew: float = Field(60.0, ge=0, le=600)
    timeout: float = Field(5.0, gt=0, le=60)


class _Scim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[
        Annotated[
            str,
            StringConstraints(strip_whitespace=True, to_lower=True, pattern=r"^[0-9a-fA-F]{64}$"),
        ]
    ] = Field(default_factory=list, description="'{where}' must list SHA-256 hex digests")
    groups: _Groups = Field(default_factory=_Groups)
    known_groups: list[_KnownGroup] = Field(default_factory=list, description=_KNOWN)


class _Ldap(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^ldaps?://", description="'{where}' must be an ldap:// URL")
    group_base: str
    bind_dn: str | None = None
    password_file: str | None = Field(None, description=_PATH)
    ca_file: str | None = Field(None, description=_PATH)
    group_filter: str = "(objectClass=groupOfNames)"
    group_name_attribute: str = "cn"
    member_attribute: str = "member"
    user_attribute: str = "uid"
    interval: float = Field(300.0, ge=5)
    timeout: float = Field(10.0, gt=0, le=120)
    groups: _Groups = Field(default_factory=_Groups)
    known_groups: list[_KnownGroup] = Field(default_factory=list, description=_KNOWN)


class _Console(BaseModel):
    model_config = ConfigDict(extra="forbid")

    issuer: str
    client_id: str
    client_secret_file: str | None = Field(None, description=_PATH)
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile"])


class _Identity(BaseModel):
    model_config = ConfigDict(extra="forbid")

    providers: list[_Provider] = Field(default_factory=list)
    scim: _Scim | None = None
    ldap: _Ldap | None = None
    console: _Console | None = None

    @model_validator(mode="after")
    def _consistent(self) -> _Identity:
        issuers = [p.issuer for p in self.providers]
        if len(set(issuers)) != len(issuers):
            raise ValueError("two identity.providers have the same issuer")
        if self.console is not None and self.console.issuer not in issuers:
            raise ValueError("identity.console.issuer must be one of identity.providers")
        return self

    def build(self, rel: Any) -> IdentityConfig:
        def path(value: str | None) -> Path | None:
            return None if value is None else rel(value)

        ldap, scim, console = self.ldap, self.scim, self.console
        return IdentityConfig(
            providers=tuple(
                OidcProvider(
                    issuer=p.issuer,
                    audience=(p.audience,) if isinstance(p.audience, str) else tuple(p.audience),
                    user_claim=p.user_claim,
                    groups_claim=p.groups_claim or None,
                    groups=p.groups.build(),
                    known_groups=tuple(p.known_groups),
                    algorithms=tuple(p.algorithms),
                    ca_file=path(p.ca_file),
                    jwks_max_age=p.jwks_max_age,
                    clock_skew=p.clock_skew,
                    timeout=p.timeout,
                )
                for p in self.providers
            ),
            scim=None
            if scim is None
            else ScimConfig(tuple(scim.tokens), scim.groups.build(), tuple(scim.known_groups)),
            ldap=None
            if ldap is None
            else LdapConfig(
                url=ldap.url,
                group_base=ldap.group_base,
                bind_dn=ldap.bind_dn,
                password_file=path(ldap.password_file),
                ca_file=path(ldap.ca_file),
                group_filter=ldap.group_filter,
                group_name_attribute=ldap.group_name_attribute,
                member_attribute=ldap.member_attribute,
                user_attribute=ldap.user_attribute,
                interval=ldap.interval,
                timeout=ldap.timeout,
                groups=ldap.groups.build(),
                known_groups=tuple(ldap.known_groups),
            ),
            console=None
            if console is None
            else ConsoleSignIn(
                console.issuer,
                console.client_id,
                path(console.client_secret_file),
                tuple(console.scopes),
            ),
        )


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warehouse: str = Field("warehouse", description=_PATH)
    catalog: str = Field("catalog.db", description="'{where}' must be a file path or URL")
    policies: str = Field("policies", description=_PATH)
    audit: str = Field("audit", description=_PATH)
    state: str = Field("state", description=_PATH)
    spark: _Spark | None = Field(
        None, description="'{where}' must be a mapping with master and conf"
    )
    default_catalog: str = "main"
    default_schema: str = "default"
    verify_plans: bool = True
    pinned_sources: bool = True
    governed_views: bool = True
    mapping_inline_max_keys: NonNegativeInt = Field(
        10_000, description="'{where}' must be a whole number, 0 or more"
    )
    audit_max_bytes: int = 64 * 1024 * 1024
    audit_backup_count: int = 20
    audit_checkpoints: _Checkpoints | None = Field(
        None, description="'{where}' must be a mapping (key, every_lines, every_seconds, witness)"
    )
    api: _Api | None = Field(
        None, description="'{where}' must be a mapping (tokens, secret, row_limit, timeout)"
    )
    policies_ref: str | None = Field(None, coerce_numbers_to_str=True)  # a SHA may be digits
    policies_settle: float = 1.0
    connect: _Connect | None = Field(
        None, description="'{where}' must be a mapping of host, port, tls_cert, tls_key and limits"
    )
    identity: _Identity | None = Field(
        None, description="'{where}' must be a mapping (providers, scim, ldap, console)"
    )


def _message(errors: list[ErrorDetails]) -> str:
    """The first error as one line in the file's terms; pydantic's own line where the field
    has no description."""
    err = errors[0]
    loc, kind = err["loc"], err["type"]
    if kind in ("extra_forbidden", "missing"):
        parent = loc[:-1]
        if parent and isinstance(parent[-1], int):  # inside a list item: say its shape
            return _Token.WHAT.replace("{where}", _where(parent))
        unknown = sorted(
            str(e["loc"][-1])
            for e in errors
            if e["type"] == "extra_forbidden" and e["loc"][:-1] == parent
        )
        known = sorted(_walk(parent)[0].model_fields)  # type: ignore[union-attr]
        section = f"{_where(parent)} " if parent else ""
        return f"unknown {section}setting(s) {', '.join(unknown)}; known: {', '.join(known)}"
    _, template, loc = _walk(loc)
    where = _where(loc)
    if kind == "value_error":
        return f"{where}: {err.get('ctx', {}).get('error', err['msg'])}"
    if kind == "greater_than":
        return f"'{where}' must be positive"
    return template.replace("{where}", where) if template else f"'{where}': {err['msg']}"


def _where(loc: tuple[int | str, ...]) -> str:
    """`api.tokens[1].user` for ("api", "tokens", 1, "user")."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _walk(
    loc: tuple[int | str, ...],
) -> tuple[type[BaseModel] | None, str | None, tuple[int | str, ...]]:
    """The model at `loc`, the message template of its last field or list item, and `loc`
    without the union member pydantic names after a field of several types
    (`connect.fair_share_slots.constrained-int`: the file has no such setting)."""
    model: type[BaseModel] | None = _File
    template = None
    for i, part in enumerate(loc):
        if isinstance(part, int):
            if model is not None:
                template = getattr(model, "WHAT", template)
            continue
        if model is None:
            return None, template, loc[:i]
        info = model.model_fields.get(part)
        if info is None:
            break
        template, model = info.description, _model_in(info.annotation)
    return model, template, loc


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model inside `X`, `X | None` or `list[X] | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in get_args(annotation) if (m := _model_in(a))), None)
