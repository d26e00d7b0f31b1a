"""The gateway's standard gRPC health service (issue 27): a started gateway answers SERVING
for the server and the Spark Connect service over the same TLS port, without a token; an
unknown service name is NOT_FOUND, as grpc.health.v1 says; its certificates are the ones
`lakegate certs` makes (connect_testkit.make_tls).
"""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc


@pytest.fixture(scope="module")
def health(gateway, connect_lakegate):
    creds = grpc.ssl_channel_credentials(connect_lakegate.ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{gateway.port}", creds) as channel:
        yield health_pb2_grpc.HealthStub(channel)


@pytest.mark.parametrize("service", ["", "spark.connect.SparkConnectService"])
def test_a_started_gateway_is_serving(health, service: str) -> None:
    reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_an_unknown_service_is_not_found(health) -> None:
    with pytest.raises(grpc.RpcError) as info:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=30)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_metrics_count_the_gateways_open_sessions(gateway, remote) -> None:
    """`lakegate_connect_sessions` is the gateway's session registry's count, scraped live
    (a gauge whose function failed broke every /metrics answer of the process)."""
    from prometheus_client import REGISTRY, generate_latest

    remote("carol").sql("SELECT 1").collect()
    assert b"lakegate_connect_sessions " in generate_latest()
    assert (
        REGISTRY.get_sample_value("lakegate_connect_sessions") == gateway.service.sessions.count()
    )
    assert gateway.service.sessions.count() >= 1


def test_metrics_count_and_time_rpcs_by_method_and_status(gateway, remote) -> None:
    """Issue 42, item 5: every RPC by the service's method name and its gRPC status, with a
    latency histogram; a refused statement is counted under its refusal's status."""
    from prometheus_client import REGISTRY

    def sample(name: str, labels: dict[str, str]) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    ok = {"method": "ExecutePlan", "status": "OK"}
    before_ok = sample("lakegate_connect_rpcs_total", ok)
    before_n = sample("lakegate_connect_rpc_seconds_count", {"method": "ExecutePlan"})
    refused = {
        name: sample("lakegate_connect_rpcs_total", {"method": m, "status": s})
        for name, (m, s) in {
            "x": ("ExecutePlan", "PERMISSION_DENIED"),
            "y": ("AnalyzePlan", "PERMISSION_DENIED"),
        }.items()
    }
    carol = remote("carol")
    carol.sql("SELECT 1").collect()
    with pytest.raises(Exception):  # noqa: B017 (the client's class differs by line)
        carol.sql("SELECT salary FROM main.hr.employees").collect()
    assert sample("lakegate_connect_rpcs_total", ok) > before_ok
    assert sample("lakegate_connect_rpc_seconds_count", {"method": "ExecutePlan"}) > before_n
    after = {
        name: sample("lakegate_connect_rpcs_total", {"method": m, "status": s})
        for name, (m, s) in {
            "x": ("ExecutePlan", "PERMISSION_DENIED"),
            "y": ("AnalyzePlan", "PERMISSION_DENIED"),
        }.items()
    }
    assert sum(after.values()) > sum(refused.values()), after


def test_metrics_show_the_gateways_bounded_caches_against_their_bounds(gateway, remote) -> None:
    """Issue 39 item 4: open sessions and the verified Datasets kept in the backend, each
    with its configured bound, scraped live (a soak reads them off /metrics)."""
    from prometheus_client import REGISTRY

    from api.connect.verified import KEPT

    carol = remote("carol")
    carol.sql("SELECT id FROM main.sales.orders").collect()  # verified, kept for its session
    sessions, cfg = gateway.service.sessions, gateway.service.lg.config.connect

    def value(name: str, cache: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"cache": cache})

    assert value("lakegate_cache_entries", "connect_sessions") == sessions.count() >= 1
    assert value("lakegate_cache_bound", "connect_sessions") == cfg.max_sessions
    assert value("lakegate_cache_entries", "connect_kept") == sessions.kept()
    assert value("lakegate_cache_bound", "connect_kept") == KEPT * cfg.max_sessions
