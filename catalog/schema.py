"""The catalog database's tables, as SQLAlchemy Core objects shared by the store and the
migrations' tests (the migrations themselves spell out each step, so history stays fixed)."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, MetaData, PrimaryKeyConstraint, Table, Text

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", Integer, nullable=False),
)
catalogs = Table(
    "catalogs",
    metadata,
    Column("name", Text, primary_key=True),
    Column("comment", Text),
    Column("created_at", Float, nullable=False),
)
schemas = Table(
    "schemas",
    metadata,
    Column("catalog", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("comment", Text),
    Column("created_at", Float, nullable=False),
    PrimaryKeyConstraint("catalog", "name"),
)
tables = Table(
    "tables",
    metadata,
    Column("catalog", Text, nullable=False),
    Column("schema", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("location", Text, nullable=False),
    Column("columns", Text, nullable=False),
    Column("domain", Text),
    Column("comment", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("partition_columns", Text, nullable=False, server_default="[]"),
    Column("properties", Text, nullable=False, server_default="{}"),
    PrimaryKeyConstraint("catalog", "schema", "name"),
)
data_products = Table(
    "data_products",
    metadata,
    Column("name", Text, primary_key=True),
    Column("domain", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    Column("output_tables", Text, nullable=False, server_default="[]"),
    Column("stage", Text, nullable=False),
    Column("tags", Text, nullable=False, server_default="[]"),
    Column("classification", Text),
    Column("freshness", Text),
    Column("source", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("created_by", Text),
    Column("updated_by", Text),
)
Index("data_products_domain", data_products.c.domain)
