"""Issue 10 item 4 at the REST boundary: a path parameter is a name, never a path."""

from __future__ import annotations

import pytest
from api_testkit import UC

BAD = {
    "backslash": "a%5Cb",
    "nul": "a%00b",
    "control_char": "a%0Ab",
    "bidi_override": "a%E2%80%AEb",
    "zero_width_space": "a%E2%80%8Bb",
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize(
    "path",
    ["/catalogs/{n}", "/schemas/main.{n}", "/tables/main.sales.{n}"],
    ids=["getCatalog", "getSchema", "getTable"],
)
def test_rest_path_name_outside_allowed_set_is_invalid_argument(
    as_user,
    path: str,
    bad: str,
) -> None:
    r = as_user("root").get(UC + path.format(n=bad))
    assert r.status_code == 400
    body = r.json()
    assert body["error_code"] == "INVALID_ARGUMENT" and "invalid name" in body["message"]
