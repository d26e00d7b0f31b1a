"""The console's pages: catalog, effective access, policy changes, audit.

Each page is a GET that reads and renders, with data from the same functions the JSON
routes answer with (discovery, `api.extensions`, `api.access`, `api.auditing`), so a page
never shows what the API would not give the same person. Routes authenticate like every
router (`authenticated_router`) and stay out of the OpenAPI schema.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from api import access, auditing, extensions
from api.caller import Caller
from api.console import impact
from api.console.gate import CSRF, checked_form, cookies
from api.console.render import render
from api.deps import CallerDep, Service, authenticated_router, get_service
from api.errors import ApiError
from governance.errors import LakegateError

router = authenticated_router(include_in_schema=False)

Text = Annotated[str | None, Query(max_length=200)]
NAV = (
    ("catalog", "Catalog"),
    ("access", "Effective access"),
    ("policies", "Policy changes"),
    ("audit", "Audit"),
)


def _page(
    request: Request, caller: Caller, template: str, title: str, nav: str, **ctx: Any
) -> HTMLResponse:
    context = {
        "user": caller.user,
        "csrf": cookies(request.scope).get(CSRF, ""),
        "nav": NAV,
        "active": nav,
        "title": title,
        **ctx,
    }
    return HTMLResponse(render(template, context), ctx.get("status", 200))


def _failed(caller: Caller, e: ApiError) -> dict[str, Any]:
    caller.audit.reason = caller.audit.reason or e.message
    if e.status in (401, 403):
        caller.audit.allowed = False
    return {"error": e.message, "status": e.status}


@router.get("", name="consoleHome")
@router.get("/", name="consoleIndex")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/catalog", 303)


# catalog ------------------------------------------------------------------------------------


def _tree(svc: Service, caller: Caller) -> list[dict[str, Any]]:
    """Catalogs, schemas and tables the caller may see, with domains and products."""
    disc = svc.discovery
    ps = caller.enforcer.policy_set
    products = svc.registry.products_by_table()
    out = []
    for cat in disc.list_catalogs(caller, 1000, None)[0]:
        schemas = []
        for s in disc.list_schemas(caller, cat.name, 1000, None)[0]:
            tables = [
                {
                    "full_name": t.full_name,
                    "name": t.name,
                    "comment": t.comment,
                    "tags": sorted(ps.table_tags(t.catalog, t.schema, t.name)),
                    "columns": len(a.visible_columns),
                    "products": products.get(t.full_name, []),
                }
                for t, a in disc.list_tables(caller, cat.name, s.name, 1000, None)[0]
            ]
            schemas.append(
                {
                    "name": s.name,
                    "full_name": s.full_name,
                    "comment": s.comment,
                    "domain": ps.domain_of_schema(s.catalog, s.name),
                    "tables": tables,
                }
            )
        out.append({"name": cat.name, "comment": cat.comment, "schemas": schemas})
    return out


@router.get("/catalog", name="consoleCatalog")
async def catalog(request: Request, caller: CallerDep, q: Text = None) -> HTMLResponse:
    svc = get_service(request)
    results = None
    if q:
        results = (await extensions.search(request, caller, q=q, limit=50))["results"]
    return _page(
        request,
        caller,
        "catalog.html",
        "Catalog",
        "catalog",
        tree=_tree(svc, caller),
        q=q or "",
        results=results,
    )


@router.get("/catalog/{full_name}", name="consoleTable")
async def table(request: Request, caller: CallerDep, full_name: str) -> HTMLResponse:
    svc = get_service(request)
    try:
        detail = await extensions.table_detail(request, caller, full_name)
        history = await extensions.table_history(request, caller, full_name, limit=20)
    except ApiError as e:
        return _page(request, caller, "error.html", "Table", "catalog", **_failed(caller, e))
    products = []
    for name in detail["products"]:
        p = svc.registry.product(name)
        if p is not None:
            products.append(svc.registry.view(caller, p))
    return _page(
        request,
        caller,
        "table.html",
        detail["full_name"],
        "catalog",
        t=detail,
        history=history,
        products=products,
    )


# effective access ------------------------------------------------------------------------------


@router.get("/access", name="consoleAccess")
async def effective(
    request: Request, caller: CallerDep, table: Text = None, user: Text = None
) -> HTMLResponse:
    svc = get_service(request)
    snap = svc.discovery.snapshot()
    readable = [n for n, t in sorted(snap.tables.items()) if svc.discovery.can_see(caller, t)]
    ctx: dict[str, Any] = {"tables": readable, "table": table or "", "person": user or ""}
    try:
        if table:
            ctx["readers"] = access.table_readers(svc, caller, table)
        else:
            ctx["person_access"] = access.person_access(svc, caller, user or caller.user)
    except ApiError as e:
        ctx.update(_failed(caller, e))
    return _page(request, caller, "access.html", "Effective access", "access", **ctx)


# policy changes ------------------------------------------------------------------------------


@router.get("/policies", name="consolePolicies")
async def policies(
    request: Request, caller: CallerDep, old: Text = None, new: Text = None
) -> HTMLResponse:
    svc = get_service(request)
    ctx: dict[str, Any] = {
        "old": old or "HEAD~1",
        "new": new or "HEAD",
        "admin": impact.is_admin(svc, caller),
        "f": impact.ImpactForm(impact.LIVE, "HEAD", "", "proposed.yaml", None, 60),
    }
    try:
        diff = access.policy_diff(svc, caller, ctx["old"], ctx["new"])
        by_user: dict[str, dict[str, list]] = {}
        for c in diff["changes"]:
            side = "gains" if c["widens"] else "loses"
            by_user.setdefault(c["user"], {"gains": [], "loses": []})[side].append(c)
        ctx.update(diff=diff, by_user=sorted(by_user.items()))
    except ApiError as e:
        ctx.update(_failed(caller, e))
    return _page(request, caller, "policies.html", "Policy changes", "policies", **ctx)


@router.post("/policies/impact", name="consolePolicyImpact")
async def policies_impact(request: Request, caller: CallerDep) -> HTMLResponse:
    """`lakegate policy impact` for an admin: rows and column states per affected user or
    group before and after, and the access diff (api/console/impact.py). Checked like the
    sign-in form (CSRF, origin), refused to anyone who does not manage every table, and
    audited as an admin act (an intent line before any count, the request's line its outcome)."""
    svc = get_service(request)
    ctx: dict[str, Any] = {
        "old": "HEAD~1",
        "new": "HEAD",
        "admin": False,
        "f": impact.ImpactForm(impact.LIVE, "HEAD", "", "proposed.yaml", None, 60),
    }
    form = await checked_form(
        request.scope, request.receive, max_bytes=impact.MAX_FORM, max_fields=8
    )
    if isinstance(form, str):
        caller.deny(f"policy impact: {form}")
        ctx.update(error=form, status=403)
        return _page(request, caller, "policies.html", "Policy changes", "policies", **ctx)
    if not impact.is_admin(svc, caller):
        caller.deny(f"policy impact: {caller.user} does not manage every table (admins only)")
        ctx.update(error="Only admins may run a policy impact.", status=403)
        return _page(request, caller, "policies.html", "Policy changes", "policies", **ctx)
    ctx["admin"] = True
    try:
        f = impact.ImpactForm.parse(form)
        ctx["f"] = f
        ctx["result"] = await run_in_threadpool(impact.run, svc, caller, f)
    except ApiError as e:
        ctx.update(_failed(caller, e))
    except LakegateError as e:  # the audit log refused the intent or the outcome
        ctx.update(_failed(caller, ApiError(503, str(e).splitlines()[0])))
    return _page(request, caller, "policies.html", "Policy changes", "policies", **ctx)


# audit -------------------------------------------------------------------------------------------


@router.get("/audit", name="consoleAudit")
async def audit(
    request: Request,
    caller: CallerDep,
    user: Text = None,
    table: Text = None,
    cmd: Text = None,
    denied: Text = None,
    policy_version: Text = None,
    since: Text = None,
    until: Text = None,
    before: Annotated[str | None, Query(max_length=64)] = None,
    size: Annotated[int, Query(ge=1, le=auditing.MAX_PAGE_SIZE)] = auditing.PAGE_SIZE,
) -> HTMLResponse:
    """One page of the timeline (newest first, `before`: the cursor of the page before),
    with the charts and the hash chain check of the lines that page read."""
    svc = get_service(request)
    q = auditing.AuditQuery(
        user=user,
        table=table,
        cmd=cmd,
        denied=bool(denied),
        policy_version=policy_version,
        since=since,
        until=until,
    )
    ctx: dict[str, Any] = {"f": q, "current_version": svc.lg.policy_version, "before": before}
    try:
        ctx["found"] = ctx["summary"] = auditing.page(svc, caller, q, before, size)
    except ApiError as e:
        ctx.update(_failed(caller, e))
    return _page(request, caller, "audit.html", "Audit", "audit", **ctx)
