"""Fixtures for the security tests (helpers live in helpers.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def locations(lakehouse) -> dict[str, str]:
    """Delta locations of the demo tables, by short name."""
    return {
        t: lakehouse.catalog.table("main", s, t).location
        for s, t in (
            ("sales", "orders"),
            ("sales", "customers"),
            ("hr", "employees"),
            ("marketing", "campaigns"),
        )
    }
