"""Data products join the migrations (the first release made this table on the side when
the REST registry started, so a catalog from it may already have it).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    if "data_products" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "data_products",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("domain", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("output_tables", sa.Text, nullable=False, server_default="[]"),
        sa.Column("stage", sa.Text, nullable=False),
        sa.Column("tags", sa.Text, nullable=False, server_default="[]"),
        sa.Column("classification", sa.Text),
        sa.Column("freshness", sa.Text),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.Text),
        sa.Column("updated_by", sa.Text),
    )
    op.create_index("data_products_domain", "data_products", ["domain"])
