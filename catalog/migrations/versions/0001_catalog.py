"""The catalog as the first release made it: meta (generation), catalogs, schemas, tables.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    meta = op.create_table(
        "meta",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Integer, nullable=False),
    )
    op.bulk_insert(meta, [{"key": "generation", "value": 0}])
    op.create_table(
        "catalogs",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("comment", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "schemas",
        sa.Column("catalog", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("catalog", "name"),
    )
    op.create_table(
        "tables",
        sa.Column("catalog", sa.Text, nullable=False),
        sa.Column("schema", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("columns", sa.Text, nullable=False),
        sa.Column("domain", sa.Text),
        sa.Column("comment", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("partition_columns", sa.Text, nullable=False, server_default="[]"),
        sa.Column("properties", sa.Text, nullable=False, server_default="{}"),
        sa.PrimaryKeyConstraint("catalog", "schema", "name"),
    )
