"""Processes the beyond-one-machine tests start: free loopback ports, and stopping each
process group (a JVM's children too), even when a test failed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_groups(procs: list[subprocess.Popen], timeout: float = 60) -> None:
    """SIGTERM each group, SIGKILL what outlives `timeout`; none may survive."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    assert all(p.poll() is not None for p in procs), "a started process outlived its test"
