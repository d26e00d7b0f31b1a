"""A package that installs (issue 27): the sdist builds a wheel, and a fresh virtual
environment holding that wheel as its only Lakegate code runs `lakegate --version`,
`lakegate demo` and `lakegate policy validate` from outside the repository.

Kept fast and offline: the sdist and the wheel are built without build isolation (the dev
extras carry setuptools and wheel), and the fresh environment gets its third-party
dependencies by linking this environment's installed distributions (never Lakegate's own)
into a site directory of it. pip still resolves the wheel's declared dependencies against
them, so a dependency the wheel names but nothing provides fails the install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

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
    "governance/PlanWalker.java",
    "governance/GovernedSql.java",
    "governance/spark_functions.txt",
    "governance/spark_functions_4.txt",
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
    """A new venv whose only Lakegate is what pip installs into it; the third-party
    packages come from a site directory of links to this environment's."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    deps = tmp / "deps"
    deps.mkdir()
    ours = sysconfig.get_paths()["purelib"]
    for entry in Path(ours).iterdir():
        name = entry.name.lower()
        if name.startswith(("lakegate", "__editable__")) or "lakegate" in name:
            continue  # the editable install of this checkout must not be visible
        (deps / entry.name).symlink_to(entry)
    site = Path(
        _run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            tmp,
        ).strip()
    )
    (site / "_lakegate_test_deps.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    return venv


def test_a_fresh_venv_with_only_the_wheel_runs_version_demo_and_validate(
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
    py = str(venv / "bin" / "python")
    # A real install: pip resolves the wheel's dependencies (found installed, offline).
    _run(
        [sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-index", str(wheel)],
        tmp_path,
    )

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LAKEGATE_CONFIG", "LAKEGATE_USER")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run([py, "-c", "import governance; print(governance.__file__)"], work, env)
    assert where.startswith(str(venv)), where
    lakegate = str(venv / "bin" / "lakegate")

    assert _run([lakegate, "--version"], work, env).strip() == "lakegate 0.1.0"
    demo = _run([lakegate, "demo", "--dir", "demo"], work, env)
    assert "carol" in demo and "Orders per region" in demo
    validated = _run([lakegate, "policy", "validate"], work / "demo", env)
    assert validated.strip().endswith("policies: 0 error(s), 0 warning(s)"), validated
