"""`lakegate serve`: the REST API under uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import TYPE_CHECKING

import click

from governance.cli.kit import EXIT_OK, EXIT_UNAVAILABLE, config_option, config_path, fail

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
def serve(host: str | None, port: int | None, log_level: str, access_log: bool) -> int:
    """Serve the REST API.

    Unity Catalog discovery, domains, governed SQL. Exits 5 when the address cannot be
    bound."""
    import uvicorn

    from api.app import create_app
    from governance.config import Config
    from governance.session import Lakegate

    cfg = Config.load(config_path())
    host = host or cfg.api.host
    port = port if port is not None else cfg.api.port
    why = _cannot_bind(host, port)
    if why:
        fail(f"cannot listen on {host}:{port}: {why}")
        return EXIT_UNAVAILABLE
    # Spark starts only with the first SQL statement; full Spark errors go to the server log
    here = config_path().resolve().parent
    lg = Lakegate.open(
        cfg, error_log=here / "lakegate-server.log", spark_log=here / "lakegate-spark.log"
    )  # JVM noise off the console
    _recovered(lg)
    if not cfg.api.tokens and not cfg.api.secret:
        fail(
            "no api.tokens or api.secret in the config: every request will be refused "
            "(401); see api/README.md (lakegate token create makes one)"
        )
    if not _is_loopback(host):
        fail(f"serving on {host}, beyond loopback: put TLS in front of it")
    # uvicorn's default log setup is logging.config.dictConfig, which closes every existing
    # handler, the audit log's included (every request would then be refused): keep ours.
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(lg)
    _settle(app)
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_config=None,
            log_level=log_level,
            access_log=access_log,
            server_header=False,
        )
    except SystemExit as e:  # uvicorn exits 1 when it cannot start (e.g. lost a bind race)
        if e.code not in (None, 0):
            fail(f"the server on {host}:{port} could not start")
            return EXIT_UNAVAILABLE
    finally:
        lg.close()
    return EXIT_OK


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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _recovered(lg: Lakegate) -> None:
    """Write the outcomes a crashed server left out (governance/recovery.py), and say so."""
    from governance.recovery import recover_outcomes

    resolved = [r for r in recover_outcomes(lg) if r.landing.state != "unknown"]
    if resolved:
        fail(
            f"recorded {len(resolved)} outcome(s) a stopped server left out (phase=recovered; "
            "see 'lakegate audit query --pending')"
        )
