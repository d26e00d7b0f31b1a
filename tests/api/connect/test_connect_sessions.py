"""Identity and sessions: the token decides the user; users never reach each other's
sessions; every request is on record; a client with nothing of Lakegate imported works."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid

from connect_testkit import audit_lines, rows, token_of

ORDERS = "SELECT id, region FROM main.sales.orders"


def test_declared_user_id_is_replaced_by_the_token_user(remote, embedded) -> None:
    s = remote("carol", extra=";user_id=erin")
    assert [tuple(r) for r in s.sql("SELECT current_user()").collect()] == [("carol",)]
    assert rows(s.sql(ORDERS)) == embedded("carol", ORDERS)


def test_two_users_in_parallel_never_share_a_session(remote, embedded) -> None:
    """Same session id, two users: each gets their own backend session (settings do not
    cross), and each sees only their own rows while the other runs."""
    sid = str(uuid.uuid4())
    carol = remote("carol", extra=f";session_id={sid}")
    erin = remote("erin", extra=f";session_id={sid}")
    carol.conf.set("spark.sql.repl.eagerEval.maxNumRows", "7")
    assert erin.conf.get("spark.sql.repl.eagerEval.maxNumRows") != "7"
    assert carol.conf.get("spark.sql.repl.eagerEval.maxNumRows") == "7"
    results: dict[str, list] = {}

    def run(name: str, s: object) -> None:
        results[name] = [rows(s.sql(ORDERS)) for _ in range(3)]  # type: ignore[attr-defined]

    threads = [
        threading.Thread(target=run, args=("carol", carol)),
        threading.Thread(target=run, args=("erin", erin)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results["carol"] == [embedded("carol", ORDERS)] * 3
    assert results["erin"] == [embedded("erin", ORDERS)] * 3
    assert results["carol"][0] != results["erin"][0]


def test_every_request_has_an_audit_line(remote, audit_dir) -> None:
    before = len(audit_lines(audit_dir))
    s = remote("dana")
    s.sql(ORDERS).collect()
    new = audit_lines(audit_dir)[before:]
    calls = [ln for ln in new if ln.get("proto") == "connect"]
    assert {ln["cmd"] for ln in calls} >= {"executePlan"}
    assert all(ln["ugi"].startswith("dana ") for ln in calls)
    # the governed statement's own per-table line, same proto
    assert any(ln["cmd"] == "select" and ln["src"] == "main.sales.orders" for ln in calls)
    requests = [ln for ln in calls if ln["cmd"] == "executePlan"]
    assert all(ln["callerContext"].startswith("connect:") for ln in requests)


def test_stock_client_in_its_own_process_gets_the_governed_answer(
    gateway, embedded, connect_lakegate
) -> None:
    """A notebook-style script: only pyspark.sql.connect and a token."""
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.remote(
            "sc://127.0.0.1:{gateway.port}/;token={token_of("carol")}").getOrCreate()
        df = spark.sql("{ORDERS}")
        print(sorted(tuple(r) for r in df.collect()))
        print(spark.table("main.sales.customers").select("phone").collect()[0][0])
        import sys
        assert not any(m.split(".")[0] in ("governance", "api", "catalog", "audit")
                       for m in sys.modules), "Lakegate imported"
        spark.stop()
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(connect_lakegate.ca)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.splitlines()
    assert out[0] == repr(sorted(embedded("carol", ORDERS)))
    phone = embedded("carol", "SELECT phone FROM main.sales.customers")
    assert out[1] in {str(p[0]) for p in phone}


def test_connect_command_refuses_to_serve_without_tls(lakehouse, capsys) -> None:
    """PySpark sends tokens only over TLS: no certificate and key, no endpoint (exit 2)."""
    from cli import main

    assert main(["--config", str(lakehouse.config.path), "connect", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lakegate: connect.tls_cert and connect.tls_key are required")
    assert "\n" not in err
