"""The REST app: assembles the routers, the middleware and the error handlers.

Nothing here is imported by a router: routers depend on `api.deps` (service, caller,
authentication). A new router is one module built with `deps.authenticated_router` and one
line in `ROUTERS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from api import access, auditing, domains, extensions, statements, unity
from api.caller import request_audit
from api.console import pages
from api.console.gate import ConsoleGate
from api.deps import Service, unauthenticated_routes
from api.errors import ApiError, body
from api.health import HealthRoutes
from api.middleware import AuditMiddleware, AuthMiddleware, FastRoutes, api_error_response
from api.scim import ScimGate
from governance.config import ApiConfig

if TYPE_CHECKING:
    from governance.session.governed import Lakegate

UC_PREFIX = "/api/2.1/unity-catalog"
LG_PREFIX = "/api/lakegate/v1"
CONSOLE_PREFIX = "/ui"  # the web console (api/console): HTML, not in the OpenAPI schema

ROUTERS: tuple[tuple[APIRouter, str], ...] = (
    (unity.router, UC_PREFIX),
    (extensions.router, LG_PREFIX),
    (domains.router, LG_PREFIX),
    (statements.router, LG_PREFIX),
    (access.router, LG_PREFIX),
    (auditing.router, LG_PREFIX),
    (pages.router, CONSOLE_PREFIX),
)


def create_app(
    lg: Lakegate, cfg: ApiConfig | None = None, *, tokens_from: Path | None = None
) -> FastAPI:
    """The FastAPI app over one Lakegate; `cfg` overrides lakegate.yaml's `api:` section;
    `tokens_from` (the server's lakegate.yaml) is re-read for tokens while it runs."""
    app = FastAPI(
        title="Lakegate REST API",
        version="1.0",
        description=(
            "Governed discovery of Delta Lake tables: a Unity Catalog-compatible read-only "
            f"API under `{UC_PREFIX}`, and Lakegate's governance, domain registry and SQL "
            f"statements under `{LG_PREFIX}`. Every request needs `Authorization: Bearer "
            "<token>`, sees only what its user may see, and is written to the audit log "
            "before it is answered."
        ),
    )
    for router, prefix in ROUTERS:
        app.include_router(router, prefix=prefix)
    missing = unauthenticated_routes(app.routes)
    if missing:
        raise RuntimeError(f"routes without authentication: {', '.join(missing)}")
    service = Service(lg, cfg, tokens_from=tokens_from)
    app.state.service = service

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
        return JSONResponse(
            body(exc.status_code, msg), exc.status_code, headers=getattr(exc, "headers", None)
        )

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, with its unused 422 answers dropped (validation errors are 400
        in UC's error shape)."""
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        for item in schema.get("paths", {}).values():
            for op in item.values():
                op.get("responses", {}).pop("422", None)
                if "401" in op.get("responses", {}):
                    op["security"] = [{"bearer": []}]
        components = schema.setdefault("components", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.get("schemas", {}).pop(name, None)
        components["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "a token listed in lakegate.yaml `api.tokens` (by its SHA-256), "
                "or a signed token `user.expiry.signature`",
            }
        }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    public = frozenset(
        p
        for p in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
        if p
    )
    app.add_middleware(
        FastRoutes, routes=[r for r in iter_route_contexts(app.routes) if r.endpoint in unity.FAST]
    )
    app.add_middleware(AuthMiddleware, service=service, public=public, routes=app.routes)
    app.add_middleware(ConsoleGate, service=service)  # console sign-in, cookie, CSRF, headers
    app.add_middleware(ScimGate, service=service)  # /scim/v2: the SCIM client's tokens only
    app.add_middleware(AuditMiddleware, service=service)  # sees every audited answer
    # probes and metrics (no token, not audited); every request counted by route and status
    app.add_middleware(HealthRoutes, lg=lg, routes=list(iter_route_contexts(app.routes)))
    return app
