"""`/healthz`, `/readyz` and `/metrics`: for a load balancer, an orchestrator's probes and
Prometheus, without a token and outside the audit log (a probe every few seconds would
drown it; none of them reads data or takes input).

`/healthz` answers while the process serves; `/readyz` only when Spark is up and the catalog,
the policies and the audit directory work; `/metrics` is Prometheus's text format
(governance/metrics.py).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from governance.session import Lakegate

PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def readiness(lg: Lakegate) -> dict[str, str]:
    """Each dependency's state, "ok" or a one-line reason (never an exception's text)."""
    checks: dict[str, str] = {}
    checks["spark"] = "ok" if lg.spark_started else "not started"
    try:
        lg.catalog.tables()
        checks["catalog"] = "ok"
    except Exception as e:
        checks["catalog"] = f"unavailable ({type(e).__name__})"
    checks["policies"] = "ok" if lg.policy_version else "not loaded"
    audit = lg.config.audit
    checks["audit"] = (
        "ok" if audit.is_dir() and os.access(audit, os.W_OK | os.X_OK) else "not writable"
    )
    return checks


class HealthRoutes:
    """Answers the three paths before authentication and auditing; passes the rest on."""

    def __init__(self, app: ASGIApp, lg: Lakegate) -> None:
        self.app = app
        self.lg = lg

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in PATHS or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            await _answer(send, 200, generate_latest(), CONTENT_TYPE_LATEST)
            return
        body: dict[str, Any] = {"status": "ok"}
        status = 200
        if path == "/readyz":
            from starlette.concurrency import run_in_threadpool

            checks = await run_in_threadpool(readiness, self.lg)
            ready = all(v == "ok" for v in checks.values())
            body = {"status": "ready" if ready else "not ready", "checks": checks}
            status = 200 if ready else 503
        await _answer(send, status, json.dumps(body).encode(), "application/json")


async def _answer(send: Send, status: int, payload: bytes, content_type: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
