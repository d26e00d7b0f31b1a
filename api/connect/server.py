"""`lakegate connect`: the governed Spark Connect endpoint (gRPC over TLS).

The gateway listens where `connect.host`/`connect.port` (or --host/--port) say, with the
certificate and key named in `connect.tls_cert`/`connect.tls_key` (front.py: TLS is relayed
to gRPC's TLS server on loopback, a plaintext client is told to use TLS); the Spark Connect
backend it forwards to runs inside this process's driver JVM on loopback (backend.py).

The public port opens before Spark starts (`Starting`): a gRPC server on loopback with only
the standard health service, `NOT_SERVING`, behind the same relay, and every other call
answered UNAVAILABLE ("starting"), which clients retry. Once Spark is up the relay turns to
the real server, whose health service says `SERVING`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from governance.errors import ConfigError

if TYPE_CHECKING:
    from governance.config import Config
    from governance.session.governed import Lakegate


#: What the health service reports on: the server as a whole ("") and the Connect service.
HEALTH_SERVICES = ("", "spark.connect.SparkConnectService")
STARTING_MESSAGE = "the gateway is starting (Spark is not up yet): retry shortly"


class Starting:
    """The public port while Spark starts: the relay (front.py) to a loopback TLS gRPC
    server that answers grpc.health.v1 `NOT_SERVING` and any other call UNAVAILABLE.
    `Gateway(..., starting=this)` takes the relay over and stops this server."""

    def __init__(self, config: Config, host: str | None = None, port: int | None = None) -> None:
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        from api.connect.front import Front

        cfg = config.connect
        key, cert = tls_files(config)
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="lakegate-starting")
        )
        servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, self.server)
        for name in HEALTH_SERVICES:
            servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server.add_generic_rpc_handlers((_Unavailable(),))
        self.host = host or cfg.host
        try:
            tls_port = self.server.add_secure_port(
                "127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)])
            )
        except RuntimeError:
            tls_port = 0
        try:
            if not tls_port:
                raise OSError("no loopback port for the TLS server")
            self.front = Front(self.host, cfg.port if port is None else port, tls_port)
        except OSError:
            raise ConfigError(f"cannot listen on {self.host}:{port or cfg.port}") from None
        self.server.start()
        self.front.start()

    def stop(self) -> None:
        self.server.stop(0).wait()


def _unavailable(_request: object, context: Any) -> None:
    import grpc

    context.abort(grpc.StatusCode.UNAVAILABLE, STARTING_MESSAGE)


class _Unavailable:
    """Every method but the health service's, while Spark starts: UNAVAILABLE (retried)."""

    def service(self, _details: object) -> object:
        import grpc

        return grpc.unary_unary_rpc_method_handler(_unavailable)


class Gateway:
    """The TLS gRPC server, its servicer and the in-JVM backend; `stop()` ends all three.
    `tokens_from` (the server's lakegate.yaml) is re-read for tokens while it runs;
    `starting` hands over the public port opened before Spark started."""

    def __init__(
        self,
        lg: Lakegate,
        *,
        host: str | None = None,
        port: int | None = None,
        max_workers: int | None = None,
        tokens_from: Path | None = None,
        starting: Starting | None = None,
    ) -> None:
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc
        from pyspark.sql.connect.proto import base_pb2_grpc

        from api.connect.backend import MAX_MESSAGE_BYTES, Backend
        from api.connect.front import Front
        from api.connect.rpc_metrics import RpcMetrics
        from api.connect.service import ConnectService

        cfg = lg.config.connect
        if max_workers is None:
            # a call holds its thread while its result streams, and a user holds at most
            # 2 x max_statements_per_user (running + queued, limits.py) and
            # max_sessions_per_user held before a busy answer (max_sessions / 2 held in
            # all); too few threads would queue every user's calls behind one user's in
            # gRPC's own FIFO
            max_workers = max(16, 2 * cfg.max_sessions)
        key, cert = tls_files(lg.config)
        creds = grpc.ssl_server_credentials([(key, cert)])
        self.backend = Backend(lg.spark)
        self.service = ConnectService(lg, self.backend, tokens_from=tokens_from)
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="lakegate-connect"),
            interceptors=[RpcMetrics()],
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
        self.starting = starting
        # gRPC's TLS server listens on loopback only; the public port is the Front, which
        # relays TLS to it and answers a plaintext client with one line (front.py)
        try:
            tls_port = self.server.add_secure_port("127.0.0.1:0", creds)
        except RuntimeError:
            tls_port = 0
        try:
            if not tls_port:
                raise OSError("no loopback port for the TLS server")
            if starting is not None:
                self.host, self.front = starting.host, starting.front
            else:
                self.front = Front(self.host, cfg.port if port is None else port, tls_port)
        except OSError:
            self.backend.stop()
            raise ConfigError(f"cannot listen on {self.host}:{port or cfg.port}") from None
        self._tls_port = tls_port
        self.port = self.front.port
        self.service.relay_clients = self.front.client_of

    def start(self) -> None:
        """Serve; Spark is already up and the policies loaded (ready before serving)."""
        from grpc_health.v1 import health_pb2

        self.server.start()
        for name in HEALTH_SERVICES:
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.starting is None:
            self.front.start()
        else:  # new connections reach the real server; the starting one's are closed
            self.front.upstream = self._tls_port
            self.starting.stop()

    def stop(self, grace: float = 2.0) -> None:
        self.front.stop()
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.service.close()
        self.backend.stop()


def tls_files(config: Config) -> tuple[bytes, bytes]:
    """The gateway's TLS key and certificate (ConfigError when either is missing): checked
    before anything starts, since PySpark sends a token only over TLS."""
    cfg = config.connect
    if cfg.tls_cert is None or cfg.tls_key is None:
        raise ConfigError(
            "connect.tls_cert and connect.tls_key are required: PySpark sends a token only over TLS"
        )
    try:
        return cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes()
    except OSError as e:
        raise ConfigError(f"connect TLS files: {e.strerror}: {e.filename}") from None
