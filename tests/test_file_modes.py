"""Nothing readable that should not be (issue 27): every file and directory the demo, the
REST server and Spark write is owner-only; a secret Spark setting never reaches a process
command line; Spark's relative scratch lands in the state directory; `doctor` reports
group- or world-readable files and a config holding secrets that others may read.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from cli import main
from governance.files import loose_modes
from governance.runtime.spark_launch import Launch

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_and_the_rest_server_write_nothing_a_group_or_other_users_can_read(
    spark, tmp_path: Path, capsys
) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app
    from governance.config import ApiConfig, ApiToken
    from governance.session.governed import Lakegate

    root = tmp_path / "demo"
    assert main(["demo", "--dir", str(root)]) == 0
    capsys.readouterr()
    token = "file-modes-token-0123456789"
    lg = Lakegate.open(root / "lakegate.yaml", spark=spark, error_log=root / "lakegate-server.log")
    api = ApiConfig(tokens=(ApiToken("erin", hashlib.sha256(token.encode()).hexdigest()),))
    try:
        client = TestClient(create_app(lg, api))
        headers = {"Authorization": f"Bearer {token}"}
        ok = client.post(
            "/api/lakegate/v1/statements",
            json={"statement": "SELECT count(*) AS n FROM main.sales.orders"},
            headers=headers,
        )
        assert ok.status_code == 200, ok.text
        written = client.post(
            "/api/lakegate/v1/statements",
            json={
                "statement": "INSERT INTO main.sales.orders VALUES "
                "(99, 1, 'EMEA', 1.00, DATE'2026-05-01', false)"
            },
            headers=headers,
        )
        assert written.status_code == 200, written.text
    finally:
        lg.close()
    made = {p.name for p in root.iterdir()}
    assert {
        *("warehouse", "audit", "catalog.db", "policies", "lakegate.yaml"),
        *("lakegate-spark.log", "lakegate-server.log"),
    } <= made
    assert loose_modes(root) == []


def test_secret_spark_settings_go_through_an_owner_only_file_not_the_command_line(
    tmp_path: Path,
) -> None:
    settings = {
        "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "azkey",
        "spark.sql.shuffle.partitions": "2",
    }
    launch = Launch(settings, tmp_path / "state", local=True)
    assert launch.public == {
        "spark.local.dir": str(tmp_path / "state" / "spark-local"),
        "spark.sql.shuffle.partitions": "2",
    }
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    here = Path.cwd()
    with launch:
        args = os.environ["PYSPARK_SUBMIT_ARGS"].split()
        assert args[0] == "--properties-file" and args[-1] == (before or "pyspark-shell")
        props = Path(args[1])
        assert props.stat().st_mode & 0o777 == 0o600
        assert props.read_text().splitlines()[-2:] == [
            "spark.hadoop.fs.s3a.secret.key=s3cr3t",
            "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net=azkey",
        ]
        assert Path.cwd() == tmp_path / "state"
    assert not props.exists()
    assert os.environ.get("PYSPARK_SUBMIT_ARGS") == before
    assert Path.cwd() == here


def test_a_real_jvm_gets_the_secret_without_it_on_any_command_line_and_runs_in_the_state_dir(
    tmp_path: Path,
) -> None:
    """A second JVM, in a child process: the one this test run shares is already up."""
    state = tmp_path / "state"
    out = tmp_path / "probe.json"  # not stdout: the child's JVM writes there too
    script = textwrap.dedent(
        f"""
        import json, os, sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from governance.runtime.spark import build_spark
        spark = build_spark(
            "local[1]", {{"spark.hadoop.fs.s3a.secret.key": os.environ["PROBE_SECRET"]}},
            workdir=Path({str(state)!r}),
        )
        spark.sql("CREATE TABLE scratch_probe (id INT) USING parquet")
        spark.sql("INSERT INTO scratch_probe VALUES (1)")
        jvm = spark.sparkContext._jvm
        seen = []
        for pid in os.listdir("/proc"):
            try:
                seen.append(Path(f"/proc/{{pid}}/cmdline").read_bytes())
            except OSError:
                pass
        Path({str(out)!r}).write_text(json.dumps({{
            "conf": spark.sparkContext.getConf().get("spark.hadoop.fs.s3a.secret.key"),
            "hadoop": spark.sparkContext._jsc.hadoopConfiguration().get("fs.s3a.secret.key"),
            "user_dir": jvm.java.lang.System.getProperty("user.dir"),
            "on_a_command_line": any(os.environb[b"PROBE_SECRET"] in c for c in seen),
        }}))
        spark.stop()
        """
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "PROBE_SECRET": "Zq-not-on-argv-81"}  # not on this child's argv
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got == {
        "conf": "Zq-not-on-argv-81",
        "hadoop": "Zq-not-on-argv-81",
        "user_dir": str(state),
        "on_a_command_line": False,
    }
    assert list(cwd.iterdir()) == []  # no spark-warehouse/, artifacts/ or derby.log here
    assert (state / "spark-warehouse" / "scratch_probe").is_dir()
    assert loose_modes(state) == []


def test_doctor_reports_group_readable_files_and_a_readable_config_holding_secrets(
    tmp_path: Path, capsys
) -> None:
    root = tmp_path / "lh"
    root.mkdir(mode=0o700)
    (root / "policies").mkdir()
    (root / "audit").mkdir(mode=0o700)
    config = root / "lakegate.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "x"}},
                "api": {"tokens": [{"user": "alice", "sha256": "a" * 64}]},
            }
        )
    )
    config.chmod(0o644)
    log = root / "lakegate-server.log"
    log.write_text("an error quoting a row\n")
    log.chmod(0o644)
    main(["--config", str(config), "doctor", "-o", "json"])
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["file modes"]["status"] == "FAIL"
    assert f"{config} (644)" in checks["file modes"]["detail"]
    assert f"{log} (644)" in checks["file modes"]["detail"]
    assert checks["secrets"] == {
        "check": "secrets",
        "status": "FAIL",
        "detail": f"{config} (644) holds spark.hadoop.fs.s3a.secret.key, api.tokens (hashes): "
        "make it owner-only (chmod 600)",
    }
    config.chmod(0o600)
    log.chmod(0o600)
    main(["--config", str(config), "doctor", "-o", "json"])
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["file modes"]["status"] == "ok"
    assert checks["secrets"]["status"] == "ok"
