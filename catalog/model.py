"""What the catalog knows about a table: plain data shared by the rewriter, the API and tools."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    name: str
    type_text: str  # Spark's simpleString, e.g. `string`, `decimal(10,2)`, `struct<a:int>`
    nullable: bool = True
    position: int = 0
    comment: str | None = None
    type_json: str | None = None  # Spark's StructField JSON, for Unity Catalog clients


@dataclass(frozen=True, slots=True)
class TableInfo:
    catalog: str
    schema: str
    name: str
    location: str  # absolute path (or URI) of the Delta table
    columns: tuple[ColumnInfo, ...]
    domain: str | None = None
    comment: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    partition_columns: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.catalog}.{self.schema}.{self.name}"

    def column(self, name: str) -> ColumnInfo | None:
        low = name.lower()
        for c in self.columns:
            if c.name.lower() == low:
                return c
        return None


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    catalog: str
    name: str
    comment: str | None = None
    created_at: float = 0.0

    @property
    def full_name(self) -> str:
        return f"{self.catalog}.{self.name}"


@dataclass(frozen=True, slots=True)
class CatalogInfo:
    name: str
    comment: str | None = None
    created_at: float = 0.0
