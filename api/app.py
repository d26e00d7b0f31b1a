"""The REST app: authentication, the audit line of every request, errors, and the routers.

Each request is recorded by an ASGI middleware that sits outside the routes: when a route's
response starts, the middleware writes the audit line first and only then lets the response
out. If the line cannot be written the caller gets a 503 and none of the response (fail
closed, as the governed session does for statements).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import Principal, TokenAuth, Unauthenticated
from api.errors import ApiError, body
from audit import AuditEvent, AuditWriteError
from governance.config import ApiConfig
from governance.errors import AuditUnavailable

if TYPE_CHECKING:
    from api.discovery import Discovery
    from api.registry import Registry
    from governance.policy.enforcer import Identity, PolicyEnforcer
    from governance.session import Lakegate

log = logging.getLogger("lakegate.api")
UC_PREFIX = "/api/2.1/unity-catalog"
LG_PREFIX = "/api/lakegate/v1"
_AUDIT_KEY = "lakegate.audit"


@dataclass
class RequestAudit:
    """What the audit line of one request says; routes fill in cmd, src and the decision."""

    ip: str
    request_id: str
    started: float
    caller_context: str | None = None
    user: str | None = None
    cmd: str | None = None
    src: str | None = None
    dst: str | None = None
    allowed: bool | None = None  # None: decided by the status (401/403 are not allowed)
    reason: str | None = None
    stmt_hash: str | None = None
    columns: tuple[str, ...] = ()


def request_audit(request: Request) -> RequestAudit:
    return request.scope[_AUDIT_KEY]


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


class Service:
    """What the routes share: the Lakegate, the token checker, discovery and the registry."""

    def __init__(self, lg: Lakegate, cfg: ApiConfig | None = None) -> None:
        from api.discovery import Discovery
        from api.registry import Registry

        self.lg = lg
        self.cfg = cfg or lg.config.api
        self.auth = TokenAuth(self.cfg)
        self.discovery: Discovery = Discovery(lg)
        self.registry: Registry = Registry(lg, self.discovery)

    def write_audit(self, rec: RequestAudit, status: int) -> None:
        allowed = rec.allowed if rec.allowed is not None else status not in (401, 403)
        if rec.user is None and status >= 400:
            allowed = False  # unauthenticated; public pages (the OpenAPI docs) stay allowed
        reason = rec.reason if status >= 400 or not allowed else None
        self.lg.audit.write([AuditEvent(
            allowed=allowed, user=rec.user or "anonymous", auth="TOKEN", ip=rec.ip,
            proto="rest", cmd=rec.cmd or "unknown", src=rec.src, dst=rec.dst,
            caller_context=rec.caller_context, succeeded=status < 400, query_id=rec.request_id,
            stmt_hash=rec.stmt_hash, columns=rec.columns, reason=reason,
            duration_ms=int((time.perf_counter() - rec.started) * 1000),
        )])


class AuditMiddleware:
    """Writes each request's audit line before the response leaves; 503 if it cannot."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        headers = dict(scope.get("headers") or ())
        ctx = headers.get(b"x-lakegate-caller-context")
        rec = RequestAudit(
            ip=client[0] if client else "unknown", request_id=uuid.uuid4().hex,
            started=time.perf_counter(),
            caller_context=ctx.decode("utf-8", "replace")[:200] if ctx else None)
        scope[_AUDIT_KEY] = rec
        state = {"started": False, "dropped": False}

        async def audited_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                if not self._record(rec, message["status"], scope):
                    state["dropped"] = True
                    await _send_error(send, 503, "audit log unavailable: request refused")
                    return
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"],
                                      (b"x-request-id", rec.request_id.encode())]
            elif state["dropped"]:
                return
            await send(message)

        try:
            await self.app(scope, receive, audited_send)
        except Exception:
            if not state["started"]:
                rec.reason = rec.reason or "internal error"
                self._record(rec, 500, scope)
            raise

    def _record(self, rec: RequestAudit, status: int, scope: Scope) -> bool:
        if rec.cmd is None:  # a route that needs no token (the OpenAPI docs) or no route
            route, endpoint = scope.get("route"), scope.get("endpoint")
            rec.cmd = getattr(route, "operation_id", None) or getattr(route, "name", None) \
                or getattr(endpoint, "__name__", None)
        try:
            self.service.write_audit(rec, status)
        except (AuditWriteError, OSError) as e:
            log.error("request %s refused: %s", rec.request_id, e)
            return False
        return True


async def _send_error(send: Send, status: int, message: str) -> None:
    import json

    payload = json.dumps(body(status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


async def api_error_response(request: Request, exc: ApiError) -> JSONResponse:
    rec = request_audit(request)
    rec.reason = rec.reason or exc.message
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(body(exc.status, exc.message, exc.error_code), exc.status,
                        headers=headers)


Handler = Callable[[Request], Awaitable[Response]]


class FastRoutes:
    """Dispatches the hot discovery GETs straight to their handlers.

    FastAPI's per-request routing and dependency machinery costs more CPU than a whole
    `getTable` (measured: ~45% of it), which under 32 concurrent clients is the p99. These
    handlers take only the Request and return a Response, so they are called directly here;
    the same functions stay registered as FastAPI routes, which document them in the OpenAPI
    schema and serve anything this does not match (other methods, odd paths).
    """

    def __init__(self, app: ASGIApp, routes: list[tuple[re.Pattern[str], Handler]]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            for pattern, handler in self.routes:
                m = pattern.fullmatch(path)
                if m is None:
                    continue
                scope["path_params"] = m.groupdict()
                request = Request(scope, receive)
                try:
                    response = await handler(request)
                except ApiError as e:
                    response = await api_error_response(request, e)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# authentication ---------------------------------------------------------------------------

def get_service(request: Request) -> Service:
    return request.app.state.service


def authenticate(request: Request, cmd: str | None = None) -> Caller:
    """The request's user, with the policy set pinned for the whole request; 401 without a
    valid bearer token. `cmd` names the operation in the audit line (default: the route's
    operation id)."""
    svc: Service = request.app.state.service
    rec: RequestAudit = request.scope[_AUDIT_KEY]
    if cmd is None:
        route = request.scope.get("route")
        cmd = getattr(route, "operation_id", None) or getattr(route, "name", None)
    rec.cmd = cmd
    try:
        principal = svc.auth.authenticate(request.headers.get("authorization"))
    except Unauthenticated as e:
        rec.reason = str(e)
        raise ApiError(401, str(e)) from None
    rec.user = principal.user
    try:
        svc.lg.maybe_reload()
    except AuditUnavailable as e:
        raise ApiError(503, str(e)) from None
    enforcer = svc.lg.enforcer
    return Caller(principal.user, enforcer.identity(principal.user), enforcer, principal, rec)


async def get_caller(request: Request) -> Caller:
    """`authenticate` as a FastAPI dependency (async: no thread hop per request)."""
    return authenticate(request)


# the app ------------------------------------------------------------------------------------


def create_app(lg: Lakegate, cfg: ApiConfig | None = None) -> FastAPI:
    """The FastAPI app over one Lakegate; `cfg` overrides lakegate.yaml's `api:` section."""
    from api import domains, extensions, statements, unity

    service = Service(lg, cfg)
    app = FastAPI(
        title="Lakegate REST API",
        version="1.0",
        description=(
            "Governed discovery of Delta Lake tables: a Unity Catalog-compatible read-only "
            f"API under `{UC_PREFIX}`, and Lakegate's governance, domain registry and SQL "
            f"statements under `{LG_PREFIX}`. Every request needs `Authorization: Bearer "
            "<token>`, sees only what its user may see, and is written to the audit log "
            "before it is answered."),
    )
    app.state.service = service
    app.include_router(unity.router, prefix=UC_PREFIX)
    app.include_router(extensions.router, prefix=LG_PREFIX)
    app.include_router(domains.router, prefix=LG_PREFIX)
    app.include_router(statements.router, prefix=LG_PREFIX)

    app.add_exception_handler(ApiError, api_error_response)  # type: ignore[arg-type]

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = f"invalid {where}: {first.get('msg', 'bad value')}" if where else "invalid request"
        request_audit(request).reason = msg
        return JSONResponse(body(400, msg), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        rec = request_audit(request)
        rec.cmd = rec.cmd or "unknown"
        msg = str(exc.detail) if exc.detail else "error"
        rec.reason = msg
        return JSONResponse(body(exc.status_code, msg), exc.status_code,
                            headers=getattr(exc, "headers", None))

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, with its unused 422 answers dropped (validation errors are 400
        in UC's error shape)."""
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        for item in schema.get("paths", {}).values():
            for op in item.values():
                op.get("responses", {}).pop("422", None)
                if "401" in op.get("responses", {}):
                    op["security"] = [{"bearer": []}]
        components = schema.setdefault("components", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.get("schemas", {}).pop(name, None)
        components["securitySchemes"] = {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "a token listed in lakegate.yaml `api.tokens` (by its SHA-256), "
                           "or a signed token `user.expiry.signature`"}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(FastRoutes, routes=unity.FAST_ROUTES)
    app.add_middleware(AuditMiddleware, service=service)  # outermost: sees every answer
    return app
