"""`/healthz`, `/readyz` and `/metrics`: for a load balancer, an orchestrator's probes and
Prometheus, without a token and outside the audit log (a probe every few seconds would
drown it; none of them reads data or takes input).

`/healthz` answers while the process serves; `/readyz` only when Spark is up and the catalog,
the policies and the audit directory work; `/metrics` is Prometheus's text format
(governance/metrics.py). Both servers open their probe port at once and start Spark behind
it (`StartingUp` for `lakegate serve`, `ProbeServer` for the gateway's `--metrics-port`):
an orchestrator sees a live process that is not ready yet, not a refused connection.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import body
from governance.metrics import HTTP_METHODS, HTTP_REQUESTS, HTTP_SECONDS

if TYPE_CHECKING:
    from governance.session.governed import Lakegate

PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

#: What `/readyz` says while Spark starts (its only check then).
STARTING = {"status": "not ready", "checks": {"spark": "starting"}}


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
    """Answers the three paths before authentication and auditing; passes the rest on,
    counting and timing every request by method, route and status (governance/metrics.py)."""

    def __init__(self, app: ASGIApp, lg: Lakegate, routes: Sequence[Any] = ()) -> None:
        self.app = app
        self.lg = lg
        # (template, regex) of each route, in the router's order
        self.routes = [(r.path, r.path_regex) for r in routes]
        self.route_of = lru_cache(maxsize=1024)(self._route_of)
        # (method, route, status) -> its counter and histogram: a closed set of keys
        self.series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def _route_of(self, path: str) -> str:
        """The template of the route `path` falls under, or "unmatched" (a closed set: never
        the caller's path)."""
        if path in PATHS:
            return path
        for template, regex in self.routes:
            if regex.match(path):
                return template
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # an app that raised before answering

        async def answered(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._serve(scope, receive, answered)
        finally:
            method = scope["method"] if scope["method"] in HTTP_METHODS else "other"
            path = scope["path"]  # long paths are not kept in the cache (memory)
            route = self.route_of(path) if len(path) <= 256 else self._route_of(path)
            counted = self.series.get((method, route, status))
            if counted is None:  # `labels()` per request costs more than a dict lookup
                counted = (
                    HTTP_REQUESTS.labels(method, route, str(status)),
                    HTTP_SECONDS.labels(method, route),
                )
                self.series[(method, route, status)] = counted
            counted[0].inc()
            counted[1].observe(time.perf_counter() - start)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] not in PATHS or scope["method"] != "GET":
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


async def _answer(
    send: Send, status: int, payload: bytes, content_type: str, *, retry: bool = False
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if retry:
        headers.append((b"retry-after", b"5"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class StartingUp:
    """The REST server's ASGI app from the moment its port opens: until `ready(app)` hands
    it the real app, `/healthz` is 200, `/readyz` 503 and `/metrics` served, and any other
    request is 503 with Retry-After (refused before authentication: nothing was read, so
    nothing is audited). Uvicorn runs it with lifespan off (the app declares none)."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    def ready(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        if app is not None:
            await app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets are served
        path = scope["path"] if scope["method"] == "GET" else ""
        if path == "/healthz":
            await _answer(send, 200, b'{"status": "ok"}', "application/json")
        elif path == "/readyz":
            await _answer(send, 503, json.dumps(STARTING).encode(), "application/json")
        elif path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            await _answer(send, 200, generate_latest(), CONTENT_TYPE_LATEST)
        else:
            msg = body(503, "the server is starting: retry when /readyz answers 200")
            await _answer(send, 503, json.dumps(msg).encode(), "application/json", retry=True)


class ProbeServer:
    """The Connect gateway's HTTP port (`--metrics-port`): `/healthz`, `/readyz` and
    `/metrics`, opened before Spark starts; `/readyz` is 503 until `ready()` and then
    answers as the REST server's does. Any other path is 404; nothing here takes input."""

    def __init__(self, lg: Lakegate, host: str, port: int) -> None:
        self.lg = lg
        self.started = False
        probes = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, payload, kind = probes.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Probes every few seconds stay out of the log."""

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="lakegate-probes", daemon=True
        )
        self._thread.start()

    def ready(self) -> None:
        self.started = True

    def answer(self, path: str) -> tuple[int, bytes, str]:
        if path == "/healthz":
            return 200, b'{"status": "ok"}', "application/json"
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            return 200, generate_latest(), CONTENT_TYPE_LATEST
        if path == "/readyz":
            if not self.started:
                return 503, json.dumps(STARTING).encode(), "application/json"
            checks = readiness(self.lg)
            ready = all(v == "ok" for v in checks.values())
            out = {"status": "ready" if ready else "not ready", "checks": checks}
            return 200 if ready else 503, json.dumps(out).encode(), "application/json"
        return 404, b'{"status": "not found"}', "application/json"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
