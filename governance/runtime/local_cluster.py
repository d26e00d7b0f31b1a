"""A throwaway Spark standalone cluster on loopback, from what the pyspark wheel ships
(`bin/spark-class` Master and Workers), for the cluster-mode tests and benchmarks and for
trying `spark.master: spark://...` on one machine.

Each process runs in its own process group and is stopped by it (the JVM's children too),
even when the caller fails. Not a deployment tool: a real cluster is run by its operators.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class ClusterDidNotStart(RuntimeError):
    """The Master or a Worker exited, or the workers were not ALIVE in time."""


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
    if any(p.poll() is None for p in procs):
        raise RuntimeError("a started process outlived its stop")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@contextmanager
def standalone_cluster(
    root: Path, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 120
) -> Iterator[str]:
    """Yields the master URL (`spark://127.0.0.1:port`) once every worker is ALIVE; logs
    and work directories live under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    home = spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_LOG_DIR": str(root),
        "PYSPARK_PYTHON": sys.executable,
    }

    def start(args: list[str], log: Path) -> subprocess.Popen:
        with log.open("ab") as out:
            return subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    master = "org.apache.spark.deploy.master.Master"
    procs = [
        start(
            [master, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
            root / "master.log",
        )
    ]
    try:
        worker = "org.apache.spark.deploy.worker.Worker"
        for i in range(workers):
            args = [worker, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory]
            procs.append(
                start([*args, "--webui-port", str(free_port()), url], root / f"worker{i}.log")
            )
        _wait_alive(ui, workers, procs, root, timeout)
        yield url
    finally:
        stop_groups(procs, timeout=20)


def _wait_alive(
    ui: int, workers: int, procs: list[subprocess.Popen], root: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    alive = 0
    while alive < workers:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            logs = "\n".join(f.read_text()[-2000:] for f in sorted(root.glob("*.log")))
            raise ClusterDidNotStart(f"the standalone cluster did not come up:\n{logs}")
        time.sleep(1)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                state = json.load(r)
        except OSError:
            continue
        alive = sum(w.get("state") == "ALIVE" for w in state.get("workers", []))
