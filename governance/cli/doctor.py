"""`lakegate doctor`: is this setup ready to run governed SQL? Checks what a first Spark start
or a first statement would otherwise trip over, without starting Spark or changing anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from governance.config import Config


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | FAIL | skip
    detail: str


def run_checks(config: Path) -> list[Check]:
    """Every check in order; those that need a readable config are skipped without one."""
    try:
        cfg = Config.load(config)
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return [
            Check("config", "FAIL", first),
            _java(),
            _delta_jars(),
            *(Check(n, "skip", "needs the config") for n in ("catalog", "policies", "audit")),
        ]
    return [
        Check("config", "ok", str(cfg.path)),
        _java(),
        _delta_jars(),
        _catalog(cfg),
        _policies(cfg),
        _audit(cfg.audit),
    ]


def _java() -> Check:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).is_file():
        return Check(
            "java",
            "FAIL",
            "no java (set JAVA_HOME or put java on PATH; Spark 3.5 runs on Java 8, 11 or 17, "
            "Spark 4 on Java 17 or 21)",
        )
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("java", "FAIL", f"{java} does not run ({type(e).__name__})")
    lines = (done.stderr or done.stdout).splitlines()
    if done.returncode != 0 or not lines:
        return Check("java", "FAIL", f"{java} -version exited {done.returncode}")
    return Check("java", "ok", f"{lines[0]} ({java})")


def _delta_jars() -> Check:
    from importlib.metadata import version

    from governance.spark import cached_delta_jars
    from governance.spark_line import LINE

    jars = cached_delta_jars()
    if jars is None:
        return Check(
            "delta jars",
            "warn",
            f"delta-spark {version('delta-spark')} jars not in {LINE.ivy_jars}: the "
            "first Spark start downloads them (needs network)",
        )
    return Check(
        "delta jars",
        "ok",
        f"delta-spark {version('delta-spark')}, pyspark {version('pyspark')}, cached",
    )


def _catalog(cfg: Config) -> Check:
    from catalog.catalog import Catalog
    from catalog.store import open_store

    try:
        store = open_store(cfg.catalog)
        try:
            tables = Catalog(store, cfg.warehouse).tables()
        finally:
            store.close()
    except Exception as e:
        return Check("catalog", "FAIL", f"{cfg.catalog}: {type(e).__name__}")
    missing = [
        t.full_name for t in tables if "://" not in t.location and not Path(t.location).exists()
    ]
    if missing:
        return Check(
            "catalog",
            "warn",
            f"{len(tables)} table(s); location missing for {', '.join(missing[:5])}",
        )
    return Check("catalog", "ok", f"{len(tables)} table(s) in {cfg.catalog}")


def _policies(cfg: Config) -> Check:
    from governance.policy.validate import validate_policy_dir

    if not cfg.policies.is_dir():
        return Check("policies", "FAIL", f"{cfg.policies}: no such directory")
    problems = validate_policy_dir(cfg.policies)
    errors = sum(p.severity == "error" for p in problems)
    summary = f"{cfg.policies}: {errors} error(s), {len(problems) - errors} warning(s)"
    if errors:
        return Check("policies", "FAIL", summary + " (run lakegate policy validate)")
    return Check("policies", "warn" if problems else "ok", summary)


def _audit(directory: Path) -> Check:
    """Writable means a file can be made there now (or in the parent that will hold it)."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return Check("audit", "FAIL", f"{probe} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        return Check("audit", "FAIL", f"{probe} is not writable ({e.strerror})")
    where = "" if probe == directory else f" (will be created in {probe})"
    return Check("audit", "ok", f"{directory} writable{where}")
