"""The auditor's named questions (`lakegate audit question ...`) and the new `audit query`
filters and formats, each against answers written by hand for one planted log."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from audit import questions as q
from audit.query import Filters, format_csv, format_jsonl, format_table, query
from cli.audit import audit
from cli.kit import EXIT_OK
from cli.kit import run as run_cli

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
CUSTOMERS, ORDERS = "main.sales.customers", "main.sales.orders"
H, D = timedelta(hours=1), timedelta(days=1)


def iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def ev(qid: str, user: str, cmd: str, src: str, at: datetime, **kw: object) -> AuditEvent:
    values: dict = dict(allowed=True, succeeded=True, policy_version="sha256:aaa",
                        policies=("analysts-read",)) | kw  # fmt: skip
    return AuditEvent(user=user, cmd=cmd, src=src, ts=at, query_id=qid, **values)


def planted(directory: Path) -> Path:
    """The log every test asks: reads with and without masks, denials, writes."""
    no_select = f"no select on {CUSTOMERS}"
    with AuditLog(directory, max_bytes=1500, backup_count=50) as log:
        for batch in (
            [ev("q1", "alice", "select", CUSTOMERS, T0, columns=("id", "email"),
                masked=(("email", "hash"),), caller_context="nb-7")],
            [ev("q2", "bob", "select", CUSTOMERS, T0 + H, columns=("id", "email", "phone"))],
            [ev("q3", "alice", "select", CUSTOMERS, T0 + D, columns=("id", "email"),
                masked=(("email", "hash"),))],
            [ev("q4", "carol", "select", ORDERS, T0 + D, columns=("id", "amount"))],
            [ev("q5", "dave", "select", CUSTOMERS, T0 + 2 * D, allowed=False,
                succeeded=False, reason=no_select)],
            [ev("q6", "dave", "select", CUSTOMERS, T0 + 2 * D + H, allowed=False,
                succeeded=False, reason=no_select)],
            [ev("q7", "eve", "insert", ORDERS, T0 + 2 * D, allowed=False, succeeded=False,
                reason=f"no modify on {ORDERS}")],
            [ev("q8", "alice", "insert", ORDERS, T0 + 3 * D, succeeded=False, phase="intent",
                policy_version="git:abc123", policies=("writers",))],
            [ev("q8", "alice", "insert", ORDERS, T0 + 3 * D + H, phase="outcome",
                policy_version="git:abc123", policies=("writers",))],
            [ev("q9", "bob", "update", ORDERS, T0 + 3 * D, succeeded=False, phase="intent")],
            [ev("q10", "bob", "delete", ORDERS, T0 + 3 * D, succeeded=False, phase="intent")],
            [ev("q10", "bob", "delete", ORDERS, T0 + 3 * D + H, succeeded=False,
                phase="outcome", reason="statement failed: [DELTA_X] (query q10)")],
        ):  # fmt: skip
            log.write(batch)
    return directory


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return planted(tmp_path / "audit")


def test_who_read_column_names_each_reader_with_the_mask_they_got(log_dir: Path) -> None:
    columns, rows = q.who_read_column(log_dir, "customers", "EMAIL")
    assert columns == ["user", "table", "column", "mask", "statements", "first", "last"]
    assert rows == [
        ["alice", CUSTOMERS, "EMAIL", "hash", 2, iso(T0), iso(T0 + D)],
        ["bob", CUSTOMERS, "EMAIL", "clear", 1, iso(T0 + H), iso(T0 + H)],
    ]


def test_who_read_column_in_a_time_range(log_dir: Path) -> None:
    _, rows = q.who_read_column(log_dir, CUSTOMERS, "email", since=T0 + H / 2, until=T0 + 2 * D)
    assert rows == [
        ["alice", CUSTOMERS, "email", "hash", 1, iso(T0 + D), iso(T0 + D)],
        ["bob", CUSTOMERS, "email", "clear", 1, iso(T0 + H), iso(T0 + H)],
    ]
    _, nobody = q.who_read_column(log_dir, CUSTOMERS, "phone", since=T0 + 2 * H)
    assert nobody == []


def test_masked_for_lists_what_a_user_saw_masked(log_dir: Path) -> None:
    assert q.masked_for(log_dir, "alice") == (
        ["user", "table", "column", "mask", "statements", "last"],
        [["alice", CUSTOMERS, "email", "hash", 2, iso(T0 + D)]],
    )
    assert q.masked_for(log_dir, "bob")[1] == []


def test_denials_by_table_and_reason(log_dir: Path) -> None:
    assert q.denials(log_dir) == (
        ["table", "cmd", "reason", "denials", "users", "last"],
        [
            [CUSTOMERS, "select", f"no select on {CUSTOMERS}", 2, "dave", iso(T0 + 2 * D + H)],
            [ORDERS, "insert", f"no modify on {ORDERS}", 1, "eve", iso(T0 + 2 * D)],
        ],
    )
    assert len(q.denials(log_dir, table="orders")[1]) == 1


def test_decided_by_names_the_policy_version_and_git_commit(log_dir: Path) -> None:
    columns, rows = q.decided_by(log_dir, "q8")
    picked = [dict(zip(columns, row, strict=True)) for row in rows]
    assert [(r["phase"], r["policyVersion"], r["gitCommit"], r["policies"]) for r in picked] == [
        ("intent", "git:abc123", "abc123", "writers"),
        ("outcome", "git:abc123", "abc123", "writers"),
    ]
    event_id = picked[0]["eventId"]
    assert [row[0] for row in q.decided_by(log_dir, str(event_id))[1]] == [event_id]
    assert q.decided_by(log_dir, "q1")[1][0][7:9] == ["sha256:aaa", None]


def test_writes_to_a_table_with_intent_and_outcome(log_dir: Path) -> None:
    columns, rows = q.writes(log_dir, "orders")
    picked = [dict(zip(columns, row, strict=True)) for row in rows]
    assert [(r["queryId"], r["user"], r["cmd"], r["intent"], r["outcome"]) for r in picked] == [
        ("q7", "eve", "insert", None, "denied"),
        ("q10", "bob", "delete", iso(T0 + 3 * D), "failed"),
        ("q8", "alice", "insert", iso(T0 + 3 * D), "succeeded"),
        ("q9", "bob", "update", iso(T0 + 3 * D), "pending"),
    ]
    assert picked[1]["reason"] == "statement failed: [DELTA_X] (query q10)"


def test_query_filters_by_column_outcome_policy_version_and_caller_context(
    log_dir: Path,
) -> None:
    def ids(**kw: object) -> list[str | None]:
        return [r.query_id for r in query(log_dir, filters=Filters(**kw)).records]  # type: ignore[arg-type]

    assert ids(column="phone") == ["q2"]
    assert ids(outcome="failed", table="orders") == ["q7", "q8", "q9", "q10", "q10"]
    assert ids(policy_version="git:") == ["q8", "q8"]
    assert ids(caller_context="nb-7") == ["q1"]
    assert ids(users=frozenset({"carol", "eve"})) == ["q4", "q7"]


def test_table_output_keeps_commands_and_protocols_whole_and_shows_columns_and_masks(
    log_dir: Path,
) -> None:
    records = query(log_dir, user="alice", cmd="select").records
    lines = format_table(records).splitlines()
    assert lines[0].split() == ["TIME", "(UTC)", "ALLOWED", "DONE", "USER", "CMD", "SRC", "DST",
                                "PROTO", "COLUMNS", "MASKED", "REASON"]  # fmt: skip
    assert all("id,email" in line and "email:hash" in line for line in lines[1:])
    connect = AuditEvent(allowed=True, user="u", cmd="artifactStatus", proto="connect")
    with AuditLog(log_dir) as log:
        log.write([connect])
    last = format_table(query(log_dir, user="u").records).splitlines()[1]
    assert "artifactStatus" in last and "connect" in last


def test_json_lines_and_csv_carry_every_field(log_dir: Path) -> None:
    records = query(log_dir, user="bob", cmd="select").records
    (line,) = format_jsonl(records).splitlines()
    assert json.loads(line)["columns"] == ["id", "email", "phone"]
    rows = list(csv.DictReader(io.StringIO(format_csv(records))))
    assert [(r["queryId"], r["columns"], r["masked"], r["reason"]) for r in rows] == [
        ("q2", "id,email,phone", "", "")
    ]


def test_cli_question_and_group_filter(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(
        "groups:\n  readers: [alice, group:more]\n  more: [bob]\n"
        "grants:\n"
        "  - {id: r, principals: [group:readers], privileges: [select], on: main.sales.*}\n"
    )
    config = tmp_path / "lakegate.yaml"
    config.write_text(f"audit: {log_dir}\npolicies: policies\n")
    base = ["--config", str(config)]
    argv = [*base, "question", "who-read-column", "--table", "customers", "--column", "email"]
    assert run_cli(audit, [*argv, "-o", "csv"], prog="lakegate audit") == EXIT_OK
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["user", "table", "column", "mask", "statements", "first", "last"]
    assert [row[0] for row in rows[1:]] == ["alice", "bob"]
    argv = [*base, "query", "--group", "readers", "--cmd", "select", "-o", "jsonl"]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_OK
    users = [json.loads(line)["user"] for line in capsys.readouterr().out.splitlines()]
    assert users == ["alice", "bob", "alice"]


def test_outcome_failed_leaves_out_streams_a_client_abandoned(tmp_path: Path, capsys) -> None:
    """`phase=abandoned` lines (succeeded=false: the statement did not run to completion)
    are what `--outcome abandoned` asks for; `--outcome failed` means real failures."""
    with AuditLog(tmp_path) as log:
        gone = "abandoned by the client after 3 rows were sent"
        log.write([
            ev("a1", "erin", "executePlan", ORDERS, T0, succeeded=False, phase="abandoned",
               reason=gone),
            ev("f1", "erin", "executePlan", ORDERS, T0 + H, succeeded=False,
               reason="statement failed: [DIVIDE_BY_ZERO] (query f1)"),
            ev("s1", "erin", "executePlan", ORDERS, T0 + 2 * H),
        ])  # fmt: skip

    def ids(outcome: str) -> list[str | None]:
        return [r.query_id for r in query(tmp_path, filters=Filters(outcome=outcome)).records]

    assert ids("abandoned") == ["a1"]
    assert ids("failed") == ["f1"]
    assert ids("succeeded") == ["s1"]
    argv = ["query", "--dir", str(tmp_path), "--outcome", "abandoned", "-o", "jsonl"]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["queryId"] for line in lines] == ["a1"]
