"""Unity Catalog's read-only discovery API (catalogs, schemas, tables), filtered per caller.

Shapes follow UC's OpenAPI spec (`/api/2.1/unity-catalog`), checked against the official
`unitycatalog-client`. A list never fails with 403: it leaves out what the caller may not
see; a single object the caller may not see is 404, worded exactly like a missing one.
These are the hot discovery routes, so they skip FastAPI's per-request parameter machinery
(which costs more than the lookup itself): `FastRoutes` (middleware.py) calls the `FAST`
ones directly after authenticating them as the router's dependency would, parameters are
read from the request here and declared for the OpenAPI schema with `openapi_extra`, and
responses are prebuilt JSON bytes (see discovery.py) documented by the `response_model`s.

Lakegate never vends storage credentials: UC's `temporary-*-credentials` routes answer 501
(a client that reads files directly would bypass row filters and masks).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request, Response

from api.deps import CallerDep, authenticated_router, get_service
from api.discovery import (
    CATALOG_NAME_PATTERN,
    SCHEMA_NAME_PATTERN,
    TABLE_NAME_PATTERN,
    TOKEN_PATTERN,
    decode_token,
    page_size,
    split_name,
)
from api.errors import ApiError, responses
from api.models import (
    ListCatalogsResponse,
    ListSchemasResponse,
    ListTablesResponse,
    TableExists,
    UcCatalogInfo,
    UcSchemaInfo,
    UcTableInfo,
)

router = authenticated_router(tags=["Unity Catalog"])


def _param(
    name: str, where: str, schema: dict, description: str, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": schema,
        "description": description,
    }


_MAX = _param(
    "max_results",
    "query",
    {"type": "integer", "minimum": 0},
    "page size; 0 or absent: the server's (100); capped at 1000; negative: 400",
)
_TOKEN = _param(
    "page_token",
    "query",
    {"type": "string", "maxLength": 2000, "pattern": TOKEN_PATTERN},
    "next_page_token of the previous page",
)
_NAME_1 = {"type": "string", "pattern": CATALOG_NAME_PATTERN}
_CATALOG = _param(
    "catalog_name", "query", {**_NAME_1, "maxLength": 255}, "parent catalog", required=True
)
_SCHEMA = _param(
    "schema_name", "query", {**_NAME_1, "maxLength": 255}, "parent schema", required=True
)
_FULL_NAME_2 = {"type": "string", "pattern": SCHEMA_NAME_PATTERN}
_FULL_NAME_3 = {"type": "string", "pattern": TABLE_NAME_PATTERN}


def _doc(*params: dict[str, Any]) -> dict[str, Any]:
    return {"parameters": list(params)}


def _str(
    request: Request, name: str, *, required: bool = False, max_length: int = 255
) -> str | None:
    value = request.query_params.get(name)
    if value is None and required:
        raise ApiError(400, f"missing required parameter {name}")
    if value is not None and len(value) > max_length:
        raise ApiError(400, f"{name} is longer than {max_length} characters")
    return value


def _paging(request: Request) -> tuple[int, str | None]:
    raw = request.query_params.get("max_results")
    try:
        max_results = None if raw in (None, "") else int(raw)
    except ValueError:
        raise ApiError(400, "max_results must be an integer") from None
    return page_size(max_results), decode_token(_str(request, "page_token", max_length=2000))


def _json(doc: object) -> Response:
    return Response(json.dumps(doc, separators=(",", ":")), media_type="application/json")


@router.get(
    "/catalogs",
    operation_id="listCatalogs",
    response_model=ListCatalogsResponse,
    responses=responses(400),
    openapi_extra=_doc(_MAX, _TOKEN),
)
async def list_catalogs(request: Request, caller: CallerDep) -> Response:
    """Catalogs holding at least one table the caller may read, or that the caller manages."""
    d = get_service(request).discovery
    limit, after = _paging(request)
    items, token = d.list_catalogs(caller, limit, after)
    doc: dict = {"catalogs": [d.catalog_doc(c) for c in items]}
    if token:
        doc["next_page_token"] = token
    return _json(doc)


@router.get(
    "/catalogs/{name}",
    operation_id="getCatalog",
    response_model=UcCatalogInfo,
    responses=responses(404),
    openapi_extra=_doc(_param("name", "path", _NAME_1, "catalog name")),
)
async def get_catalog(request: Request, caller: CallerDep) -> Response:
    d = get_service(request).discovery
    return _json(d.catalog_doc(d.visible_catalog(caller, request.path_params["name"])))


@router.get(
    "/schemas",
    operation_id="listSchemas",
    response_model=ListSchemasResponse,
    responses=responses(400, 404),
    openapi_extra=_doc(_CATALOG, _MAX, _TOKEN),
)
async def list_schemas(request: Request, caller: CallerDep) -> Response:
    """Schemas of a catalog holding a table the caller may read, or that the caller manages."""
    d = get_service(request).discovery
    catalog = _str(request, "catalog_name", required=True)
    limit, after = _paging(request)
    items, token = d.list_schemas(caller, catalog or "", limit, after)
    doc: dict = {"schemas": [d.schema_doc(caller, s) for s in items]}
    if token:
        doc["next_page_token"] = token
    return _json(doc)


@router.get(
    "/schemas/{full_name}",
    operation_id="getSchema",
    response_model=UcSchemaInfo,
    responses=responses(400, 404),
    openapi_extra=_doc(_param("full_name", "path", _FULL_NAME_2, "catalog.schema")),
)
async def get_schema(request: Request, caller: CallerDep) -> Response:
    d = get_service(request).discovery
    c, s = split_name(request.path_params["full_name"], 2)
    return _json(d.schema_doc(caller, d.visible_schema(caller, c, s)))


@router.get(
    "/tables",
    operation_id="listTables",
    response_model=ListTablesResponse,
    responses=responses(400, 404),
    openapi_extra=_doc(_CATALOG, _SCHEMA, _MAX, _TOKEN),
)
async def list_tables(request: Request, caller: CallerDep) -> Response:
    """Tables the caller may read, each with only the columns the caller may read."""
    d = get_service(request).discovery
    catalog = _str(request, "catalog_name", required=True) or ""
    schema = _str(request, "schema_name", required=True) or ""
    limit, after = _paging(request)
    items, token = d.list_tables(caller, catalog, schema, limit, after)
    parts = d.tables_json(caller, items)
    tail = b"]" + (b',"next_page_token":' + json.dumps(token).encode() if token else b"") + b"}"
    return Response(b'{"tables":[' + b",".join(parts) + tail, media_type="application/json")


@router.get(
    "/tables/{full_name}",
    operation_id="getTable",
    response_model=UcTableInfo,
    responses=responses(400, 404),
    openapi_extra=_doc(
        _param("full_name", "path", _FULL_NAME_3, "catalog.schema.table"),
        _param(
            "read_streaming_table_as_managed",
            "query",
            {"type": "boolean"},
            "accepted for compatibility; Delta tables only here",
        ),
        _param(
            "read_materialized_view_as_managed",
            "query",
            {"type": "boolean"},
            "accepted for compatibility; Delta tables only here",
        ),
    ),
)
async def get_table(request: Request, caller: CallerDep) -> Response:
    """One table; 404 if it does not exist or the caller may not read it."""
    d = get_service(request).discovery
    table, access = d.visible_table(caller, request.path_params["full_name"])
    return Response(d.tables_json(caller, [(table, access)])[0], media_type="application/json")


@router.get(
    "/tables/{full_name}/exists",
    operation_id="getTableExists",
    response_model=TableExists,
    responses=responses(400),
    openapi_extra=_doc(_param("full_name", "path", _FULL_NAME_3, "catalog.schema.table")),
)
async def table_exists(request: Request, caller: CallerDep) -> Response:
    """Whether the table exists for the caller: false for a hidden table, as for a missing
    one (the audit line records the refusal)."""
    try:
        get_service(request).discovery.visible_table(caller, request.path_params["full_name"])
    except ApiError as e:
        if e.status != 404:
            raise
        return _json({"table_exists": False})
    return _json({"table_exists": True})


FAST = (list_catalogs, get_catalog, list_schemas, get_schema, list_tables, get_table, table_exists)

NO_CREDENTIALS = (
    "Lakegate does not vend storage credentials; query through the gateway or /statements"
)


async def _no_credentials(caller: CallerDep) -> Response:
    """Refused: credentials to the files would bypass row filters, masks and the audit."""
    caller.deny(NO_CREDENTIALS)
    raise ApiError(501, NO_CREDENTIALS)


for _path, _op in (
    ("/temporary-table-credentials", "generateTemporaryTableCredentials"),
    ("/temporary-path-credentials", "generateTemporaryPathCredentials"),
    ("/temporary-volume-credentials", "generateTemporaryVolumeCredentials"),
    ("/temporary-model-version-credentials", "generateTemporaryModelVersionCredentials"),
):
    router.post(
        _path, operation_id=_op, responses=responses(501), summary=f"{_op}: not supported (501)"
    )(_no_credentials)
