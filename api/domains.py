"""Domain registry routes: domains (from the policies), their tables and data products.

Reading is open to every authenticated user (the registry is how people find data and who
owns it), filtered so no table name the caller may not read appears. Creating, changing and
retiring a product is for the owners of its domain only: anyone else gets 403, and the
attempt is in the audit log like every request.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Annotated

from fastapi import Query, Request

from api.caller import Caller
from api.deps import CallerDep, authenticated_router, get_service
from api.discovery import TOKEN_PATTERN, decode_token, encode_token, page_size
from api.errors import ApiError, responses
from api.models import (
    DomainInfo,
    ListDomainsResponse,
    ListDomainTablesResponse,
    ListProductsResponse,
    ProductCreate,
    ProductInfo,
    ProductUpdate,
    Stage,
)
from api.registry import Registry
from catalog.products import (
    STAGES,
    DataProduct,
    ProductConflict,
    ProductError,
    check_domain,
    check_transition,
    normalise,
)
from governance.errors import AuditUnavailable
from governance.policy.model import Domain

router = authenticated_router(tags=["Lakegate: domains and data products"])


def _domain(reg: Registry, caller: Caller, name: str) -> Domain:
    d = reg.domains(caller).get(name.lower())
    if d is None:
        raise ApiError(404, f"Domain not found: {name[:128]}")
    return d


def _domain_info(reg: Registry, caller: Caller, d: Domain) -> dict:
    stages = dict.fromkeys(STAGES, 0)
    for p in reg.products(d.name):
        stages[p.stage] += 1
    return {
        "name": d.name,
        "description": d.description,
        "owners": [p.key for p in d.owners],
        "schemas": list(d.schemas),
        "is_owner": reg.is_owner(caller, d),
        "table_count": len(reg.domain_tables(caller, d)),
        "product_count": sum(n for s, n in stages.items() if s != "retired"),
        "products_by_stage": stages,
    }


@router.get(
    "/domains",
    operation_id="listDomains",
    response_model=ListDomainsResponse,
    responses=responses(),
)
async def list_domains(request: Request, caller: CallerDep) -> dict:
    """Every domain with its owners and schemas; table counts are of tables you may read."""
    reg = get_service(request).registry
    return {
        "domains": [_domain_info(reg, caller, d) for _, d in sorted(reg.domains(caller).items())]
    }


@router.get(
    "/domains/{name}", operation_id="getDomain", response_model=DomainInfo, responses=responses(404)
)
async def get_domain(request: Request, caller: CallerDep, name: str) -> dict:
    reg = get_service(request).registry
    return _domain_info(reg, caller, _domain(reg, caller, name))


@router.get(
    "/domains/{name}/tables",
    operation_id="listDomainTables",
    response_model=ListDomainTablesResponse,
    responses=responses(400, 404),
)
async def list_domain_tables(
    request: Request,
    caller: CallerDep,
    name: str,
    max_results: Annotated[int | None, Query(ge=0)] = None,
    page_token: Annotated[str | None, Query(max_length=2000, pattern=TOKEN_PATTERN)] = None,
) -> dict:
    """The domain's tables that you may read (a table belongs to exactly one domain)."""
    reg = get_service(request).registry
    d = _domain(reg, caller, name)
    limit = page_size(max_results)
    after = decode_token(page_token)
    tables = reg.domain_tables(caller, d)
    start = bisect.bisect_right([t.full_name for t in tables], after) if after else 0
    page = tables[start : start + limit]
    ps = caller.enforcer.policy_set
    by_table = reg.products_by_table()
    doc: dict = {
        "tables": [
            {
                "full_name": t.full_name,
                "comment": t.comment,
                "tags": sorted(ps.table_tags(t.catalog, t.schema, t.name)),
                "products": by_table.get(t.full_name, []),
            }
            for t in page
        ]
    }
    if start + limit < len(tables):
        doc["next_page_token"] = encode_token(page[-1].full_name)
    return doc


@router.get(
    "/domains/{name}/products",
    operation_id="listDomainProducts",
    response_model=ListProductsResponse,
    responses=responses(404),
)
async def list_domain_products(
    request: Request, caller: CallerDep, name: str, stage: Stage | None = None
) -> dict:
    reg = get_service(request).registry
    d = _domain(reg, caller, name)
    return {
        "products": [
            reg.view(caller, p) for p in reg.products(d.name) if stage is None or p.stage == stage
        ]
    }


@router.get(
    "/products",
    operation_id="listProducts",
    response_model=ListProductsResponse,
    responses=responses(400),
)
async def list_products(
    request: Request,
    caller: CallerDep,
    domain: Annotated[str | None, Query(max_length=128)] = None,
    stage: Stage | None = None,
) -> dict:
    """Data products of every domain (or one), optionally of one lifecycle stage."""
    reg = get_service(request).registry
    return {
        "products": [
            reg.view(caller, p) for p in reg.products(domain) if stage is None or p.stage == stage
        ]
    }


@router.get(
    "/products/{name}",
    operation_id="getProduct",
    response_model=ProductInfo,
    responses=responses(404),
)
async def get_product(request: Request, caller: CallerDep, name: str) -> dict:
    """One product, with its freshness objective checked against the Delta commit history."""
    reg = get_service(request).registry
    p = reg.product(name)
    if p is None:
        raise ApiError(404, f"Product not found: {name[:128]}")
    return reg.view(caller, p)


def _require_owner(reg: Registry, caller: Caller, domain_name: str, action: str) -> None:
    d = reg.domains(caller).get(domain_name)
    if d is None:
        raise ApiError(400, f"domain '{domain_name}' is not defined in the policies")
    if not reg.is_owner(caller, d):
        msg = (
            f"access denied: user {caller.user} may not {action} data products of domain "
            f"{domain_name}: only its owners ({', '.join(p.key for p in d.owners)}) may"
        )
        caller.deny(msg)
        raise ApiError(403, msg)


def intent(request: Request, caller: Caller) -> None:
    """Audit before effect: the change's intent line, before the registry changes; 503 and
    no change when it cannot be written."""
    try:
        get_service(request).write_intent(caller.audit)
    except AuditUnavailable as e:
        raise ApiError(503, str(e)) from None


def _checked(reg: Registry, p: DataProduct) -> DataProduct:
    try:
        p = normalise(p)
        check_domain(p, reg.domain_schemas())
    except ProductError as e:
        raise ApiError(400, str(e)) from None
    return p


@router.post(
    "/products",
    operation_id="createProduct",
    response_model=ProductInfo,
    status_code=201,
    responses=responses(400, 403, 409),
)
def create_product(request: Request, caller: CallerDep, body: ProductCreate) -> dict:
    """Register a data product; only the owners of its domain may."""
    reg = get_service(request).registry
    caller.audit.dst = f"product:{body.name}"
    domain = body.domain.strip().lower()
    _require_owner(reg, caller, domain, "create")
    p = _checked(
        reg,
        DataProduct(
            name=body.name,
            domain=domain,
            description=body.description,
            output_tables=tuple(body.output_tables),
            stage=body.stage,
            tags=tuple(body.tags),
            classification=body.classification,
            freshness=body.freshness,
        ),
    )
    intent(request, caller)
    try:
        created = reg.store.create(p, caller.user)
    except ProductConflict as e:
        raise ApiError(409, str(e)) from None
    return reg.view(caller, created)


def _change(request: Request, caller: Caller, name: str, fields: dict, action: str) -> dict:
    reg = get_service(request).registry
    caller.audit.dst = f"product:{name.lower()[:128]}"
    old = reg.product(name)
    if old is None:
        raise ApiError(404, f"Product not found: {name[:128]}")
    _require_owner(reg, caller, old.domain, action)
    if old.source != "api":
        raise ApiError(
            409,
            f"product '{old.name}' is defined in {old.source[5:]}; change it "
            "there (through review)",
            "ALREADY_EXISTS",
        )
    if "stage" in fields:
        try:
            check_transition(old.stage, fields["stage"])
        except ProductConflict as e:
            raise ApiError(409, str(e), "INVALID_STATE") from None
    new = _checked(reg, replace(old, **fields))
    intent(request, caller)
    try:
        updated = reg.store.update(new, caller.user, expected_updated_at=old.updated_at)
    except ProductConflict as e:
        raise ApiError(409, str(e), "ABORTED") from None
    return reg.view(caller, updated)


@router.patch(
    "/products/{name}",
    operation_id="updateProduct",
    response_model=ProductInfo,
    responses=responses(400, 403, 404, 409),
)
def update_product(request: Request, caller: CallerDep, name: str, body: ProductUpdate) -> dict:
    """Change a product's description, tables, stage, tags, classification or freshness."""
    fields = {k: getattr(body, k) for k in body.model_fields_set}
    for k in ("output_tables", "tags"):
        if k in fields:
            if fields[k] is None:
                raise ApiError(400, f"{k} cannot be null; send [] to empty it")
            fields[k] = tuple(fields[k])
    for k in ("description", "stage"):
        if k in fields and fields[k] is None:
            raise ApiError(400, f"{k} cannot be null")
    return _change(request, caller, name, fields, "update")


@router.post(
    "/products/{name}/retire",
    operation_id="retireProduct",
    response_model=ProductInfo,
    responses=responses(403, 404, 409),
)
def retire_product(request: Request, caller: CallerDep, name: str) -> dict:
    """Move a product to `retired` (terminal; the record stays for lineage and audit)."""
    return _change(request, caller, name, {"stage": "retired"}, "retire")
