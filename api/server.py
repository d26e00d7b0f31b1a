"""`lakegate serve`: the REST API under uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None,
                        help="address to bind (default: api.host, else 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help="port (default: api.port, else 8080)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--access-log", action="store_true",
                        help="uvicorn's access log too (every request is audited anyway)")
    parser.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from governance.session import Lakegate

    # Spark starts only with the first SQL statement; full Spark errors go to the server log
    config = Path(args.config)
    lg = Lakegate.open(config, error_log=config.resolve().parent / "lakegate-server.log")
    cfg = lg.config.api
    host = args.host or cfg.host
    port = args.port if args.port is not None else cfg.port
    if not cfg.tokens and not cfg.secret:
        print("lakegate: no api.tokens or api.secret in the config: every request will be "
              "refused (401); see api/README.md", file=sys.stderr)
    if not _is_loopback(host):
        print(f"lakegate: serving on {host}, beyond loopback: put TLS in front of it",
              file=sys.stderr)
    # uvicorn's default log setup is logging.config.dictConfig, which closes every existing
    # handler, the audit log's included (every request would then be refused): keep ours.
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(lg)
    _settle(app)
    try:
        uvicorn.run(app, host=host, port=port, log_config=None,
                    log_level=args.log_level, access_log=args.access_log, server_header=False)
    finally:
        lg.close()
    return 0


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
