"""`lakegate doctor`: is this setup ready to run governed SQL? Checks what a first Spark start
or a first statement would otherwise trip over, without starting Spark or changing anything.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from cli.doctor_identity import identity_checks
from cli.doctor_tls import check_certificate, check_tokens
from governance.config import Config
from governance.files import NOT_OWNER, is_secret_setting, modes


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
            *(
                Check(n, "skip", "needs the config")
                for n in (
                    *("catalog", "policies", "tags", "audit", "file modes", "leftovers"),
                    "secrets",
                    *("tokens", "connect tls", "api tls"),
                )
            ),
        ]
    return [
        Check("config", "ok", str(cfg.path)),
        _java(),
        _delta_jars(),
        _catalog(cfg),
        _policies(cfg),
        _tags(cfg),
        _audit(cfg.audit),
        _file_modes(cfg),
        _leftovers(cfg),
        _secrets(cfg),
        Check("tokens", *check_tokens(cfg)),
        Check(
            "connect tls",
            *check_certificate(
                "connect", cfg.connect.tls_cert, cfg.connect.tls_key, cfg.connect.host
            ),
        ),
        Check(
            "api tls", *check_certificate("api", cfg.api.tls_cert, cfg.api.tls_key, cfg.api.host)
        ),
        *(Check(*row) for row in identity_checks(cfg.identity)),
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

    from governance.spark_line import LINE, NO_SPARK, PYSPARK

    if not PYSPARK:
        return Check("delta jars", "FAIL", NO_SPARK)
    from governance.runtime.spark import cached_delta_jars

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
    problems = validate_policy_dir(cfg.policies, None, cfg.identity.provider_groups())
    errors = sum(p.severity == "error" for p in problems)
    summary = f"{cfg.policies}: {errors} error(s), {len(problems) - errors} warning(s)"
    if errors:
        return Check("policies", "FAIL", summary + " (run lakegate policy validate)")
    return Check("policies", "warn" if problems else "ok", summary)


def _tags(cfg: Config) -> Check:
    """Column tags changed on Delta tables outside Lakegate (governance.policy.tag_rights)."""
    from catalog.catalog import Catalog
    from catalog.store import open_store
    from governance.policy.tag_rights import tag_state_problems

    try:
        store = open_store(cfg.catalog)
        try:
            problems = tag_state_problems(Catalog(store, cfg.warehouse).tables())
        finally:
            store.close()
    except Exception as e:
        return Check("tags", "FAIL", f"{cfg.catalog}: {type(e).__name__}")
    if not problems:
        return Check("tags", "ok", "no tag changed outside Lakegate")
    shown = "; ".join(p.message for p in problems[:3])
    more = (
        f" (+{len(problems) - 3} more; run lakegate policy validate)" if len(problems) > 3 else ""
    )
    return Check("tags", "warn", f"{len(problems)} tag change(s) outside Lakegate: {shown}{more}")


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


#: Entries walked per tree before the file-mode check stops (a warehouse can be large).
WALK_LIMIT = 20_000


def _lakegate_paths(cfg: Config) -> list[Path]:
    """What Lakegate writes for this config: its own files, logs and directories."""
    assert cfg.path is not None
    here = cfg.path.parent
    paths = [
        cfg.path,
        here / "lakegate-server.log",
        here / "lakegate-spark.log",
        cfg.warehouse,
        cfg.audit,
    ]
    if "://" not in cfg.catalog and cfg.catalog != ":memory:":
        db = Path(cfg.catalog)
        paths += [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    if cfg.state is not None:
        paths.append(cfg.state)
    paths += [p for p in (cfg.connect.tls_cert, cfg.connect.tls_key) if p is not None]
    ldap = cfg.identity.ldap
    if ldap is not None and ldap.password_file is not None:
        paths.append(ldap.password_file)  # the directory's bind password
    return [p for p in dict.fromkeys(paths) if p.exists()]


def _file_modes(cfg: Config) -> Check:
    """Anything a group or other users may read (raw values, token hashes, error texts)."""
    loose: list[tuple[Path, int]] = []
    walked = 0
    sealed: set[Path] = set()
    for root in _lakegate_paths(cfg):
        for path, mode in modes(root):
            walked += 1
            if _opens_to_others(path, mode, sealed):
                loose.append((path, mode))
            if walked >= WALK_LIMIT:
                break
        if walked >= WALK_LIMIT:
            break
    if loose:
        shown = ", ".join(f"{p} ({m:o})" for p, m in loose[:5])
        more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
        return Check(
            "file modes",
            "FAIL",
            f"group/world-accessible: {shown}{more} (chmod go= them; Lakegate writes 600/700)",
        )
    limited = f" (first {WALK_LIMIT} entries)" if walked >= WALK_LIMIT else ""
    return Check("file modes", "ok", f"all owner-only{limited}")


def _leftovers(cfg: Config) -> Check:
    """Crash leftovers in the warehouse (governance/execute/leftovers.py): named, with the one
    command that removes them; a warning, since nothing reads them."""
    from catalog.catalog import Catalog
    from catalog.store import open_store
    from governance.execute.leftovers import find_leftovers

    try:
        found = find_leftovers(Catalog(open_store(cfg.catalog), cfg.warehouse))
    except Exception as e:
        return Check("leftovers", "skip", f"catalog unavailable ({type(e).__name__})")
    if not found:
        return Check("leftovers", "ok", "none in the warehouse")
    shown = ", ".join(f"{x.path} ({x.kind})" for x in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return Check(
        "leftovers",
        "warn",
        f"crash leftovers: {shown}{more}; 'lakegate catalog leftovers --remove' removes them",
    )


def _opens_to_others(path: Path, mode: int, sealed: set[Path]) -> bool:
    """Whether a group or other users may use `path` (`sealed` collects the directories
    nobody else may enter, parents before children, as `modes` walks).

    Spark marks the jars it copies into its scratch (`state/spark-local/`) a+x, 0711, while
    it runs: execute bits without read on a file inside a sealed directory give nobody
    anything, so a healthy running deployment passes. Read or write bits always count."""
    if path.is_dir():
        if path.parent in sealed or not mode & 0o011:
            sealed.add(path)
        return bool(mode & NOT_OWNER)
    if mode & 0o066:
        return True
    return bool(mode & 0o011) and path.parent not in sealed


def _secrets(cfg: Config) -> Check:
    """A config file naming secrets (api.secret, token hashes, secret Spark settings) must
    be owner-only."""
    assert cfg.path is not None
    held = [k for k in cfg.spark_conf if is_secret_setting(k)]
    raw = yaml.safe_load(cfg.path.read_text()) or {}
    if isinstance(raw.get("api"), dict) and raw["api"].get("secret"):
        held.insert(0, "api.secret")
    if cfg.api.tokens:
        held.append("api.tokens (hashes)")
    if not held:
        return Check("secrets", "ok", f"{cfg.path.name} holds no secret")
    mode = stat.S_IMODE(cfg.path.stat().st_mode)
    if mode & NOT_OWNER:
        return Check(
            "secrets",
            "FAIL",
            f"{cfg.path} ({mode:o}) holds {', '.join(held)}: make it owner-only (chmod 600)",
        )
    return Check("secrets", "ok", f"{cfg.path.name} holds {', '.join(held)}, owner-only")
