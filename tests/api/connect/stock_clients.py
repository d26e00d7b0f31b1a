"""Stock Spark Connect clients, each in its own virtual environment, installed from the
registry the way an analyst installs them (one line per client line, see CLIENT_LINES).

The environments live under a cache directory keyed by the pins and the Python version
(`LAKEGATE_TEST_CLIENTS`, else ~/.cache/lakegate-test-clients), so each machine installs
each line once; all missing lines install at the same time. An environment is used only
after its client imported (the marker file), so an interrupted install is redone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: The install line of each client line, as the README states it (`pip install ...`).
#: pyspark 3.5 caps numpy below 2 while pyarrow 26 needs numpy 2, and pandas 3 is newer
#: than anything 3.5 was built against: the 3.5 line needs both caps to import at all.
CLIENT_LINES: dict[str, tuple[str, ...]] = {
    "pyspark-client-4.2": ("pyspark-client==4.2.0",),
    "pyspark-4.3": ("pyspark[connect]==4.3.0",),
    "pyspark-connect-3.5": ("pyspark[connect]==3.5.8", "pyarrow<26", "pandas<3"),
}
IMPORT_CHECK = "from pyspark.sql.connect.session import SparkSession; import pyarrow, pandas"
MARKER = "lakegate-client-ok"


def cache_root() -> Path:
    return Path(
        os.environ.get("LAKEGATE_TEST_CLIENTS") or Path.home() / ".cache/lakegate-test-clients"
    )


def env_dir(line: str) -> Path:
    pins = CLIENT_LINES[line]
    key = hashlib.sha256(f"{sys.version_info[:2]}|{'|'.join(pins)}".encode()).hexdigest()[:12]
    return cache_root() / f"{line}-{key}"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_clients(lines: list[str]) -> dict[str, tuple[Path, float]]:
    """Each line's interpreter and the seconds its install took (0.0 when cached)."""
    out: dict[str, tuple[Path, float]] = {}
    started: dict[str, tuple[subprocess.Popen[bytes], Path, float]] = {}
    for line in lines:
        final = env_dir(line)
        if (final / MARKER).exists():
            out[line] = python_of(final), 0.0
            continue
        tmp = final.with_name(final.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        base = getattr(sys, "_base_executable", sys.executable)
        check = tmp.with_suffix(".check.py")  # a file: PySpark takes `-c` code for doctests
        check.write_text(IMPORT_CHECK + "\n")
        script = (
            f'"{base}" -m venv "{tmp}" && "{tmp}/bin/python" -m pip install -q '
            f"--disable-pip-version-check {' '.join(repr(p) for p in CLIENT_LINES[line])} && "
            f'"{tmp}/bin/python" -I "{check}"'
        )
        log = tmp.with_suffix(".log")
        with log.open("wb") as f:
            proc = subprocess.Popen(["bash", "-c", script], stdout=f, stderr=subprocess.STDOUT)
        started[line] = proc, tmp, time.perf_counter()
    for line, (proc, tmp, t0) in started.items():
        rc = proc.wait()
        log = tmp.with_suffix(".log")
        if rc != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"installing {line} failed:\n{log.read_text()[-3000:]}")
        (tmp / MARKER).write_text(" ".join(CLIENT_LINES[line]) + "\n")
        final = env_dir(line)
        if final.exists():  # another run finished first: use its copy
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(final)
        log.unlink(missing_ok=True)
        tmp.with_suffix(".check.py").unlink(missing_ok=True)
        out[line] = python_of(final), time.perf_counter() - t0
    return out


if __name__ == "__main__":  # `python tests/api/connect/stock_clients.py`: install every line now
    for name, (py, secs) in ensure_clients(list(CLIENT_LINES)).items():
        print(f"{name}: {py} ({secs:.0f} s)")
