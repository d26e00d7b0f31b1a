"""The policyVersion/phase extension keys (audit/README.md, extends docs/spec/audit-format.md):
v1 lines and extended lines live in one chain; verify, query and --pending read both."""

from __future__ import annotations

import sys
from pathlib import Path

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from audit.query import query
from audit.verify import verify


def event(phase: str | None, qid: str, version: str | None = "sha256:ab") -> AuditEvent:
    return AuditEvent(
        allowed=True,
        user="u",
        cmd="insert",
        src="a.s.t",
        query_id=qid,
        policy_version=version,
        phase=phase,
    )


def test_v1_and_extended_lines_verify_as_one_chain(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([event(None, "q0", None)])  # exactly a v1 line
        log.write([event("intent", "q1")])
        log.write([event("outcome", "q1")])
    text = (tmp_path / "audit.log").read_text().splitlines()
    assert (
        "policyVersion=" not in text[0]
        and "\tpolicyVersion=sha256:ab\tphase=intent\twriter=" in text[1]
    )
    assert verify(tmp_path).ok
    records = query(tmp_path).records
    assert [(r.policy_version, r.phase) for r in records] == [
        (None, None),
        ("sha256:ab", "intent"),
        ("sha256:ab", "outcome"),
    ]


def test_a_cut_extended_line_is_a_crash_remnant_not_an_edit(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([event("intent", "q1")])
    path = tmp_path / "audit.log"
    line = path.read_text()
    path.write_text(line[: line.index("\tphase=") + 4])
    report = verify(tmp_path)
    assert report.ok and report.truncated


def test_pending_lists_intents_without_an_outcome(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([event("intent", "q1")])
        log.write([event("outcome", "q1")])
        log.write([event("intent", "q2")])
        log.write([event(None, "q3")])
    assert [r.query_id for r in query(tmp_path, pending=True).records] == ["q2"]
