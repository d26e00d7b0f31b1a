"""The gateway's port speaks TLS only, and says so at once to a client that does not.

A plaintext HTTP/2 client (no `use_ssl=true`; PySpark 4 no longer turns TLS on for a token,
and never for `localhost`) gets a gRPC FAILED_PRECONDITION whose message says to add
`use_ssl=true`, on its first call, instead of a TLS handshake failure its client retries for
minutes. TLS connections are relayed to the gRPC server untouched.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from pathlib import Path

import grpc
import pytest
from connect_testkit import kept, token_of
from stock_clients import CLIENT_LINES

from api.connect.front import PLAINTEXT_MESSAGE

HERE = Path(__file__).resolve().parent
FOUR_X = [line for line in CLIENT_LINES if "-4." in line]


def test_plaintext_grpc_call_is_answered_with_use_ssl_line(gateway) -> None:
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        stub = base_pb2_grpc.SparkConnectServiceStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.Config(base_pb2.ConfigRequest(session_id="x"), timeout=60)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details() == PLAINTEXT_MESSAGE


def test_stock_35_client_without_tls_reads_use_ssl_line(gateway) -> None:
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    s = kept(RemoteSession.builder.remote(f"sc://127.0.0.1:{gateway.port}").create())
    with pytest.raises(Exception, match="add ;use_ssl=true to the sc:// URL"):
        s.sql("SELECT 1").collect()


@pytest.mark.parametrize("line", FOUR_X)
@pytest.mark.parametrize("url", ["sc://localhost:{port}/;token={token}", "sc://127.0.0.1:{port}"])
def test_stock_4x_client_without_tls_reads_use_ssl_line_and_stops(
    line, url, stock_clients, gateway, tmp_path
) -> None:
    """The stock client process ends by itself with the line (the subprocess timeout is only
    a hang guard: a client that retried would be killed there and fail the test)."""
    target = url.format(port=gateway.port, token=token_of("alice"))
    proc = subprocess.run(
        [
            str(stock_clients[line]),
            "-I",
            str(HERE / "stock_conformance.py"),
            "--first-error",
            target,
        ],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{line} {target.split(';')[0]}: {got}")
    assert "add ;use_ssl=true to the sc:// URL" in got["error"]


def test_tls_is_relayed_and_the_client_address_kept(gateway, connect_lakegate) -> None:
    """A TLS handshake from another loopback address reaches the gateway's certificate
    through the relay, and the relay names that address for the audit."""
    ctx = ssl.create_default_context(cafile=str(connect_lakegate.ca))
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", gateway.port), source_address=("127.0.0.2", 0))
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.selected_alpn_protocol() == "h2"
        assert "127.0.0.2" in gateway.front._clients.values()


def test_http1_request_is_answered_with_one_line(gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    assert answer.endswith(b"Lakegate Spark Connect gateway: gRPC over TLS (use_ssl=true)")
