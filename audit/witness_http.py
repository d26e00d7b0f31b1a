"""The HTTP witness: each signed checkpoint POSTed to a URL outside the audit host, read back
with GET by ``audit verify`` (audit/README.md, "HTTP witness").

``POST <url>/v1/logs/<log id>/checkpoints`` with the checkpoint line as the body stores it;
``GET`` of the same path returns every checkpoint the witness holds for that log, one per
line. The log id is the first 24 hex of SHA-256 of the origin (the witness directory's file
name). ``lakegate audit witness-serve`` (:mod:`audit.witness_server`) is a reference witness.

When the witness cannot be reached at publish time, ``witness_unreachable`` decides:
``refuse`` (the default) fails the write like any audit failure, so the access is refused;
``record`` keeps the checkpoint in ``<audit dir>/audit.witness-pending``, logs a warning to
``lakegate.errors``, and delivers the backlog, oldest first, before the next checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from audit.checkpoint import CheckpointSettings, append_line
from audit.witness import WitnessError

PENDING_NAME = "audit.witness-pending"
LOG_ID = re.compile(r"[0-9a-f]{24}")
MAX_BODY = 64 * 1024  # one checkpoint line is < 1 KiB (a start checkpoint's frontier < 5 KiB)
_errors = logging.getLogger("lakegate.errors")


class WitnessUnreachable(WitnessError):
    """The HTTP witness did not answer (connection refused, timeout, DNS)."""


def log_id(origin: str) -> str:
    return hashlib.sha256(origin.encode("ascii")).hexdigest()[:24]


def check_url(url: str) -> str:
    """An ``http``/``https`` URL with a host and no query, fragment or credentials."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"witness URL must be http:// or https:// with a host: {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("witness URL must not carry a query, fragment or credentials")
    return url.rstrip("/")


def endpoint(url: str, origin: str) -> str:
    return f"{check_url(url)}/v1/logs/{log_id(origin)}/checkpoints"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a place to follow: urllib would turn a redirected POST
    into a GET whose 200 would read as "taken"."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _call(request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, response.read(1 << 26)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4096)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WitnessUnreachable(f"HTTP witness {request.full_url} unreachable: {reason}") from None


def post(url: str, origin: str, line: str, timeout: float) -> None:
    """Deliver one checkpoint line; raise :class:`WitnessError` unless the witness took it."""
    request = urllib.request.Request(
        endpoint(url, origin),
        data=line.encode("ascii") + b"\n",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    status, body = _call(request, timeout)
    if status not in (200, 201):
        said = body.decode("ascii", "replace").strip().splitlines()[:1]
        raise WitnessError(
            f"HTTP witness {request.full_url} refused the checkpoint: {status} {''.join(said)}"
        )


def read(url: str, origin: str, timeout: float = 10.0) -> tuple[str, str]:
    """``(label, text)``: every checkpoint of this log at the witness (empty on 404)."""
    request = urllib.request.Request(endpoint(url, origin), method="GET")
    status, body = _call(request, timeout)
    if status == 404:
        return request.full_url, ""
    if status != 200:
        raise WitnessError(f"HTTP witness {request.full_url} answered {status}")
    return request.full_url, body.decode("ascii", "replace")


def pending(directory: Path) -> list[str]:
    """Checkpoint lines recorded while the witness was unreachable, oldest first."""
    with contextlib.suppress(FileNotFoundError):
        return (directory / PENDING_NAME).read_text("ascii", "replace").splitlines()
    return []


def publish(
    directory: Path,
    settings: CheckpointSettings,
    origin: str,
    line: str,
    size: int,
    *,
    fsync: bool,
) -> None:
    """POST ``line`` (after any backlog) to ``settings.witness_url``; under the audit lock.

    ``refuse``: any failure raises. ``record``: an unreachable witness leaves the line in the
    backlog and a warning; a witness that answers but refuses still raises (it is not
    unreachable: it says no, e.g. to a roll-back)."""
    url = settings.witness_url
    if url is None:
        return
    backlog = pending(directory)
    try:
        for item in [*backlog, line]:
            post(url, origin, item, settings.witness_timeout)
    except WitnessUnreachable as exc:
        if settings.witness_unreachable != "record":
            raise
        append_line(directory / PENDING_NAME, line, fsync=fsync)
        _errors.warning(
            "audit checkpoint of %d lines recorded, not witnessed (%d waiting): %s",
            size, len(backlog) + 1, exc,
        )  # fmt: skip
        return
    if backlog:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / PENDING_NAME)
