"""Ready before serving (issue 27): `/healthz`, `/readyz` and `/metrics` on the REST server
answer without a token and stay out of the audit log; `/readyz` says which dependency is not
ready; `/metrics` counts statements by kind and outcome and times their phases, and (issue
42) every request by method, route template and status with a latency histogram.
"""

from __future__ import annotations

from pathlib import Path

from api_testkit import LG, read_audit, token_of
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_healthz_and_readyz_answer_without_a_token_and_are_not_audited(app, api_lakegate) -> None:
    client = TestClient(app)
    lines = len(read_audit(api_lakegate))
    assert (client.get("/healthz").status_code, client.get("/healthz").json()) == (
        200,
        {"status": "ok"},
    )
    ready = client.get("/readyz")
    assert (ready.status_code, ready.json()) == (
        200,
        {
            "status": "ready",
            "checks": {"spark": "ok", "catalog": "ok", "policies": "ok", "audit": "ok"},
        },
    )
    assert len(read_audit(api_lakegate)) == lines


def test_readyz_is_503_and_names_spark_while_it_has_not_started(tmp_path: Path) -> None:
    from api.app import create_app
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    lg = Lakegate.open(write_config(tmp_path))  # Spark starts on first use: not yet
    try:
        r = TestClient(create_app(lg)).get("/readyz")
    finally:
        lg.close()
    assert (r.status_code, r.json()) == (
        503,
        {
            "status": "not ready",
            "checks": {"spark": "not started", "catalog": "ok", "policies": "ok", "audit": "ok"},
        },
    )


def test_metrics_count_statements_by_kind_and_outcome_and_time_their_phases(app) -> None:
    client = TestClient(app)
    ok = {"kind": "select", "outcome": "ok"}
    denied = {"kind": "select", "outcome": "denied"}
    before = (
        _sample("lakegate_statements_total", ok),
        _sample("lakegate_statements_total", denied),
        _sample("lakegate_statement_phase_seconds_count", {"phase": "verify"}),
        _sample("lakegate_audit_lines_total", {}),
    )
    auth = {"Authorization": f"Bearer {token_of('carol')}"}
    r = client.post(
        f"{LG}/statements", json={"statement": "SELECT id FROM main.sales.orders"}, headers=auth
    )
    assert r.status_code == 200, r.text
    frank = {"Authorization": f"Bearer {token_of('frank')}"}  # no grant on orders
    r = client.post(
        f"{LG}/statements", json={"statement": "SELECT * FROM main.sales.orders"}, headers=frank
    )
    assert r.status_code == 403, r.text
    after = (
        _sample("lakegate_statements_total", ok),
        _sample("lakegate_statements_total", denied),
        _sample("lakegate_statement_phase_seconds_count", {"phase": "verify"}),
        _sample("lakegate_audit_lines_total", {}),
    )
    assert after[0] - before[0] == 1
    assert after[1] - before[1] == 1
    assert after[2] - before[2] == 1
    assert after[3] - before[3] >= 4  # two statement lines and two request lines at least
    text = client.get("/metrics").text
    assert 'lakegate_statements_total{kind="select",outcome="ok"}' in text
    assert 'lakegate_statement_phase_seconds_bucket{le="0.001",phase="plan"}' in text
    assert "lakegate_policy_reloads_total" in text
    # the caches' hit ratios: every lookup counted as a hit or a miss, by cache
    for cache in ("plan", "access"):
        assert any(
            f'lakegate_cache_lookups_total{{cache="{cache}",result="{r}"}}' in text
            for r in ("hit", "miss")
        ), cache


def test_metrics_count_and_time_requests_by_route_template_and_status(app) -> None:
    client = TestClient(app)
    route = f"{LG}/domains/{{name}}"
    labels = {"method": "GET", "route": route}

    def counts() -> tuple[float, ...]:
        return (
            _sample("lakegate_http_requests_total", {**labels, "status": "200"}),
            _sample("lakegate_http_requests_total", {**labels, "status": "401"}),
            _sample(
                "lakegate_http_requests_total",
                {"method": "other", "route": "unmatched", "status": "401"},
            ),
            _sample("lakegate_http_request_seconds_count", labels),
        )

    before = counts()
    auth = {"Authorization": f"Bearer {token_of('erin')}"}
    assert client.get(f"{LG}/domains/sales", headers=auth).status_code == 200
    assert client.get(f"{LG}/domains/sales").status_code == 401  # before any routing
    # a caller's path and method never become a label (authentication comes first: 401)
    assert client.request("BREW", "/no/such/path-4711").status_code == 401
    after = counts()
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 2]
    text = client.get("/metrics").text
    assert "path-4711" not in text and "BREW" not in text
    assert (
        f'lakegate_http_request_seconds_bucket{{le="0.005",method="GET",route="{route}"}}' in text
    )
