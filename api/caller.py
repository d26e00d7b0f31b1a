"""What one request carries: its audit record and, once authenticated, its caller.

The lowest layer of the API: plain data, importing no other API module but `auth`, so that
discovery, the registry, the dependencies and the routers can all name a `Caller` without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection

from api.auth import Principal
from governance.identity import NO_CLAIMS, IdpClaims

if TYPE_CHECKING:
    from governance.policy.enforcer import Identity, PolicyEnforcer

AUDIT_KEY = "lakegate.audit"
PRINCIPAL_KEY = "lakegate.principal"


@dataclass
class RequestAudit:
    """What the audit line of one request says; routes fill in cmd, src and the decision."""

    ip: str
    request_id: str
    started: float
    caller_context: str | None = None
    user: str | None = None
    auth: str = "TOKEN"  # the ugi's method: TOKEN (Lakegate's own) or OIDC
    claims: IdpClaims = NO_CLAIMS  # issuer and subject behind the user, for the line
    cmd: str | None = None
    src: str | None = None
    dst: str | None = None
    resource: str | None = None  # what a call that touches no table acted on (SCIM)
    allowed: bool | None = None  # None: decided by the status (401/403 are not allowed)
    reason: str | None = None
    stmt_hash: str | None = None
    columns: tuple[str, ...] = ()
    # a statement that ran but whose outcome line is missing: its query id (middleware.py)
    unrecorded_query: str | None = None
    # "outcome" once the request's intent line is on record (Service.write_intent)
    phase: str | None = None


def request_audit(request: HTTPConnection) -> RequestAudit:
    return request.scope[AUDIT_KEY]


@dataclass(frozen=True)
class Caller:
    """The authenticated user of one request, with the policy set in force for all of it."""

    user: str
    ident: Identity
    enforcer: PolicyEnforcer
    principal: Principal
    audit: RequestAudit

    def deny(self, reason: str) -> None:
        self.audit.allowed = False
        self.audit.reason = reason
