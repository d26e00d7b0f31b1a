"""A live Lakegate REST server with SCIM provisioning configured, for tests/identity/test_scim_*."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from governance.config import IdentityConfig, ScimConfig
from governance.identity import GroupMapping
from tests.api.api_testkit import api_lakegate_on, serve

SCIM_TOKEN = "scim-client-token-0123456789"
SCIM_MEDIA = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
#: the provider's group name -> the demo policies' group
MAPPING = GroupMapping((("Okta-Analysts", "analysts"),))


@contextmanager
def scim_server(lakehouse, spark, root: Path) -> Iterator[tuple[object, str]]:
    """(the Lakegate, the base URL) of a server whose `identity.scim` accepts SCIM_TOKEN."""
    scim = ScimConfig(tokens=(hashlib.sha256(SCIM_TOKEN.encode()).hexdigest(),), groups=MAPPING)
    lg = api_lakegate_on(lakehouse, spark, root, identity=IdentityConfig(scim=scim))
    try:
        from api.app import create_app

        with serve(create_app(lg)) as url:
            yield lg, url
    finally:
        lg.close()


def scim_client(url: str, token: str = SCIM_TOKEN) -> httpx.Client:
    return httpx.Client(
        base_url=f"{url}/scim/v2",
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "Content-Type": SCIM_MEDIA},
    )


def new_user(client: httpx.Client, user_name: str, **extra) -> dict:
    r = client.post("/Users", json={"schemas": [USER_SCHEMA], "userName": user_name, **extra})
    assert r.status_code == 201, r.text
    return r.json()


def patch(client: httpx.Client, path: str, *operations: dict) -> httpx.Response:
    return client.patch(path, json={"schemas": [PATCH_SCHEMA], "Operations": list(operations)})
