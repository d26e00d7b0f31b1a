"""`lakegate serve`: the REST API under uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from api.net import is_loopback
from cli.kit import EXIT_OK, EXIT_UNAVAILABLE, config_option, config_path, fail

if TYPE_CHECKING:
    import uvicorn

    from api.health import StartingUp
    from governance.session.governed import Lakegate


@click.command("serve")
@config_option
@click.option("--host", help="address to bind (default: api.host, else 127.0.0.1)")
@click.option("--port", type=click.IntRange(0, 65535), help="port (default: api.port, else 8080)")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option(
    "--access-log", is_flag=True, help="uvicorn's access log too (every request is audited anyway)"
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="server log lines as text or as one JSON object each",
)
def serve(
    host: str | None, port: int | None, log_level: str, access_log: bool, log_format: str
) -> int:
    """Serve the REST API.

    Unity Catalog discovery, domains, governed SQL; /healthz, /readyz and /metrics.
    The port opens at once: /healthz answers 200 and /readyz 503 (other requests 503)
    while Spark starts, /readyz 200 once it is up. Exits 5 when the address cannot be bound
    or Spark cannot start."""
    import uvicorn

    from api.directory import directory_sync
    from api.health import StartingUp
    from governance.config import Config
    from governance.session.governed import Lakegate

    cfg = Config.load(config_path())
    host = host or cfg.api.host
    port = port if port is not None else cfg.api.port
    why = _cannot_bind(host, port)
    if why:
        fail(f"cannot listen on {host}:{port}: {why}")
        return EXIT_UNAVAILABLE
    # full Spark errors go to the server log, JVM noise to the Spark log
    here = config_path().resolve().parent
    lg = Lakegate.open(
        cfg, error_log=here / "lakegate-server.log", spark_log=here / "lakegate-spark.log"
    )  # JVM noise off the console
    if not cfg.api.tokens and not cfg.api.secret:
        fail(
            "no api.tokens or api.secret in the config: every request will be refused "
            "(401); see api/README.md (lakegate token create makes one)"
        )
    tls = cfg.api.tls_cert is not None and cfg.api.tls_key is not None
    if not is_loopback(host) and not tls:
        fail(f"serving on {host}, beyond loopback, without TLS: lakegate certs makes a certificate")
    # uvicorn's default log setup is logging.config.dictConfig, which closes every existing
    # handler, the audit log's included (every request would then be refused): keep ours.
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    # The port opens at once (probes: /healthz 200, /readyz 503, api/health.py) and Spark
    # starts behind it; the real app takes over once the first statement would not pay
    # for Spark's start.
    starting = StartingUp()
    server = uvicorn.Server(
        uvicorn.Config(
            starting,
            host=host,
            port=port,
            lifespan="off",
            log_config=None,
            log_level=log_level,
            access_log=access_log,
            server_header=False,
            timeout_keep_alive=cfg.api.keep_alive_seconds,
            ssl_certfile=str(cfg.api.tls_cert) if tls else None,
            ssl_keyfile=str(cfg.api.tls_key) if tls else None,
        )
    )
    failed: list[str] = []
    start = threading.Thread(
        target=_start_behind, args=(lg, starting, server, here, failed), name="lakegate-start"
    )
    start.start()
    # uvicorn raises a stopping signal again once it has shut down: caught here, so the
    # server ends with Spark closed and exit 0 instead of being killed by its own signal
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    try:
        with directory_sync(lg):  # LDAP's groups into the directory while serving
            server.run()
    except SystemExit:  # uvicorn exits 1 when it cannot bind (e.g. lost a bind race)
        pass
    finally:
        start.join()  # Spark is not closed under a start still under way
        service = getattr(getattr(starting.app, "state", None), "service", None)
        if service is not None:  # the app's REST statement threads (api/deps.py)
            service.close()
        lg.close()
    if failed:
        fail(failed[0])
        return EXIT_UNAVAILABLE
    if not server.started:  # uvicorn could not bind (e.g. lost a bind race)
        fail(f"the server on {host}:{port} could not start")
        return EXIT_UNAVAILABLE
    return EXIT_OK


def _start_behind(
    lg: Lakegate, starting: StartingUp, server: uvicorn.Server, here: Path, failed: list[str]
) -> None:
    """Recovery, Spark, the app, then hand the app to `starting`; a Spark that cannot start
    stops the server (exit 5) with one line in `failed`."""
    from api.app import create_app
    from governance.execute.run import ERROR_LOG
    from governance.runtime.heap import settle_heap

    recovered(lg)
    click.echo("lakegate: starting Spark before serving...", err=True)
    try:
        warm_up(lg)
        app = create_app(lg, tokens_from=lg.config.path)
        _settle(app)
    except Exception as e:
        ERROR_LOG.exception("Spark could not start")
        failed.append(
            f"Spark could not start ({type(e).__name__}); see {here / 'lakegate-spark.log'}"
        )
        server.should_exit = True
        return
    settle_heap()  # start-up's objects out of every full collection (governance/runtime/heap.py)
    starting.ready(app)
    click.echo("lakegate: ready", err=True)


def warm_up(lg: Lakegate) -> None:
    """Start Spark and run one trivial query, so the JVM, Delta and the planner's first
    analysis are paid for before the first caller's statement."""
    lg.spark.sql("SELECT 1").collect()


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception's class,
    never its text, which may quote data)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = record.exc_info[0].__name__
        return json.dumps(out)


def _cannot_bind(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (as uvicorn would bind it), or None; checked
    before the catalog and policies load so a taken port is one line, not a log trace."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def _settle(app: object) -> None:
    """Load the catalog snapshot before the first request instead of during it."""
    app.state.service.discovery.snapshot()  # type: ignore[attr-defined]


def recovered(lg: Lakegate) -> None:
    """Write the outcomes a crashed server left out (governance/session/recovery.py), and say so
    (`serve` and `connect` both do, before they accept work)."""
    from governance.session.recovery import recover_outcomes

    resolved = [r for r in recover_outcomes(lg) if r.landing.state != "unknown"]
    if resolved:
        fail(
            f"recorded {len(resolved)} outcome(s) a stopped server left out (phase=recovered; "
            "see 'lakegate audit query --pending')"
        )
