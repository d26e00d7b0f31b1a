"""``audit query`` filters and output, and the ``audit verify|query`` CLI wiring."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from audit.query import format_json, format_table, parse_time, query
from cli.audit import audit
from cli.kit import run as run_cli

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """alice reads orders and customers; bob is denied on customers; a policy reload; rotated."""
    with AuditLog(tmp_path, max_bytes=2000, backup_count=50) as log:
        for day in range(4):
            ts = T0 + timedelta(days=day)
            log.write(
                [
                    AuditEvent(allowed=True, user="alice", cmd="select", src=table, ts=ts,
                               succeeded=True, query_id=f"qa{day}", columns=("id", "email"),
                               masked=(("email", "hash"),), policies=("analysts-read",))
                    for table in ("main.sales.orders", "main.sales.customers")
                ]
            )  # fmt: skip
            log.write(
                [
                    AuditEvent(allowed=False, user="bob", cmd="select",
                               src="main.sales.customers", ts=ts + timedelta(hours=1),
                               reason="no select on main.sales.customers\tfor bob")
                ]
            )  # fmt: skip
        log.write(
            [
                AuditEvent(allowed=True, user="alice", cmd="insert", src="main.sales.orders",
                           dst="main.sales.orders_copy", ts=T0 + timedelta(days=5)),
                AuditEvent(allowed=True, user="lakegate", cmd="policyReload", proto="cli",
                           ts=T0 + timedelta(days=5, hours=1), reason=None),
            ]
        )  # fmt: skip
    assert len(list(tmp_path.glob("audit.log.*"))) >= 2
    return tmp_path


def test_no_filter_reads_every_file_oldest_first(log_dir: Path) -> None:
    result = query(log_dir)
    assert result.skipped == 0 and len(result.records) == 14
    times = [r.ts for r in result.records]
    assert times == sorted(times)
    assert {r.file for r in result.records} >= {"audit.log", "audit.log.1"}


def test_filters(log_dir: Path) -> None:
    assert {r.user for r in query(log_dir, user="bob").records} == {"bob"}
    denied = query(log_dir, denied=True).records
    assert len(denied) == 4 and all(not r.allowed for r in denied)
    assert denied[0].reason == "no select on main.sales.customers\tfor bob"
    customers = query(log_dir, table="main.sales.customers").records
    assert len(customers) == 8 and all(r.src == "main.sales.customers" for r in customers)
    assert len(query(log_dir, table="ORDERS_copy").records) == 1  # dst, suffix, any case
    assert [r.cmd for r in query(log_dir, cmd="policyreload").records] == ["policyReload"]
    window = query(log_dir, since=T0 + timedelta(days=1), until=T0 + timedelta(days=2)).records
    assert {r.ts.date() for r in window} == {(T0 + timedelta(days=1)).date()}
    assert len(window) == 3
    combined = query(log_dir, user="alice", table="orders", since=T0 + timedelta(days=3))
    assert [r.cmd for r in combined.records] == ["select", "insert"]


def test_limit_keeps_the_newest(log_dir: Path) -> None:
    records = query(log_dir, limit=2).records
    assert [r.cmd for r in records] == ["insert", "policyReload"]


def test_records_are_unescaped_and_typed(log_dir: Path) -> None:
    record = query(log_dir, user="alice", limit=20).records[0]
    assert record.columns == ("id", "email")
    assert record.masked == (("email", "hash"),)
    assert record.policies == ("analysts-read",)
    assert record.succeeded and record.allowed and record.ip == "/127.0.0.1"
    assert record.ugi == "alice (auth:SIMPLE)" and record.seq == 1 and record.prev_hash is None


def test_json_and_table_output(log_dir: Path) -> None:
    records = query(log_dir, denied=True).records
    data = json.loads(format_json(records))
    assert data[0]["user"] == "bob" and data[0]["allowed"] is False
    assert data[0]["reason"] == "no select on main.sales.customers\tfor bob"
    assert data[0]["ts"] == "2026-11-20T09:00:00.000Z"
    table = format_table(records).splitlines()
    assert table[0].split()[:3] == ["TIME", "(UTC)", "ALLOWED"]
    assert len(table) == 5 and all("NO" in row and "bob" in row for row in table[1:])


def test_parse_time() -> None:
    assert parse_time("2026-11-20") == T0 - timedelta(hours=8)
    assert parse_time("2026-11-20T09:00:00+01:00") == T0
    assert parse_time("2026-11-20T08:00:00Z") == T0
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_time("last tuesday")


def run(audit_dir: Path, *argv: str) -> int:
    """The ``lakegate audit`` group with ``--audit-dir``."""
    return run_cli(audit, ["--audit-dir", str(audit_dir), *argv], prog="lakegate audit")


def test_cli_verify_exit_codes(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(log_dir, "verify") == 0  # DIR from --audit-dir
    assert "OK: every chain verifies" in capsys.readouterr().out
    lines = (log_dir / "audit.log").read_text().splitlines()
    lines[0] = lines[0].replace("cmd=insert", "cmd=select")
    (log_dir / "audit.log").write_text("\n".join(lines) + "\n")
    assert run(log_dir, "verify", str(log_dir)) == 1
    out = capsys.readouterr().out
    assert "BROKEN: edited line at audit.log:1" in out
    assert run(log_dir, "verify", "--format", "json", str(log_dir)) == 1
    assert json.loads(capsys.readouterr().out)["breaks"][0]["kind"] == "edited"
    assert run(log_dir, "verify", str(log_dir / "missing")) == 2


def test_cli_query(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(
        Path("/nonexistent"), "query", "--dir", str(log_dir), "--user", "bob", "--denied",
        "--since", "2026-11-21", "--until", "2026-11-23", "--format", "json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["ts"][:10] for d in data] == ["2026-11-21", "2026-11-22"]
    assert run(Path("/nonexistent"), "query", "--dir", str(log_dir), "--table", "orders",
               "--cmd", "insert") == 0  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "main.sales.orders_copy" in out[1]
    assert run(Path("/nonexistent"), "query", "--dir", str(log_dir), "--since", "soon") == 2
    assert run(log_dir, "query", "--limit", "0") == 2


def test_lakegate_audit_verify_entry_point(log_dir: Path) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lakegate")), "audit", "verify", str(log_dir)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout
