"""What routers depend on: the shared service and the authenticated caller.

Routers import this module (never `api.app`, which only assembles the application). Every
router is built with `authenticated_router`, whose router-level dependency is `get_caller`:
a route cannot be added without authentication, and `create_app` refuses to start if one
was (see `unauthenticated_routes`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import BaseRoute

from api.authenticator import Authenticator
from api.caller import AUDIT_KEY, PRINCIPAL_KEY, Caller, RequestAudit
from api.console_sessions import ConsoleSessions
from api.directory import directory_of
from api.discovery import Discovery
from api.errors import ApiError
from api.registry import Registry
from audit import AuditEvent
from governance.config import ApiConfig
from governance.errors import AuditUnavailable
from governance.session.recorder import write_or_refuse

if TYPE_CHECKING:
    from governance.session.governed import Lakegate


class Service:
    """What the routes share: the Lakegate, the token checker, discovery and the registry."""

    def __init__(
        self, lg: Lakegate, cfg: ApiConfig | None = None, *, tokens_from: Path | None = None
    ) -> None:
        self.lg = lg
        self.cfg = cfg or lg.config.api
        self.directory = directory_of(lg)
        self.auth = Authenticator(self.cfg, lg.config.identity, self.directory, source=tokens_from)
        self.discovery = Discovery(lg)
        self.registry = Registry(lg, self.discovery)
        # the console's signed-in browsers (deprovisioning ends a user's: end_user)
        self.console_sessions = ConsoleSessions()
        #: called with each user the directory deactivates or deletes (SCIM here, or another
        #: server sharing the catalog, seen within the directory's refresh bound): the place
        #: to end that user's sessions (the console's). Tokens remembered are forgotten first.
        self.on_deprovision: list[Callable[[str], None]] = [self.console_sessions.end_user]
        self.directory.subscribe(self.deprovisioned)
        #: the threads REST statements run on (api/statements.py), this app's own: a statement
        #: blocks its thread on Spark, so `api.statement_threads` bounds statements in flight
        #: (threads start on demand, so an app that never runs one starts none)
        self.statements = ThreadPoolExecutor(
            max_workers=self.cfg.statement_threads, thread_name_prefix="lakegate-stmt"
        )

    def close(self) -> None:
        """The app stops serving: its statement threads end once their statements have (a
        queued statement is dropped; its caller is gone with the server). Not a lifespan
        hook: `lakegate serve` runs the app with lifespan off, and tests enter one shared app
        in several TestClients, each of whose exits would run it."""
        self.statements.shutdown(wait=False, cancel_futures=True)

    def deprovisioned(self, user: str) -> None:
        """`user` was deactivated or deleted: its next request is checked anew (and refused
        by the directory), and every hook ends what it holds of that user."""
        self.auth.forget()
        for hook in list(self.on_deprovision):
            hook(user)

    def write_audit(self, rec: RequestAudit, status: int) -> None:
        """The request's audit line, written fail closed (`write_or_refuse`: raises
        `AuditUnavailable`, and the middleware answers 503 instead of the response)."""
        allowed = rec.allowed if rec.allowed is not None else status not in (401, 403)
        if rec.user is None and status >= 400:
            allowed = False  # unauthenticated; public pages (the OpenAPI docs) stay allowed
        write_or_refuse(self.lg.audit, [self._event(rec, status, allowed, rec.phase)])

    def write_intent(self, rec: RequestAudit) -> None:
        """Audit before effect for a call that changes state outside Spark (SCIM, the
        product registry): its intent line is flushed before the change, and the request's
        own line becomes its outcome (same queryId, cmd, src and dst, so `audit query
        --pending` closes it). Raises `AuditUnavailable` when the line cannot be written:
        nothing has changed yet, the caller gets a 503."""
        write_or_refuse(self.lg.audit, [self._event(rec, None, True, "intent")])
        rec.phase = "outcome"
        rec.unrecorded_query = rec.request_id  # from here on, a lost outcome is reported so

    def _event(
        self, rec: RequestAudit, status: int | None, allowed: bool, phase: str | None
    ) -> AuditEvent:
        return AuditEvent(
            allowed=allowed,
            user=rec.user or "anonymous",
            auth=rec.auth,
            issuer=rec.claims.issuer,
            subject=rec.claims.subject,
            resource=rec.resource,
            ip=rec.ip,
            proto="rest",
            cmd=rec.cmd or "unknown",
            src=rec.src,
            dst=rec.dst,
            caller_context=rec.caller_context,
            succeeded=status is not None and status < 400,
            query_id=rec.request_id,
            stmt_hash=rec.stmt_hash,
            columns=rec.columns,
            reason=rec.reason if status is not None and (status >= 400 or not allowed) else None,
            duration_ms=int((time.perf_counter() - rec.started) * 1000),
            phase=phase,
        )


def get_service(request: Request) -> Service:
    return request.app.state.service


def authenticate(request: Request, cmd: str | None = None) -> Caller:
    """The request's caller, with the policy set pinned for the whole request.

    The token was checked before routing (`AuthMiddleware`); a request that reaches a route
    without a principal is refused (401), so a route served outside that middleware fails
    closed. `cmd` names the operation in the audit line (default: the route's operation id).
    """
    svc: Service = request.app.state.service
    rec: RequestAudit = request.scope[AUDIT_KEY]
    if cmd is None:
        route = request.scope.get("route")
        cmd = getattr(route, "operation_id", None) or getattr(route, "name", None)
    rec.cmd = cmd
    principal = request.scope.get(PRINCIPAL_KEY)
    if principal is None:
        rec.reason = "missing bearer token (Authorization: Bearer <token>)"
        raise ApiError(401, rec.reason)
    try:
        svc.lg.maybe_reload()
    except AuditUnavailable as e:
        raise ApiError(503, str(e)) from None
    enforcer = svc.lg.enforcer
    ident = enforcer.identity(principal.user, principal.claims.groups)
    return Caller(principal.user, ident, enforcer, principal, rec)


async def get_caller(request: Request) -> Caller:
    """`authenticate` as a FastAPI dependency (async: no thread hop per request)."""
    return authenticate(request)


CallerDep = Annotated[Caller, Depends(get_caller)]


def authenticated_router(**kwargs: Any) -> APIRouter:
    """An APIRouter whose every route authenticates its caller (router-level dependency);
    FastAPI resolves `get_caller` once per request, so routes may also take `CallerDep`."""
    return APIRouter(dependencies=[Depends(get_caller)], **kwargs)


def unauthenticated_routes(routes: list[BaseRoute]) -> list[str]:
    """API routes (included routers flattened) without the `get_caller` dependency that
    `authenticated_router` gives (must be none)."""
    return [
        f"{sorted(r.methods or ())} {r.path}"
        for r in iter_route_contexts(routes)
        if isinstance(r.original_route, APIRoute)
        and not any(d.dependency is get_caller for d in r.dependencies)
    ]
