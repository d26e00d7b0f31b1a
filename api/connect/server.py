"""`lakegate connect`: the governed Spark Connect endpoint (gRPC over TLS).

The gateway listens where `connect.host`/`connect.port` (or --host/--port) say, with the
certificate and key named in `connect.tls_cert`/`connect.tls_key`; the Spark Connect
backend it forwards to runs inside this process's driver JVM on loopback (backend.py).
"""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import click

from governance.cli.kit import EXIT_OK, config_option, config_path, fail
from governance.errors import ConfigError

if TYPE_CHECKING:
    from governance.session import Lakegate


#: What the health service reports on: the server as a whole ("") and the Connect service.
HEALTH_SERVICES = ("", "spark.connect.SparkConnectService")


class Gateway:
    """The TLS gRPC server, its servicer and the in-JVM backend; `stop()` ends all three."""

    def __init__(
        self,
        lg: Lakegate,
        *,
        host: str | None = None,
        port: int | None = None,
        max_workers: int = 16,
    ) -> None:
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc
        from pyspark.sql.connect.proto import base_pb2_grpc

        from api.connect.backend import MAX_MESSAGE_BYTES, Backend
        from api.connect.service import ConnectService

        cfg = lg.config.connect
        if cfg.tls_cert is None or cfg.tls_key is None:
            raise ConfigError(
                "connect.tls_cert and connect.tls_key are required: PySpark "
                "sends a token only over TLS"
            )
        try:
            creds = grpc.ssl_server_credentials(
                [(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())]
            )
        except OSError as e:
            raise ConfigError(f"connect TLS files: {e.strerror}: {e.filename}") from None
        self.backend = Backend(lg.spark)
        self.service = ConnectService(lg, self.backend)
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="lakegate-connect"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        base_pb2_grpc.add_SparkConnectServiceServicer_to_server(self.service, self.server)
        # the standard gRPC health service (grpc.health.v1): NOT_SERVING until start()
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        for name in HEALTH_SERVICES:
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.host = host or cfg.host
        try:
            self.port = self.server.add_secure_port(
                f"{self.host}:{cfg.port if port is None else port}", creds
            )
        except RuntimeError:
            self.port = 0
        if not self.port:
            self.backend.stop()
            raise ConfigError(f"cannot listen on {self.host}:{port or cfg.port}")

    def start(self) -> None:
        """Serve; Spark is already up and the policies loaded (ready before serving)."""
        from grpc_health.v1 import health_pb2

        self.server.start()
        for name in HEALTH_SERVICES:
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.service.close()
        self.backend.stop()


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
    from governance.session import Lakegate

    config = config_path()
    here = config.resolve().parent
    lg = Lakegate.open(
        config, spark_log=here / "lakegate-spark.log", error_log=here / "lakegate-server.log"
    )
    _recovered(lg)
    try:
        click.echo("lakegate: starting Spark before serving...", err=True)
        gateway = Gateway(lg, host=host, port=port)
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, addr=gateway.host)
        gateway.start()
        click.echo(f"lakegate: Spark Connect on {gateway.host}:{gateway.port} (TLS)", err=True)
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        done.wait()
        gateway.stop()
    finally:
        lg.close()
    return EXIT_OK


def _recovered(lg: Lakegate) -> None:
    """Write the outcomes a crashed server left out (governance/recovery.py), and say so."""
    from governance.recovery import recover_outcomes

    resolved = [r for r in recover_outcomes(lg) if r.landing.state != "unknown"]
    if resolved:
        fail(
            f"recorded {len(resolved)} outcome(s) a stopped server left out (phase=recovered; "
            "see 'lakegate audit query --pending')"
        )
