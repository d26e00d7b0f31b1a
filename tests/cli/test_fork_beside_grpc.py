"""A server process forks to exec (Spark's JVM through pyspark's launcher, git) while its
gRPC port already answers: `lakegate connect` opens the port before Spark starts. With
gRPC's fork handlers on (grpcio's core default), a fork while another thread is inside a
gRPC call skips them and leaves the process broken: measured with grpcio 1.85, 9 of 200
fork-execs of /bin/true beside 4 threads calling a health server failed, and the server's
serving thread died. The `lakegate` command turns the handlers off before grpc is imported
(cli/__init__.py); these tests run that same load in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FORKS_BESIDE_CALLS = textwrap.dedent(
    """
    import cli  # the command's own start: what `lakegate connect` imports first
    import subprocess, threading, time
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(ThreadPoolExecutor(4))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop = threading.Event()
    calls = [0]

    def hammer():
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not stop.is_set():
                stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
                calls[0] += 1

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    failed = 0
    for _ in range(200):  # pyspark's launcher passes a preexec_fn: a real fork, not vfork
        if subprocess.run(["/bin/true"], preexec_fn=lambda: None).returncode != 0:
            failed += 1
    before = calls[0]
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    print(failed, calls[0] > before, all(not t.is_alive() for t in threads))
    server.stop(0)
    """
)


def _fresh(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _env_without_the_setting() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}


def test_the_command_turns_grpcs_fork_handlers_off_before_grpc_is_imported() -> None:
    done = _fresh(
        "import os, cli, grpc; print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])",
        _env_without_the_setting(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]


def test_an_operators_own_fork_setting_is_kept() -> None:
    done = _fresh(
        "import os, cli; print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])",
        {**_env_without_the_setting(), "GRPC_ENABLE_FORK_SUPPORT": "1"},
    )
    assert done.stdout.split() == ["1"]


def test_fork_exec_beside_running_grpc_calls_neither_fails_nor_breaks_the_server() -> None:
    done = _fresh(FORKS_BESIDE_CALLS, _env_without_the_setting())
    assert done.returncode == 0, done.stderr[-3000:]
    # every fork-exec succeeded, the server still answered after them, every caller ended
    assert done.stdout.split() == ["0", "True", "True"], done.stdout + done.stderr[-3000:]
    assert "skipping fork() handlers" not in done.stderr
