"""`lakegate connect`: serve the governed Spark Connect gateway (api/connect) until stopped."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

import click

from api.connect.server import Gateway, tls_files
from api.directory import directory_sync
from cli.kit import EXIT_OK, config_option, config_path
from cli.serve import recovered

if TYPE_CHECKING:
    pass


@click.command("connect")
@config_option
@click.option("--host", help="address to bind (default: connect.host, else 127.0.0.1)")
@click.option(
    "--port", type=click.IntRange(0, 65535), help="port (default: connect.port, else 15002)"
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="serve Prometheus metrics at http://HOST:PORT/metrics (HOST: the gateway's)",
)
def connect(host: str | None, port: int | None, metrics_port: int | None) -> int:
    """Serve governed Spark Connect (gRPC over TLS) for stock PySpark.

    Needs connect.tls_cert and connect.tls_key; tokens are api.tokens / api.secret. Spark
    starts and the policies load before the port opens; grpc.health.v1 answers SERVING
    from then on."""
    from governance.heap import settle_heap
    from governance.session import Lakegate

    config = config_path()
    here = config.resolve().parent
    lg = Lakegate.open(
        config, spark_log=here / "lakegate-spark.log", error_log=here / "lakegate-server.log"
    )
    recovered(lg)
    try:
        tls_files(lg.config)  # no certificate, no endpoint: said before Spark starts
        click.echo("lakegate: starting Spark before serving...", err=True)
        gateway = Gateway(lg, host=host, port=port)
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, addr=gateway.host)
        settle_heap()  # start-up's objects out of every full collection (governance/heap.py)
        gateway.start()
        click.echo(f"lakegate: Spark Connect on {gateway.host}:{gateway.port} (TLS)", err=True)
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        with directory_sync(lg):  # LDAP's groups into the directory while serving
            done.wait()
        gateway.stop()
    finally:
        lg.close()
    return EXIT_OK
