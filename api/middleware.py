"""The ASGI layers around the routes: the audit line of every request, authentication before
routing, and the fast path for the hot Unity Catalog GETs.

Each request is recorded by `AuditMiddleware`, outermost: when a response starts, it writes
the audit line first and only then lets the response out. If the line cannot be written the
caller gets a 503 and none of the response (fail closed, as the governed session does for
statements). Inside it, `AuthMiddleware` checks the bearer token before any routing, so the
line names the real caller even for a route that does not exist.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import RouteContext, iter_route_contexts
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import Unauthenticated
from api.authenticator import Deprovisioned
from api.caller import AUDIT_KEY, PRINCIPAL_KEY, Caller, RequestAudit, request_audit
from api.deps import Service, authenticate
from api.errors import OUTCOME_NOT_RECORDED, ApiError, body
from governance.errors import AuditUnavailable

log = logging.getLogger("lakegate.api")


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
            ip=client[0] if client else "unknown",
            request_id=uuid.uuid4().hex,
            started=time.perf_counter(),
            caller_context=ctx.decode("utf-8", "replace")[:200] if ctx else None,
        )
        scope[AUDIT_KEY] = rec
        state = {"started": False, "dropped": False}

        async def audited_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                if not self._record(rec, message["status"], scope):
                    state["dropped"] = True
                    if rec.unrecorded_query is not None:  # it ran: never say "refused"
                        await send_error(
                            send,
                            500,
                            f"the statement ran (query {rec.unrecorded_query}) but neither its "
                            "outcome nor this request could be written to the audit log; "
                            "do not retry",
                            error_code=OUTCOME_NOT_RECORDED,
                        )
                        return
                    await send_error(send, 503, "audit log unavailable: request refused")
                    return
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    (b"x-request-id", rec.request_id.encode()),
                ]
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
            rec.cmd = (
                getattr(route, "operation_id", None)
                or getattr(route, "name", None)
                or getattr(endpoint, "__name__", None)
            )
        try:
            self.service.write_audit(rec, status)
        except AuditUnavailable as e:
            log.error("request %s refused: %s", rec.request_id, e)
            return False
        return True


class AuthMiddleware:
    """Checks the bearer token of every request before routing; 401 without a valid one.

    Only `public` paths (the OpenAPI schema and its viewers) pass without a token. Routing
    comes after, so a valid token on an unknown route is on record as its user, and an
    invalid one learns nothing about which routes exist. The routes' own `get_caller`
    dependency then builds the caller from the principal found here.
    """

    def __init__(
        self, app: ASGIApp, service: Service, public: frozenset[str], routes: list[BaseRoute]
    ) -> None:
        self.app = app
        self.service = service
        self.public = public
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers") or () if k == b"authorization"), None)
        rec: RequestAudit = scope[AUDIT_KEY]
        try:
            principal = self.service.auth.authenticate(
                header.decode("latin-1") if header is not None else None
            )
        except Unauthenticated as e:
            rec.cmd, rec.reason = self._operation(scope), str(e)
            if isinstance(e, Deprovisioned):  # a verified token: the line names its user
                rec.user = e.user
            await send_error(send, 401, str(e), [(b"www-authenticate", b"Bearer")])
            return
        scope[PRINCIPAL_KEY] = principal
        rec.user, rec.auth, rec.claims = principal.user, principal.audit_method, principal.claims
        await self.app(scope, receive, send)

    def _operation(self, scope: Scope) -> str:
        """The operation a refused request was aimed at, for its audit line."""
        for route in iter_route_contexts(self.routes):
            if route.matches(scope)[0] is Match.FULL:
                return getattr(route, "operation_id", None) or getattr(route, "name", "unknown")
        return "unknown"


async def send_error(
    send: Send,
    status: int,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    error_code: str | None = None,
) -> None:
    """An error answer in UC's shape, straight to the ASGI `send`."""
    payload = json.dumps(body(status, message, error_code)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def api_error_response(request: Request, exc: ApiError) -> JSONResponse:
    rec = request_audit(request)
    rec.reason = rec.reason or exc.message
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(body(exc.status, exc.message, exc.error_code), exc.status, headers=headers)


FastHandler = Callable[[Request, Caller], Awaitable[Response]]


class FastRoutes:
    """Dispatches the hot discovery GETs straight to their handlers.

    FastAPI's per-request routing and dependency machinery costs more CPU than a whole
    `getTable` (measured: ~45% of it), which under 32 concurrent clients is the p99. These
    handlers take the Request and the Caller and return a Response, so they are called
    directly here, authenticated exactly as their router's `get_caller` dependency would
    (`authenticate`, before the handler). The same routes stay registered with FastAPI,
    which documents them in the OpenAPI schema and serves anything this does not match.
    """

    def __init__(self, app: ASGIApp, routes: list[RouteContext]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            for route in self.routes:
                m = route.path_regex.match(path)
                if m is None:
                    continue
                scope["path_params"], scope["route"] = m.groupdict(), route
                request = Request(scope, receive)
                handler: FastHandler = route.endpoint
                try:
                    response = await handler(request, authenticate(request, route.operation_id))
                except ApiError as e:
                    response = await api_error_response(request, e)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
