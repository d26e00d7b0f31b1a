"""The catalog: three-part names to Delta table locations, kept in an embedded database."""

from catalog.model import CatalogInfo, ColumnInfo, SchemaInfo, TableInfo

__all__ = ["CatalogInfo", "ColumnInfo", "SchemaInfo", "TableInfo"]
