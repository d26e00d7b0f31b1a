"""Every kind of tampering, planted in a log with a Merkle tree, signed checkpoints and a
witness, is found offline: by the tree check, from the lines, the checkpoints and the witness.

Each test names the tampering; the baseline test shows the same log untouched verifies."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog, AuditWriteError
from audit.checkpoint import (
    CHECKPOINTS_NAME,
    Checkpoint,
    CheckpointSettings,
    default_origin,
    generate_key,
    load_private_key,
    load_public_key,
    witness_file,
)
from audit.format import HASH_SEPARATOR, chain_hash, parse_complete
from audit.proofs import TreeReport, verify_tree
from audit.verify import verify


class Log:
    """An audit directory written with checkpoints every 10 lines, rotated, witnessed."""

    def __init__(self, root: Path, name: str = "audit", key: Path | None = None) -> None:
        self.dir = root / name
        self.key = key or root / "keys" / "signing.pem"
        if not self.key.exists():
            generate_key(self.key)
        self.public = load_public_key(self.key.with_name(self.key.name + ".pub"))
        self.witness = root / "witness"
        self.settings = CheckpointSettings(key=self.key, every_lines=10, witness=self.witness)
        self.event_ids: list[str] = []

    def write(self, statements: int, start: int = 0) -> None:
        with AuditLog(self.dir, max_bytes=3000, backup_count=4, checkpoints=self.settings) as log:
            for i in range(start, start + statements):
                events = [
                    AuditEvent(allowed=True, user=f"user{i % 3}", cmd="select",
                               src=f"main.sales.t{j}", query_id=f"q{i}")
                    for j in range(1 + i % 2)
                ]  # fmt: skip
                self.event_ids += [e.event_id for e in events if e.event_id]
                log.write(events)

    def tree(self) -> TreeReport:
        return verify_tree(self.dir, self.public, witness=self.witness)

    @property
    def current(self) -> Path:
        return self.dir / "audit.log"

    def lines(self, path: Path | None = None) -> list[str]:
        return (path or self.current).read_text("ascii").splitlines()

    def put(self, lines: list[str], path: Path | None = None) -> None:
        (path or self.current).write_text("".join(line + "\n" for line in lines), "ascii")


@pytest.fixture
def log(tmp_path: Path) -> Log:
    written = Log(tmp_path)
    written.write(60)
    assert len(list(written.dir.glob("audit.log.*"))) >= 3
    return written


def first_break(report: TreeReport) -> tuple[str, str, str]:
    assert not report.ok
    finding = report.breaks[0]
    return finding.kind, finding.file, finding.detail


def rehash(lines: list[str], start: int) -> list[str]:
    """Re-chain every line from ``start`` on (one writer), as a forger recomputes sha256."""
    prev = parse_complete(lines[start - 1])[1].hash if start > 0 else None  # type: ignore[index]
    out = lines[:start]
    for line in lines[start:]:
        unhashed = line[: line.index(HASH_SEPARATOR)]
        if prev is not None:
            head, _, _ = unhashed.rpartition("\tprevHash=")
            unhashed = f"{head}\tprevHash={prev}"
        prev = chain_hash(prev, unhashed)
        out.append(f"{unhashed}{HASH_SEPARATOR}{prev}")
    return out


def test_untampered_log_verifies_against_every_checkpoint_and_the_witness(log: Log) -> None:
    report = log.tree()
    assert report.ok, report.summary()
    assert report.checked > 0 and report.rotated_away > 0
    assert report.size == 60 + 30  # one line, then two, per statement
    assert verify(log.dir).ok


def test_edited_line_is_found(log: Log) -> None:
    lines = log.lines()
    lines[2] = lines[2].replace("user", "mallory", 1)
    log.put(lines)
    kind, where, detail = first_break(log.tree())
    assert (kind, where) == ("rewritten", "audit.log")
    assert "do not match the checkpoint" in detail


def test_edited_line_with_the_chain_rehashed_is_found_by_the_tree_alone(log: Log) -> None:
    lines = log.lines()
    lines[2] = lines[2].replace("cmd=select", "cmd=describe", 1)
    log.put(rehash(lines, 2))
    assert verify(log.dir).ok  # the unkeyed chain cannot see this
    kind, where, _ = first_break(log.tree())
    assert (kind, where) == ("rewritten", "audit.log")


def test_deleted_line_is_found(log: Log) -> None:
    path = log.dir / "audit.log.1"
    lines = log.lines(path)
    del lines[-1]
    log.put(rehash(lines, len(lines)), path)
    kind, where, detail = first_break(log.tree())
    assert (kind, where) == ("deleted", "audit.log")
    assert detail.endswith("1 line(s) before it were removed")


def test_deleted_newest_line_is_found(log: Log) -> None:
    log.put(log.lines()[:-1])
    kind, where, detail = first_break(log.tree())
    assert kind == "truncated" and where.startswith(CHECKPOINTS_NAME)
    assert "newest lines were cut" in detail


def test_inserted_line_is_found(log: Log) -> None:
    path = log.dir / "audit.log.1"
    lines = log.lines(path)
    log.put([*lines, lines[-1].replace("user", "ghost", 1)], path)
    kind, where, detail = first_break(log.tree())
    assert (kind, where) == ("inserted", "audit.log")
    assert detail.endswith("1 line(s) before it were added")


def test_reordered_lines_are_found(log: Log) -> None:
    lines = log.lines()
    lines[1], lines[2] = lines[2], lines[1]
    log.put(lines)
    kind, where, _ = first_break(log.tree())
    assert (kind, where) == ("rewritten", "audit.log")


def test_truncated_tail_is_found(log: Log) -> None:
    lines = log.lines()
    log.put(lines[:-6])  # the last checkpoint covers them
    kind, where, detail = first_break(log.tree())
    assert kind == "truncated" and where.startswith(CHECKPOINTS_NAME)
    assert "newest lines were cut or the log was rolled back" in detail


def test_truncated_tail_with_its_checkpoints_cut_too_is_found_by_the_witness(log: Log) -> None:
    size = log.tree().size
    lines = log.lines()
    log.put(lines[:-6])
    cut = size - 6
    path = log.dir / CHECKPOINTS_NAME
    kept = [c for c in path.read_text().splitlines() if json.loads(c)["size"] <= cut]
    path.write_text("".join(c + "\n" for c in kept))
    kind, where, _ = first_break(log.tree())
    assert kind == "truncated" and where.startswith(str(log.witness))


def test_replaced_rotated_file_is_found(log: Log, tmp_path: Path) -> None:
    """A rotated file swapped for another log's file of the same name."""
    other = Log(tmp_path, "other")
    other.write(60)
    shutil.copyfile(other.dir / "audit.log.2", log.dir / "audit.log.2")
    kind, where, detail = first_break(log.tree())
    assert (kind, where) == ("replaced", "audit.log.2")
    assert "no signed checkpoint began this file" in detail


def test_rotated_file_rewritten_in_place_is_found(log: Log) -> None:
    path = log.dir / "audit.log.2"
    lines = log.lines(path)
    lines[-1] = lines[-1].replace("user", "nobody", 1)
    log.put(rehash(lines, len(lines) - 1), path)
    kind, where, _ = first_break(log.tree())
    assert kind == "rewritten"
    assert where in ("audit.log.2", "audit.log.1")


def test_restored_old_copy_of_the_whole_log_is_found_by_the_witness(
    log: Log, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    shutil.copytree(log.dir, backup)
    log.write(30, start=60)  # more access, more checkpoints at the witness
    shutil.rmtree(log.dir)
    shutil.copytree(backup, log.dir)  # the whole directory rolled back, self-consistent
    assert verify(log.dir).ok
    report = log.tree()
    kind, where, detail = first_break(report)
    assert kind == "truncated" and where.startswith(str(log.witness))
    assert f"the log has {report.size}" in detail


def test_forged_checkpoint_is_found(log: Log) -> None:
    path = log.dir / CHECKPOINTS_NAME
    lines = path.read_text().splitlines()
    data = json.loads(lines[-1])
    data["size"] -= 1  # claim a shorter log, keep the signature
    lines[-1] = json.dumps(data)
    path.write_text("".join(line + "\n" for line in lines))
    kind, where, detail = first_break(log.tree())
    assert (kind, where) == ("forged", CHECKPOINTS_NAME)
    assert detail == "checkpoint refused: bad signature"


def test_checkpoint_signed_with_another_key_is_found(log: Log, tmp_path: Path) -> None:
    """A forger who rewrites the log and signs new checkpoints with a key of their own."""
    own = tmp_path / "mallory" / "key.pem"
    generate_key(own)
    lines = log.lines()
    lines[1] = lines[1].replace("user", "mallory", 1)
    log.put(rehash(lines, 1))
    genuine = Checkpoint.from_json((log.dir / CHECKPOINTS_NAME).read_text().splitlines()[-1])
    forged = replace(genuine, root="00" * 32).signed(load_private_key(own))
    with open(log.dir / CHECKPOINTS_NAME, "a") as handle:
        handle.write(forged.to_json() + "\n")
    breaks = log.tree().breaks
    assert any(
        b.kind == "forged" and "signed by key" in b.detail and forged.key in b.detail
        for b in breaks
    )
    assert any(b.kind == "rewritten" for b in breaks)


def test_checkpoint_of_another_log_with_the_same_key_is_found(log: Log, tmp_path: Path) -> None:
    """One key reused for two logs: the other log's checkpoints do not count for this one."""
    other = Log(tmp_path, "other", key=log.key)
    other.write(5)
    theirs = (other.dir / CHECKPOINTS_NAME).read_text().splitlines()[-1]
    with open(log.dir / CHECKPOINTS_NAME, "a") as handle:
        handle.write(theirs + "\n")
    kind, _, detail = first_break(log.tree())
    assert kind == "forged"
    assert "checkpoint of another log" in detail


def test_deleted_witness_file_is_found(log: Log) -> None:
    witness_file(log.witness, default_origin(log.dir)).unlink()
    kind, _, detail = first_break(log.tree())
    assert kind == "deleted" and detail == "the witness holds no checkpoint of this log"


def test_lost_tree_state_is_rebuilt_from_the_start_checkpoint_of_the_current_file(
    log: Log,
) -> None:
    (log.dir / "audit.merkle").unlink()
    log.write(20, start=60)
    assert log.tree().ok, log.tree().summary()


def test_lines_of_a_writer_without_checkpoints_are_caught_up_by_the_next(log: Log) -> None:
    with AuditLog(log.dir, max_bytes=1 << 20, backup_count=50) as plain:
        plain.write([AuditEvent(allowed=False, user="eve", cmd="select", src="main.x.y")])
    log.write(15, start=60)
    report = log.tree()
    assert report.ok, report.summary()
    assert report.size == 90 + 1 + 15 + 7


def test_signing_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    written = Log(tmp_path)
    os.chmod(written.key, 0o644)
    with pytest.raises(AuditWriteError, match="must be a file readable by its owner only"):
        written.write(1)


def test_signing_key_inside_the_audit_directory_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "audit" / "signing.pem"
    generate_key(inside)
    written = Log(tmp_path, key=inside)
    with pytest.raises(AuditWriteError, match="signing key must be outside the audit directory"):
        written.write(1)


def test_every_retained_line_has_a_proof_even_after_rotation_deleted_older_lines(
    log: Log,
) -> None:
    from audit.handler import log_files
    from audit.proofs import prove, verify_proof

    retained = {
        line.split("\teventId=", 1)[1].split("\t", 1)[0]
        for path in log_files(log.dir)
        for line in log.lines(path)
    }
    assert retained and retained < set(log.event_ids)  # older lines were rotated away
    for event_id in retained:
        proof = prove(log.dir, event_id)
        assert verify_proof(proof, log.public).startswith(f"OK: event {event_id} is line ")


def _write_in_child(root: str, start: int) -> None:
    Log(Path(root)).write(80, start=start)


def test_writer_processes_interleaving_and_rotating_keep_one_tree(tmp_path: Path) -> None:
    import multiprocessing

    written = Log(tmp_path)  # makes the key before the children start
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_write_in_child, args=(str(tmp_path), n * 1000)) for n in range(3)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join()
    assert [child.exitcode for child in children] == [0, 0, 0]
    report = written.tree()
    assert report.ok, report.summary()
    assert report.unsigned_tail == 0  # each writer signed what it left at close
    assert verify(written.dir).ok


def test_a_log_written_before_checkpoints_were_configured_is_taken_over(tmp_path: Path) -> None:
    written = Log(tmp_path)
    with AuditLog(written.dir, max_bytes=3000, backup_count=4) as plain:
        for i in range(40):
            plain.write([AuditEvent(allowed=True, user="old", cmd="select", src=f"a.b.t{i}")])
    written.write(10, start=40)
    report = written.tree()
    assert report.ok, report.summary()
    retained = [line for path in written.dir.glob("audit.log*") for line in written.lines(path)]
    assert report.size - report.first_leaf == len(retained)
    assert report.checked > 0


def test_a_replaced_rotated_file_is_not_vouched_for_by_a_rebuild(log: Log, tmp_path: Path) -> None:
    other = Log(tmp_path, "other")
    other.write(60)
    shutil.copyfile(other.dir / "audit.log.2", log.dir / "audit.log.2")
    planted_first = other.lines(other.dir / "audit.log.2")[0]
    (log.dir / "audit.merkle").unlink()  # the tree state lost too: the next write rebuilds
    log.write(3, start=60)
    kind, where, _ = first_break(log.tree())
    assert kind == "replaced"  # (rotation may have renumbered the planted file since)
    assert log.lines(log.dir / where)[0] == planted_first


def test_lines_left_unsigned_are_signed_by_the_timer_without_another_write(
    tmp_path: Path,
) -> None:
    import time

    written = Log(tmp_path)
    settings = replace(written.settings, every_lines=1000, every_seconds=1.0)
    with AuditLog(written.dir, checkpoints=settings) as log:
        log.write([AuditEvent(allowed=True, user="u", cmd="select", src="a.b.c")])
        path = written.dir / CHECKPOINTS_NAME
        deadline = time.monotonic() + 60  # a wait, not a measurement: the host may be slow
        while time.monotonic() < deadline:
            sizes = [json.loads(line)["size"] for line in path.read_text().splitlines()]
            if sizes[-1] == 1:
                break
            time.sleep(0.05)
        assert sizes == [0, 1]  # the start of the file, then the timer's (no write since)


def test_a_witness_that_cannot_take_the_checkpoint_refuses_the_access(tmp_path: Path) -> None:
    written = Log(tmp_path)
    written.witness.parent.mkdir(parents=True, exist_ok=True)
    written.witness.write_text("a file where the witness directory should be")
    with pytest.raises(AuditWriteError, match="audit log write failed"):
        written.write(1)


def test_a_rollback_is_found_by_a_git_witness_even_with_its_work_tree_rolled_back(
    tmp_path: Path,
) -> None:
    import subprocess

    written = Log(tmp_path)
    written.witness.mkdir()
    subprocess.run(["git", "init", "-q", str(written.witness)], check=True)
    written.write(30)
    backup = tmp_path / "backup"
    shutil.copytree(written.dir, backup)
    published = witness_file(written.witness, default_origin(written.dir))
    old_witness = published.read_text()
    written.write(30, start=30)
    commits = subprocess.run(
        ["git", "-C", str(written.witness), "rev-list", "--count", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert int(commits) == len(published.read_text().splitlines())  # one commit each
    shutil.rmtree(written.dir)
    shutil.copytree(backup, written.dir)
    published.write_text(old_witness)  # the work tree rolled back too; HEAD is not
    kind, where, detail = first_break(written.tree())
    assert kind == "truncated" and "(git HEAD):" in where
    assert "newest lines were cut or the log was rolled back" in detail
