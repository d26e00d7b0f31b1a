"""One identity, one spelling over HTTP (issue 10 item 7): a signed token whose embedded user
is a look-alike of an ASCII persona is 401 at `/statements` and every other route, even with
a valid signature; an upper-case ASCII user is the lower-case persona."""

from __future__ import annotations

import hashlib
import hmac
import time

import httpx
import pytest
from api_testkit import LG, SECRET


def _signed(user: str) -> str:
    body = f"{user}.{int(time.time()) + 600}"
    return f"{body}.{hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()}"


def _header(user: str) -> dict[str, bytes]:
    """A validly signed token for `user` as the server will see it: HTTP header bytes are
    read as Latin-1, so a name is sent as its UTF-8 bytes and signed in that reading."""
    try:
        wire = user.encode("latin-1").decode("latin-1")
    except UnicodeEncodeError:
        wire = user.encode("utf-8").decode("latin-1")
    return {"Authorization": f"Bearer {_signed(wire)}".encode("latin-1")}


@pytest.mark.parametrize(
    "user",
    ["c\u00aarol", "\u212aarol", "\uff43arol", "car\u200dol", "\u202ecarol"],
    ids=["ordinal_indicator_a", "kelvin_sign", "fullwidth", "zero_width_joiner", "rtl_override"],
)
def test_rest_signed_token_for_a_lookalike_is_401_not_the_ascii_user(
    server: str, user: str
) -> None:
    with httpx.Client(base_url=server, timeout=60, headers=_header(user)) as c:
        who = c.get(f"{LG}/whoami")
        run = c.post(f"{LG}/statements", json={"statement": "SELECT 1"})
    assert (who.status_code, run.status_code) == (401, 401), who.text
    assert who.json()["message"] == "invalid token"


def test_rest_signed_token_for_uppercase_ascii_is_the_lowercase_user(server: str) -> None:
    headers = {"Authorization": f"Bearer {_signed('CAROL')}"}
    with httpx.Client(base_url=server, timeout=60, headers=headers) as c:
        assert c.get(f"{LG}/whoami").json()["user"] == "carol"
