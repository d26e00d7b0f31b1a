"""What a soak watches, on `/metrics` (issue 39 item 4, governance/metrics.py): the plan
cache's entries against its bound, the driver JVM's heap, the process's Python objects and
threads. In a process of its own: the gauges follow the newest Lakegate of the process, and
this one must be the only one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import gc, math, tempfile
from pathlib import Path
from prometheus_client import REGISTRY, generate_latest
from governance.session.governed import Lakegate
from governance.tools.demo import write_config

def v(name, **labels):
    return REGISTRY.get_sample_value(name, labels or None)

with tempfile.TemporaryDirectory() as tmp:
    lg = Lakegate.open(write_config(Path(tmp)))
    text = generate_latest().decode()
    print(v("lakegate_cache_entries", cache="plan") == len(lg.plans) == 0,
          v("lakegate_cache_bound", cache="plan") == lg.plans.size == 2048,
          math.isnan(v("lakegate_jvm_heap_used_bytes")),  # Spark not started: not started
          v("lakegate_python_objects") > 1000, v("lakegate_threads") >= 1,
          "process_open_fds" in text and "process_resident_memory_bytes" in text)
    lg.close()
    del lg
    gc.collect()
    print(math.isnan(v("lakegate_cache_entries", cache="plan")))  # not kept alive by it
"""


def test_metrics_show_the_plan_cache_against_its_bound_and_the_process_objects() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"] * 7
