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

# the directory (issue 37): users and groups an identity provider pushes (SCIM) or a sync
# reads (LDAP); catalog/directory.py. A deleted SCIM user stays as a tombstone (deleted=1).
directory_users = Table(
    "directory_users",
    metadata,
    Column("id", Text, primary_key=True),
    Column("user_name", Text, nullable=False, unique=True),
    Column("external_id", Text),
    Column("display_name", Text),
    Column("emails", Text, nullable=False, server_default="[]"),
    Column("attributes", Text, nullable=False, server_default="{}"),
    Column("active", Integer, nullable=False),
    Column("deleted", Integer, nullable=False, server_default="0"),
    Column("created", Float, nullable=False),
    Column("last_modified", Float, nullable=False),
    Column("version", Integer, nullable=False),
)
directory_groups = Table(
    "directory_groups",
    metadata,
    Column("id", Text, primary_key=True),
    Column("source", Text, nullable=False),
    Column("display_name", Text, nullable=False),
    Column("external_id", Text),
    Column("created", Float, nullable=False),
    Column("last_modified", Float, nullable=False),
    Column("version", Integer, nullable=False),
)
Index(
    "directory_groups_name", directory_groups.c.source, directory_groups.c.display_name, unique=True
)
# a member is a SCIM user (user_id) or, for LDAP, a user name
directory_members = Table(
    "directory_members",
    metadata,
    Column("group_id", Text, nullable=False),
    Column("user_id", Text),
    Column("user_name", Text),
)
Index("directory_members_group", directory_members.c.group_id)
Index("directory_members_user", directory_members.c.user_id)
