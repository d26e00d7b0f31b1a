"""Request and response models: they are the OpenAPI documentation of the API.

The Unity Catalog models carry UC's own names (`TableInfo`, `ColumnInfo`, ...) and fields, so
a UC client generated from UC's spec reads them; Lakegate's models are its own vocabulary.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from api.discovery import TABLE_NAME_PATTERN
from catalog.products import CLASSIFICATIONS, STAGES
from governance.policy.masks import MASK_KINDS

# --- Unity Catalog -------------------------------------------------------------------------

ColumnTypeName = Literal[
    "BOOLEAN",
    "BYTE",
    "SHORT",
    "INT",
    "LONG",
    "FLOAT",
    "DOUBLE",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP_NTZ",
    "STRING",
    "BINARY",
    "DECIMAL",
    "INTERVAL",
    "ARRAY",
    "STRUCT",
    "MAP",
    "VARIANT",
    "CHAR",
    "NULL",
    "USER_DEFINED_TYPE",
    "TABLE_TYPE",
]


class UcColumnInfo(BaseModel):
    model_config = ConfigDict(title="ColumnInfo")
    name: str
    type_text: str = Field(description="Spark SQL type, e.g. `decimal(10,2)`")
    type_json: str = Field(description="Spark's StructField JSON")
    type_name: ColumnTypeName
    type_precision: int | None = None
    type_scale: int | None = None
    position: int = Field(description="0-based among the columns the caller may see")
    nullable: bool
    comment: str | None = None
    partition_index: int | None = None


class UcTableInfo(BaseModel):
    model_config = ConfigDict(title="TableInfo")
    name: str
    catalog_name: str
    schema_name: str
    full_name: str | None = None
    table_type: Literal["MANAGED", "EXTERNAL"]
    data_source_format: Literal["DELTA"] = "DELTA"
    columns: list[UcColumnInfo] = Field(description="Only the columns the caller may read")
    storage_location: str | None = Field(None, description="Only for callers who manage the table")
    comment: str | None = None
    properties: dict[str, str] | None = None
    owner: str | None = Field(None, description="The owning domain's first owner")
    created_at: int | None = Field(None, description="epoch milliseconds")
    updated_at: int | None = None
    table_id: str


class UcSchemaInfo(BaseModel):
    model_config = ConfigDict(title="SchemaInfo")
    name: str
    catalog_name: str
    full_name: str
    comment: str | None = None
    properties: dict[str, str] | None = None
    owner: str | None = None
    created_at: int | None = None
    schema_id: str


class UcCatalogInfo(BaseModel):
    model_config = ConfigDict(title="CatalogInfo")
    name: str
    comment: str | None = None
    properties: dict[str, str] | None = None
    created_at: int | None = None
    id: str


class ListCatalogsResponse(BaseModel):
    catalogs: list[UcCatalogInfo]
    next_page_token: str | None = None


class ListSchemasResponse(BaseModel):
    schemas: list[UcSchemaInfo]
    next_page_token: str | None = None


class ListTablesResponse(BaseModel):
    tables: list[UcTableInfo]
    next_page_token: str | None = None


class TableExists(BaseModel):
    table_exists: bool = Field(description="false for a table hidden from the caller too")


# --- Lakegate: tables, search, identity ------------------------------------------------------


#: The mask kinds and what each shows, for the API's own documentation.
_MASK_TEXT = "; ".join(f"{k.name}: {k.description}" for k in MASK_KINDS.values())


class MaskInfo(BaseModel):
    kind: str = Field(description=_MASK_TEXT)
    policy: str | None = Field(
        description="the column mask's id; null unless the caller manages the table"
    )


class ColumnDetail(BaseModel):
    name: str
    type_text: str
    nullable: bool
    position: int
    comment: str | None = None
    tags: list[str] = []
    mask: MaskInfo | None = Field(None, description="set when the caller sees a masked value")


class RowFilterInfo(BaseModel):
    id: str
    kind: Literal["permissive", "restrictive"]
    where: str
    principals: list[str]
    applies_to_caller: bool


class MaskedColumn(BaseModel):
    column: str
    kind: str = Field(description=_MASK_TEXT)
    policy: str | None = Field(description="the mask's id; null unless you manage the table")


class AccessInfo(BaseModel):
    privileges: list[str] = Field(description="select, modify, create, manage")
    masked_columns: list[MaskedColumn]
    row_filter_applies: bool = Field(description="some rows of the table are hidden from you")
    row_filters: list[RowFilterInfo] | None = Field(
        None, description="the table's row filters with their text: only for its managers"
    )


class DomainRef(BaseModel):
    name: str
    description: str
    owners: list[str]


class DeltaSummary(BaseModel):
    version: int | None = Field(None, description="latest commit version from _delta_log")
    last_commit: datetime | None = None
    row_count: int | None = Field(None, description="sum of numRecords stats; null if unknown")
    history_complete: bool = Field(False, description="every commit since version 0 is kept")
    withheld: bool = Field(
        False,
        description="true: a row filter applies to you, so version, "
        "last commit and row count are left out (they would reveal hidden rows)",
    )


class TableDetail(BaseModel):
    full_name: str
    catalog_name: str
    schema_name: str
    name: str
    comment: str | None = None
    table_type: Literal["MANAGED", "EXTERNAL"]
    domain: DomainRef | None = None
    tags: list[str]
    columns: list[ColumnDetail]
    access: AccessInfo
    delta: DeltaSummary
    products: list[str] = Field(description="data products that publish this table")


class CommitInfo(BaseModel):
    version: int
    timestamp: datetime | None = None
    operation: str | None = None
    user: str | None = Field(None, description="commitInfo userName, when the engine wrote one")


class TableHistory(BaseModel):
    full_name: str
    version: int | None
    complete: bool
    withheld: bool = Field(
        False,
        description="true: a row filter applies to you, so the commits "
        "are left out (they would show when hidden rows change)",
    )
    commits: list[CommitInfo] = Field(description="newest first")


class SearchHit(BaseModel):
    full_name: str
    domain: str | None = None
    comment: str | None = None
    score: float
    matched: list[str] = Field(
        description="where the terms matched: name, column:x, tag:y, description"
    )


class SearchResponse(BaseModel):
    query: str
    results: list[SearchHit]


class WhoAmI(BaseModel):
    user: str
    groups: list[str]
    auth: Literal["token", "signed"]
    token_expires: datetime | None = None
    domains_owned: list[str]


# --- Lakegate: domains and data products -----------------------------------------------------

Stage = Literal["draft", "active", "deprecated", "retired"]
Classification = Literal["public", "internal", "confidential", "restricted"]
assert tuple(Stage.__args__) == STAGES and tuple(Classification.__args__) == CLASSIFICATIONS

_NAME = r"^[a-z0-9][a-z0-9_\-]{0,127}$"
_TABLE = r"^[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+$"
_TAG = r"^[a-z0-9][a-z0-9_\-:.]{0,63}$"
_DURATION = r"^(\d+\s*[smhdw]\s*)+$"
TableName = Annotated[str, Field(pattern=_TABLE, max_length=400)]
Tag = Annotated[str, Field(pattern=_TAG)]
TablePath = Annotated[str, Path(pattern=TABLE_NAME_PATTERN, description="catalog.schema.table")]


class DomainInfo(BaseModel):
    name: str
    description: str
    owners: list[str]
    schemas: list[str]
    is_owner: bool = Field(description="the caller owns this domain")
    table_count: int = Field(description="tables of the domain the caller may see")
    product_count: int = Field(description="data products that are not retired")
    products_by_stage: dict[str, int]


class ListDomainsResponse(BaseModel):
    domains: list[DomainInfo]


class DomainTable(BaseModel):
    full_name: str
    comment: str | None = None
    tags: list[str]
    products: list[str]


class ListDomainTablesResponse(BaseModel):
    tables: list[DomainTable]
    next_page_token: str | None = None


class TableFreshness(BaseModel):
    table: str
    last_commit: datetime | None = None
    age_seconds: float | None = None
    fresh: bool | None = Field(None, description="null when the table or its log is missing")


class FreshnessInfo(BaseModel):
    objective: str
    objective_seconds: int
    status: Literal["fresh", "stale", "unknown"]
    checked_at: datetime
    tables: list[TableFreshness] = Field(description="output tables the caller may see")


class ProductInfo(BaseModel):
    name: str
    domain: str
    description: str
    output_tables: list[str] = Field(description="the ones the caller may see (owners: all)")
    stage: Stage
    tags: list[str]
    classification: Classification | None = None
    freshness: str | None = None
    freshness_status: FreshnessInfo | None = None
    source: str = Field(description="`api`, or `yaml:<file>` for products defined in git")
    editable: bool = Field(description="the caller may change it through the API")
    created_at: datetime
    updated_at: datetime
    created_by: str | None = None
    updated_by: str | None = None


class ListProductsResponse(BaseModel):
    products: list[ProductInfo]


class ProductCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_NAME)
    domain: str = Field(min_length=1, max_length=128)
    description: str = Field("", max_length=4000)
    output_tables: list[TableName] = Field([], max_length=1000)
    stage: Stage = "draft"
    tags: list[Tag] = Field([], max_length=100)
    classification: Classification | None = None
    freshness: str | None = Field(
        None,
        pattern=_DURATION,
        max_length=64,
        description="max age of the newest commit: 30m, 24h, 7d",
    )


class ProductUpdate(BaseModel):
    """Fields to change (an explicit null clears classification or freshness); the name and
    the domain are fixed. The other fields may be left out but not null (the schema says
    so; the route refuses a null with 400)."""

    model_config = ConfigDict(extra="forbid")
    description: Annotated[str, Field(max_length=4000)] | SkipJsonSchema[None] = None
    output_tables: Annotated[list[TableName], Field(max_length=1000)] | SkipJsonSchema[None] = None
    stage: Stage | SkipJsonSchema[None] = None
    tags: Annotated[list[Tag], Field(max_length=100)] | SkipJsonSchema[None] = None
    classification: Classification | None = None
    freshness: str | None = Field(None, pattern=_DURATION, max_length=64)


# --- Lakegate: statements --------------------------------------------------------------------


class StatementRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    statement: str = Field(min_length=1, max_length=1_000_000)
    row_limit: int | None = Field(None, ge=1, description="at most the server's api.row_limit")
    timeout_seconds: float | None = Field(
        None,
        ge=1,
        le=86400,
        allow_inf_nan=False,
        description="1 s to a day; the server's api.timeout caps it (a smaller value would "
        "start Spark only to cancel it)",
    )


class StatementColumn(BaseModel):
    name: str
    type_text: str
    nullable: bool


class StatementResult(BaseModel):
    columns: list[StatementColumn]
    rows: list[list[Any]] = Field(
        description="decimals and binary as strings (base64), dates and timestamps in ISO 8601"
    )
    row_count: int
    truncated: bool = Field(description="more rows exist than row_limit")
    duration_ms: int
