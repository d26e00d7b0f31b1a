"""Fixtures of the identity tests (issue 37)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# --- slapd: a real OpenLDAP for the LDAP group sync (tests/identity/slapd.py) ----------------


@pytest.fixture(scope="session")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A running slapd on loopback for the whole run; a server that cannot start fails the
    tests that need it with the reason (`make test` installs slapd), it never skips them."""
    from tests.identity.slapd import Slapd, SlapdUnavailable

    root: Path = tmp_path_factory.mktemp("slapd")
    try:
        server = Slapd(root)
        server.start()
    except SlapdUnavailable as e:
        pytest.fail(f"slapd unavailable: {e}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


# --- end slapd ------------------------------------------------------------------------------
