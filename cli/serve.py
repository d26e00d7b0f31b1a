"""`lakegate serve`: the REST API under uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import json
import logging
import socket
from typing import TYPE_CHECKING

import click

from api.net import is_loopback
from cli.kit import EXIT_OK, EXIT_UNAVAILABLE, config_option, config_path, fail

if TYPE_CHECKING:
    from governance.session import Lakegate


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
    Spark starts and the policies load before the port opens. Exits 5 when the address
    cannot be bound or Spark cannot start."""
    import uvicorn

    from api.app import create_app
    from api.directory import directory_sync
    from governance.config import Config
    from governance.heap import settle_heap
    from governance.session import Lakegate

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
    recovered(lg)
    # Ready before serving: the first statement must not pay for Spark's start.
    click.echo("lakegate: starting Spark before serving...", err=True)
    try:
        warm_up(lg)
    except Exception as e:
        lg.close()
        fail(f"Spark could not start ({type(e).__name__}); see {here / 'lakegate-spark.log'}")
        return EXIT_UNAVAILABLE
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
    app = create_app(lg)
    _settle(app)
    settle_heap()  # start-up's objects out of every full collection (governance/heap.py)
    try:
        with directory_sync(lg):  # LDAP's groups into the directory while serving
            uvicorn.run(
                app,
                host=host,
                port=port,
                log_config=None,
                log_level=log_level,
                access_log=access_log,
                server_header=False,
                ssl_certfile=str(cfg.api.tls_cert) if tls else None,
                ssl_keyfile=str(cfg.api.tls_key) if tls else None,
            )
    except SystemExit as e:  # uvicorn exits 1 when it cannot start (e.g. lost a bind race)
        if e.code not in (None, 0):
            fail(f"the server on {host}:{port} could not start")
            return EXIT_UNAVAILABLE
    finally:
        lg.close()
    return EXIT_OK


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
    """Write the outcomes a crashed server left out (governance/recovery.py), and say so
    (`serve` and `connect` both do, before they accept work)."""
    from governance.recovery import recover_outcomes

    resolved = [r for r in recover_outcomes(lg) if r.landing.state != "unknown"]
    if resolved:
        fail(
            f"recorded {len(resolved)} outcome(s) a stopped server left out (phase=recovered; "
            "see 'lakegate audit query --pending')"
        )
