"""Probes during start-up (issue 42, item 4): both servers open their HTTP port before Spark
starts, answer `/healthz` 200 and `/readyz` 503 while it starts, and `/readyz` 200 once it
is up; the REST server refuses other requests with 503 meanwhile. A healthy running
deployment passes `doctor` (item 8: Spark's own 0711 copies of the Delta jars in its scratch
are no finding). Real `lakegate serve` and `lakegate connect` processes, stopped by the tests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cli import main
from governance.tools.demo import write_config

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _until(url: str, status: int, seconds: float, proc: subprocess.Popen) -> tuple[int, bytes]:
    """The first answer of `url` with `status` within `seconds` (connection refused: retry)."""
    deadline = time.monotonic() + seconds
    last: tuple[int, bytes] | None = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited {proc.returncode}"
        try:
            last = _get(url)
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
            continue
        if last[0] == status:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {status} in {seconds}s (last: {last})")


def _start(tmp_path: Path, *argv: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("LAKEGATE_CONFIG", "LAKEGATE_USER")}
    env["PYTHONPATH"] = str(ROOT)
    log = (tmp_path / "server.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "--config", str(tmp_path / "lakegate.yaml"), *argv],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _probes_open_before_spark_and_turn_ready(base: str, proc: subprocess.Popen) -> None:
    # the port opens within seconds, long before Spark (a JVM start) is up
    health = _until(f"{base}/healthz", 200, 30, proc)
    assert json.loads(health[1]) == {"status": "ok"}
    status, payload = _get(f"{base}/readyz")
    assert (status, json.loads(payload)) == (
        503,
        {"status": "not ready", "checks": {"spark": "starting"}},
    )
    assert _get(f"{base}/metrics")[0] == 200
    ready = _until(f"{base}/readyz", 200, 600, proc)
    assert json.loads(ready[1])["status"] == "ready"


@pytest.mark.timeout(900)
def test_serve_answers_healthz_and_readyz_503_while_spark_starts_then_ready(
    tmp_path: Path,
) -> None:
    write_config(tmp_path)
    port = _free_port()
    proc = _start(tmp_path, "serve", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        _until(f"{base}/healthz", 200, 30, proc)
        # any other request is refused, before authentication, until Spark is up
        status, payload = _get(f"{base}/api/lakegate/v1/domains")
        assert status == 503 and json.loads(payload)["error_code"] == "TEMPORARILY_UNAVAILABLE"
        _probes_open_before_spark_and_turn_ready(base, proc)
        # then the real app answers: authentication first
        assert _get(f"{base}/api/lakegate/v1/domains")[0] == 401
        _an_idle_connection_is_kept_past_five_seconds(port)
    finally:
        code = _stop(proc)
    assert code == 0, (tmp_path / "server.log").read_text()[-2000:]


def _answer(conn: socket.socket) -> bytes:
    """One HTTP/1.1 answer off a kept-alive connection (b"" once the server closed it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head


def _an_idle_connection_is_kept_past_five_seconds(port: int) -> None:
    """api.keep_alive_seconds (75): uvicorn's own 5 s closed idle connections first, and a
    client whose next request crossed that close got a reset (a REST client of the load
    benchmark did, once, at N = 32)."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        assert _answer(conn).startswith(b"HTTP/1.1 200")
        time.sleep(6.5)
        conn.sendall(request)
        assert _answer(conn).startswith(b"HTTP/1.1 200"), "the idle connection was closed"


def _grpc(ca: Path, port: int):
    import grpc

    creds = grpc.ssl_channel_credentials(ca.read_bytes())
    return grpc.secure_channel(f"localhost:{port}", creds)


def _health(channel) -> str:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="spark.connect.SparkConnectService"),
        timeout=30,
        wait_for_ready=True,  # the port opens a moment after the metrics port
    )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def _config_call(channel, token: str) -> str:
    """The gRPC status of one Config RPC with `token` (a session of its own)."""
    import uuid

    import grpc
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    request = base_pb2.ConfigRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="root"),
        operation=base_pb2.ConfigRequest.Operation(get_all=base_pb2.ConfigRequest.GetAll()),
    )
    try:
        base_pb2_grpc.SparkConnectServiceStub(channel).Config(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=60
        )
    except grpc.RpcError as e:
        return e.code().name
    return "OK"


@pytest.mark.timeout(900)
def test_connect_answers_probes_and_grpc_health_while_spark_starts_then_takes_saved_tokens(
    tmp_path: Path, capsys
) -> None:
    """Item 4 for the gateway: `--metrics-port` and the gRPC port itself open at once
    (grpc.health.v1 NOT_SERVING, any other call UNAVAILABLE), SERVING once Spark is up.
    Item 9: a token saved with `token create --save` is accepted at once."""
    config = write_config(tmp_path)
    assert main(["--config", str(config), "certs"]) == 0
    ca = next(tmp_path.rglob("ca.pem"))
    port, grpc_port = _free_port(), _free_port()
    proc = _start(tmp_path, "connect", "--port", str(grpc_port), "--metrics-port", str(port))
    try:
        _until(f"http://127.0.0.1:{port}/healthz", 200, 30, proc)
        with _grpc(ca, grpc_port) as channel:
            assert _health(channel) == "NOT_SERVING"
            assert _config_call(channel, "any-token") == "UNAVAILABLE"
        _probes_open_before_spark_and_turn_ready(f"http://127.0.0.1:{port}", proc)
        with _grpc(ca, grpc_port) as channel:
            assert _health(channel) == "SERVING"
            capsys.readouterr()
            assert main(["--config", str(config), "token", "create", "-u", "root", "--save"]) == 0
            token = capsys.readouterr().out.splitlines()[0]
            assert _config_call(channel, token + "x") == "UNAUTHENTICATED"
            deadline = time.monotonic() + 30
            while _config_call(channel, token) == "UNAUTHENTICATED":
                assert time.monotonic() < deadline, "the saved token was not taken"
                time.sleep(0.5)
    finally:
        code = _stop(proc)
    assert code == 0, (tmp_path / "server.log").read_text()[-2000:]


@pytest.mark.timeout(900)
def test_doctor_passes_while_the_server_runs_with_sparks_scratch_jars(
    tmp_path: Path, capsys
) -> None:
    config = write_config(tmp_path)
    config.chmod(0o600)
    port = _free_port()
    proc = _start(tmp_path, "serve", "--port", str(port))
    try:
        _until(f"http://127.0.0.1:{port}/readyz", 200, 600, proc)
        scratch = tmp_path / "state" / "spark-local"
        marked = [
            p
            for p in scratch.rglob("*.jar")
            if stat.S_IMODE(p.lstat().st_mode) & 0o011 and not p.is_symlink()
        ]
        assert marked, "Spark's scratch holds no a+x jar copies: the case is not exercised"
        capsys.readouterr()
        main(["--config", str(config), "doctor", "-o", "json"])
        checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
        assert checks["file modes"]["status"] == "ok", checks["file modes"]
        # a read bit for others still counts, in the same tree
        marked[0].chmod(0o744)
        main(["--config", str(config), "doctor", "-o", "json"])
        checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
        assert checks["file modes"]["status"] == "FAIL"
        assert f"{marked[0]} (744)" in checks["file modes"]["detail"]
    finally:
        code = _stop(proc)
    assert code == 0, (tmp_path / "server.log").read_text()[-2000:]
