"""Versioned schema migrations of the catalog database (Alembic)."""
