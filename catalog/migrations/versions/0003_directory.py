"""The directory (issue 37): SCIM users (deleted ones kept as tombstones), groups of each
source (SCIM, LDAP) and their members, and the `directory` generation every server's
snapshot polls.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "directory_users",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("user_name", sa.Text, nullable=False, unique=True),
        sa.Column("external_id", sa.Text),
        sa.Column("display_name", sa.Text),
        sa.Column("emails", sa.Text, nullable=False, server_default="[]"),
        sa.Column("attributes", sa.Text, nullable=False, server_default="{}"),
        sa.Column("active", sa.Integer, nullable=False),
        sa.Column("deleted", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("last_modified", sa.Float, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_table(
        "directory_groups",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("display_name", sa.Text, nullable=False),
        sa.Column("external_id", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("last_modified", sa.Float, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_index(
        "directory_groups_name", "directory_groups", ["source", "display_name"], unique=True
    )
    op.create_table(
        "directory_members",
        sa.Column("group_id", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text),
        sa.Column("user_name", sa.Text),
    )
    op.create_index("directory_members_group", "directory_members", ["group_id"])
    op.create_index("directory_members_user", "directory_members", ["user_id"])
    op.execute(sa.text("INSERT INTO meta (key, value) VALUES ('directory', 0)"))
