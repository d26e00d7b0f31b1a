"""A package that installs (issues 27 and 42): the sdist builds a wheel; a fresh virtual
environment that borrows nothing from this one gets the wheel as the README installs it.
Without a Spark line's extra, `--version`, `policy validate` and `doctor` run and a command
that needs Spark says in one line which extra to add (no traceback); with `[spark4]`,
`lakegate demo`, `policy validate` and `doctor` run from outside the repository.

The sdist and the wheel are built without build isolation (the dev extras carry setuptools
and wheel); the fresh environment's dependencies come from the package index through pip
(its cache may answer), so a dependency the wheel names but the index cannot give fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from governance.spark_line import NO_SPARK

ROOT = Path(__file__).resolve().parent.parent
# What the sdist is made from (MANIFEST.in and pyproject.toml say what goes in).
SOURCES = (
    "pyproject.toml",
    "README.md",
    "MANIFEST.in",
    "Makefile",
    "cli",
    "governance",
    "api",
    "catalog",
    "audit",
    "policies",
    "docs",
)
RUN_TIME_DATA = (
    "governance/reference/policies/sales.yaml",
    "governance/reference/policies/schema.json",
    "governance/reference/policies/tests/reference.yaml",
    "governance/reference/spec/policy-format.md",
    "governance/reference/spec/audit-format.md",
    "governance/verify/PlanWalker.java",
    "governance/verify/GovernedSql.java",
    "governance/sql/spark_functions.txt",
    "governance/sql/spark_functions_4.txt",
    "api/connect/ConnectBackend.java",
    "api/connect/LineSessions35.java",
    "api/connect/LineSessions4.java",
    "api/connect/protocol35.json",
    "api/console/templates/base.html",
    "api/console/static/console.js",
    "api/console/static/console.css",
    "catalog/migrations/script.py.mako",
    "catalog/migrations/versions/0001_catalog.py",
)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{args[:4]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _build(tmp: Path) -> tuple[Path, Path]:
    """The sdist from a copy of the sources, then the wheel from the sdist (as `python -m
    build` does), so the wheel proves the sdist complete too."""
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp / "dist"
    _run(
        [
            sys.executable,
            "-c",
            f"import setuptools.build_meta as b; b.build_sdist({str(dist)!r})",
        ],
        src,
    )
    (sdist,) = dist.glob("lakegate-*.tar.gz")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(sdist),
        ],
        tmp,
    )
    (wheel,) = dist.glob("lakegate-*.whl")
    return sdist, wheel


def _fresh_venv(tmp: Path) -> Path:
    """A new venv with pip and nothing else: what the wheel needs comes from the package
    index through pip (its cache may answer), never from this environment."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp)
    return venv


def _env(venv: Path) -> dict[str, str]:
    """This process's environment without what would point at the checkout or its venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LAKEGATE_CONFIG", "LAKEGATE_USER")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _lakegate(venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "lakegate"), *args],
        cwd=cwd,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@pytest.mark.timeout(3000)
def test_the_readme_install_line_runs_spark_free_commands_and_the_spark4_extra_runs_the_demo(
    tmp_path: Path,
) -> None:
    sdist, wheel = _build(tmp_path)
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"policies/sales.yaml", "docs/spec/policy-format.md"} <= in_sdist
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = set(whl.namelist())
    missing = [p for p in RUN_TIME_DATA if p not in in_wheel]
    assert not missing, f"the wheel lacks {missing}"

    venv = _fresh_venv(tmp_path)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    # the README's line as written: the Spark-free commands run, the others say what to add
    _run([*pip, str(wheel)], tmp_path, _env(venv))
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import governance; print(governance.__file__)"],
        work,
        _env(venv),
    )
    assert where.startswith(str(venv)), where
    assert _lakegate(venv, ["--version"], work).stdout.strip() == "lakegate 0.1.0"
    (work / "policies").mkdir()
    bare = _lakegate(venv, ["policy", "validate", str(work / "policies")], work)
    assert bare.returncode == 0 and "0 error(s)" in bare.stdout, bare.stderr
    doctor = _lakegate(venv, ["doctor", "-o", "json"], work)
    assert "Traceback" not in doctor.stderr, doctor.stderr
    jars = next(c for c in json.loads(doctor.stdout) if c["check"] == "delta jars")
    assert jars["status"] == "FAIL" and "[spark4]" in jars["detail"], jars
    demo = _lakegate(venv, ["demo", "--dir", "nospark"], work)
    assert demo.returncode == 5 and "Traceback" not in demo.stderr, demo.stderr
    assert demo.stderr.strip().splitlines()[-1] == f"lakegate: {NO_SPARK}"

    # the Spark line from the wheel, as the README writes it
    _run([*pip, f"{wheel}[spark4]"], tmp_path, _env(venv))
    demo = _lakegate(venv, ["demo", "--dir", "demo"], work)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "carol" in demo.stdout and "Orders per region" in demo.stdout
    validated = _lakegate(venv, ["policy", "validate"], work / "demo")
    assert validated.stdout.strip().endswith("policies: 0 error(s), 0 warning(s)"), validated
    doctor = _lakegate(venv, ["doctor", "-o", "json"], work / "demo")
    assert "Traceback" not in doctor.stderr, doctor.stderr
    jars = next(c for c in json.loads(doctor.stdout) if c["check"] == "delta jars")
    assert jars["status"] == "ok", jars
