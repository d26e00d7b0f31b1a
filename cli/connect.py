"""`lakegate connect`: serve the governed Spark Connect gateway (api/connect) until stopped."""

from __future__ import annotations

import signal
import threading

import click

from api.connect.server import Gateway, Starting, tls_files
from api.directory import directory_sync
from cli.kit import EXIT_OK, config_option, config_path
from cli.serve import recovered
from governance.errors import ConfigError


@click.command("connect")
@config_option
@click.option("--host", help="address to bind (default: connect.host, else 127.0.0.1)")
@click.option(
    "--port", type=click.IntRange(0, 65535), help="port (default: connect.port, else 15002)"
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="serve /metrics, /healthz and /readyz at http://HOST:PORT (HOST: the gateway's), "
    "open before Spark starts",
)
def connect(host: str | None, port: int | None, metrics_port: int | None) -> int:
    """Serve governed Spark Connect (gRPC over TLS) for stock PySpark.

    Needs connect.tls_cert and connect.tls_key; tokens are api.tokens / api.secret. The
    gRPC port opens at once: grpc.health.v1 answers NOT_SERVING (other calls UNAVAILABLE)
    until Spark is up and the policies loaded, SERVING from then on. --metrics-port opens
    at once too: /healthz 200, /readyz 503 until then."""
    from api.health import ProbeServer
    from governance.runtime.heap import settle_heap
    from governance.session.governed import Lakegate

    config = config_path()
    here = config.resolve().parent
    lg = Lakegate.open(
        config, spark_log=here / "lakegate-spark.log", error_log=here / "lakegate-server.log"
    )
    probes: ProbeServer | None = None
    starting: Starting | None = None
    gateway: Gateway | None = None
    try:
        tls_files(lg.config)  # no certificate, no endpoint: said before Spark starts
        if metrics_port is not None:
            # /healthz 200 and /readyz 503 while Spark starts (api/health.py)
            try:
                probes = ProbeServer(lg, host or lg.config.connect.host, metrics_port)
            except OSError as e:
                raise ConfigError(f"cannot listen on port {metrics_port}: {e.strerror}") from None
        # the gRPC port at once: health NOT_SERVING, other calls UNAVAILABLE until Spark is up
        starting = Starting(lg.config, host, port)
        recovered(lg)
        click.echo("lakegate: starting Spark before serving...", err=True)
        gateway = Gateway(lg, host=host, port=port, tokens_from=lg.config.path, starting=starting)
        settle_heap()  # start-up's objects out of every full collection (runtime/heap.py)
        gateway.start()
        if probes is not None:
            probes.ready()
        click.echo(f"lakegate: Spark Connect on {gateway.host}:{gateway.port} (TLS)", err=True)
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        with directory_sync(lg):  # LDAP's groups into the directory while serving
            done.wait()
        gateway.stop()
    finally:
        if starting is not None and gateway is None:  # Spark never came up
            starting.front.stop()
            starting.stop()
        if probes is not None:
            probes.stop()
        lg.close()
    return EXIT_OK
