"""Unity Catalog's read-only discovery API (catalogs, schemas, tables), filtered per caller.

Shapes follow UC's OpenAPI spec (`/api/2.1/unity-catalog`), checked against the official
`unitycatalog-client`. A list never fails with 403: it leaves out what the caller may not
see; a single object the caller may not see is 404, worded exactly like a missing one.
These are the hot discovery routes, so they skip FastAPI's per-request parameter machinery
(which costs more than the lookup itself): `FastRoutes` (app.py) calls them directly,
parameters are read from the request here and declared for the OpenAPI schema with
`openapi_extra`, and responses are prebuilt JSON bytes (see discovery.py) documented by the
`response_model`s.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import APIRouter, Request, Response

from api.app import UC_PREFIX, authenticate, get_service
from api.discovery import decode_token, page_size, split_name
from api.errors import ApiError, responses
from api.models import (
    ListCatalogsResponse,
    ListSchemasResponse,
    ListTablesResponse,
    UcCatalogInfo,
    UcSchemaInfo,
    UcTableInfo,
)

router = APIRouter(tags=["Unity Catalog"])


def _param(name: str, where: str, schema: dict, description: str, required: bool = False
           ) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema, "description": description}


_MAX = _param("max_results", "query", {"type": "integer"},
              "page size; 0 or absent: the server's (100); capped at 1000; negative: 400")
_TOKEN = _param("page_token", "query", {"type": "string", "maxLength": 2000},
                "next_page_token of the previous page")
_CATALOG = _param("catalog_name", "query", {"type": "string", "maxLength": 255},
                  "parent catalog", required=True)
_SCHEMA = _param("schema_name", "query", {"type": "string", "maxLength": 255},
                 "parent schema", required=True)


def _doc(*params: dict[str, Any]) -> dict[str, Any]:
    return {"parameters": list(params)}


def _str(request: Request, name: str, *, required: bool = False, max_length: int = 255
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


@router.get("/catalogs", operation_id="listCatalogs", response_model=ListCatalogsResponse,
            responses=responses(400), openapi_extra=_doc(_MAX, _TOKEN))
async def list_catalogs(request: Request) -> Response:
    """Catalogs holding at least one table the caller may read, or that the caller manages."""
    caller = authenticate(request, "listCatalogs")
    d = get_service(request).discovery
    limit, after = _paging(request)
    items, token = d.list_catalogs(caller, limit, after)
    doc: dict = {"catalogs": [d.catalog_doc(c) for c in items]}
    if token:
        doc["next_page_token"] = token
    return _json(doc)


@router.get("/catalogs/{name}", operation_id="getCatalog", response_model=UcCatalogInfo,
            responses=responses(404),
            openapi_extra=_doc(_param("name", "path", {"type": "string"}, "catalog name")))
async def get_catalog(request: Request) -> Response:
    caller = authenticate(request, "getCatalog")
    d = get_service(request).discovery
    return _json(d.catalog_doc(d.visible_catalog(caller, request.path_params["name"])))


@router.get("/schemas", operation_id="listSchemas", response_model=ListSchemasResponse,
            responses=responses(400, 404), openapi_extra=_doc(_CATALOG, _MAX, _TOKEN))
async def list_schemas(request: Request) -> Response:
    """Schemas of a catalog holding a table the caller may read, or that the caller manages."""
    caller = authenticate(request, "listSchemas")
    d = get_service(request).discovery
    catalog = _str(request, "catalog_name", required=True)
    limit, after = _paging(request)
    items, token = d.list_schemas(caller, catalog or "", limit, after)
    doc: dict = {"schemas": [d.schema_doc(caller, s) for s in items]}
    if token:
        doc["next_page_token"] = token
    return _json(doc)


@router.get("/schemas/{full_name}", operation_id="getSchema", response_model=UcSchemaInfo,
            responses=responses(400, 404), openapi_extra=_doc(
                _param("full_name", "path", {"type": "string"}, "catalog.schema")))
async def get_schema(request: Request) -> Response:
    caller = authenticate(request, "getSchema")
    d = get_service(request).discovery
    c, s = split_name(request.path_params["full_name"], 2)
    return _json(d.schema_doc(caller, d.visible_schema(caller, c, s)))


@router.get("/tables", operation_id="listTables", response_model=ListTablesResponse,
            responses=responses(400, 404),
            openapi_extra=_doc(_CATALOG, _SCHEMA, _MAX, _TOKEN))
async def list_tables(request: Request) -> Response:
    """Tables the caller may read, each with only the columns the caller may read."""
    caller = authenticate(request, "listTables")
    d = get_service(request).discovery
    catalog = _str(request, "catalog_name", required=True) or ""
    schema = _str(request, "schema_name", required=True) or ""
    limit, after = _paging(request)
    items, token = d.list_tables(caller, catalog, schema, limit, after)
    parts = d.tables_json(caller, items)
    tail = b"]" + (b',"next_page_token":' + json.dumps(token).encode() if token else b"") + b"}"
    return Response(b'{"tables":[' + b",".join(parts) + tail, media_type="application/json")


@router.get("/tables/{full_name}", operation_id="getTable", response_model=UcTableInfo,
            responses=responses(400, 404), openapi_extra=_doc(
                _param("full_name", "path", {"type": "string"}, "catalog.schema.table"),
                _param("read_streaming_table_as_managed", "query", {"type": "boolean"},
                       "accepted for compatibility; Delta tables only here"),
                _param("read_materialized_view_as_managed", "query", {"type": "boolean"},
                       "accepted for compatibility; Delta tables only here")))
async def get_table(request: Request) -> Response:
    """One table; 404 if it does not exist or the caller may not read it."""
    caller = authenticate(request, "getTable")
    d = get_service(request).discovery
    table, access = d.visible_table(caller, request.path_params["full_name"])
    return Response(d.tables_json(caller, [(table, access)])[0],
                    media_type="application/json")


_NAME = r"(?P<{}>[^/]+)"
FAST_ROUTES = [
    (re.compile(UC_PREFIX + "/catalogs"), list_catalogs),
    (re.compile(UC_PREFIX + "/catalogs/" + _NAME.format("name")), get_catalog),
    (re.compile(UC_PREFIX + "/schemas"), list_schemas),
    (re.compile(UC_PREFIX + "/schemas/" + _NAME.format("full_name")), get_schema),
    (re.compile(UC_PREFIX + "/tables"), list_tables),
    (re.compile(UC_PREFIX + "/tables/" + _NAME.format("full_name")), get_table),
]
