"""Tamper evidence: each kind of tampering is reported as such, at the right file:line."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from audit.format import HASH_SEPARATOR, chain_hash, parse_complete
from audit.handler import log_files
from audit.verify import VerifyReport, verify

T0 = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


def build(directory: Path, lines: int = 40, max_bytes: int = 2500, backups: int = 100) -> None:
    """Two interleaved writers (explicit ids), rotated into ~10 files, nothing deleted."""
    a = AuditLog(directory, max_bytes=max_bytes, backup_count=backups, writer_id="writer-a")
    b = AuditLog(directory, max_bytes=max_bytes, backup_count=backups, writer_id="writer-b")
    for i in range(lines):
        log = a if i % 2 == 0 else b
        log.write(
            [
                AuditEvent(
                    allowed=i % 5 != 0,
                    user=f"user{i % 3}",
                    cmd="select",
                    src=f"main.s.t{i}",
                    ts=T0 + timedelta(seconds=i),
                )
            ]
        )
    a.close()
    b.close()


Files = dict[str, list[str]]


def load(directory: Path) -> Files:
    return {p.name: p.read_bytes().decode("ascii").split("\n")[:-1] for p in log_files(directory)}


def save(directory: Path, files: Files, *, final_newline: bool = True) -> None:
    names = list(files)
    for name, lines in files.items():
        newline = final_newline or name != names[-1]
        text = "\n".join(lines) + ("\n" if lines and newline else "")
        (directory / name).write_bytes(text.encode("ascii"))


def locate(files: Files, writer: str, seq: int) -> tuple[str, int]:
    """(file, 0-based index) of a writer's line."""
    needle = f"\twriter={writer}\tseq={seq}\t"
    for name, lines in files.items():
        for index, line in enumerate(lines):
            if needle in line:
                return name, index
    raise AssertionError(f"{writer} seq {seq} not found")


def first_break(directory: Path) -> tuple[str, str]:
    report = verify(directory)
    assert not report.ok, report.summary()
    finding = report.first_break
    assert finding is not None
    return finding.kind, finding.where


def rehash(line: str, prev_hash: str | None) -> str:
    unhashed = line[: line.rindex(HASH_SEPARATOR)]
    return f"{unhashed}{HASH_SEPARATOR}{chain_hash(prev_hash, unhashed)}"


def hash_of(line: str) -> str:
    return line.rsplit("=", 1)[1]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    build(tmp_path)
    return tmp_path


def test_clean_log_verifies(log_dir: Path) -> None:
    report = verify(log_dir)
    assert report.ok, report.summary()
    assert len(report.files) >= 8 and report.lines == 40
    assert not report.truncated and not report.anchors
    assert {w: (s.first_seq, s.last_seq) for w, s in report.writers.items()} == {
        "writer-a": (1, 20),
        "writer-b": (1, 20),
    }
    assert "OK: every chain verifies" in report.summary()


def test_edit_without_rehash(log_dir: Path) -> None:
    files = load(log_dir)
    name, index = locate(files, "writer-a", 5)
    files[name][index] = files[name][index].replace("src=main.s.t8", "src=main.s.t9")
    save(log_dir, files)
    assert first_break(log_dir) == ("edited", f"{name}:{index + 1}")


def test_edit_with_rehash_is_caught_by_the_next_line(log_dir: Path) -> None:
    files = load(log_dir)
    prev_name, prev_index = locate(files, "writer-a", 4)
    name, index = locate(files, "writer-a", 5)
    edited = files[name][index].replace("src=main.s.t8", "src=main.s.other")
    files[name][index] = rehash(edited, hash_of(files[prev_name][prev_index]))
    assert parse_complete(files[name][index])[1].hash_ok  # type: ignore[index]
    save(log_dir, files)
    assert first_break(log_dir) == ("edited", f"{name}:{index + 1}")


def test_deleted_line(log_dir: Path) -> None:
    files = load(log_dir)
    name, index = locate(files, "writer-b", 7)
    del files[name][index]
    next_name, next_index = locate(files, "writer-b", 8)
    save(log_dir, files)
    report = verify(log_dir)
    assert (report.breaks[0].kind, report.breaks[0].where) == (
        "deleted",
        f"{next_name}:{next_index + 1}",
    )
    assert "seq 7..7" in report.breaks[0].detail


def test_deleted_first_line_of_a_rotated_file(log_dir: Path) -> None:
    files = load(log_dir)
    name = list(files)[3]
    victim = files[name].pop(0)
    link = parse_complete(victim)[1]  # type: ignore[index]
    next_name, next_index = locate(files, link.writer, link.seq + 1)
    save(log_dir, files)
    assert first_break(log_dir) == ("deleted", f"{next_name}:{next_index + 1}")


def test_inserted_duplicate(log_dir: Path) -> None:
    files = load(log_dir)
    src_name, src_index = locate(files, "writer-b", 3)
    name, index = locate(files, "writer-b", 7)
    files[name].insert(index + 1, files[src_name][src_index])
    save(log_dir, files)
    assert first_break(log_dir) == ("inserted", f"{name}:{index + 2}")


@pytest.mark.parametrize("before_real", [True, False])
def test_inserted_forged_line_with_valid_links(log_dir: Path, before_real: bool) -> None:
    """A forger who knows the algorithm chains a fake seq 6 to seq 5; the real 7 exposes it."""
    files = load(log_dir)
    parent_name, parent_index = locate(files, "writer-a", 5)
    name, index = locate(files, "writer-a", 6)
    forged = files[name][index].replace("src=main.s.t10", "src=main.s.innocent")
    forged = rehash(forged, hash_of(files[parent_name][parent_index]))
    at = index if before_real else index + 1
    files[name].insert(at, forged)
    save(log_dir, files)
    assert first_break(log_dir) == ("inserted", f"{name}:{at + 1}")


def test_reordered_lines_of_one_writer(log_dir: Path) -> None:
    files = load(log_dir)
    name5, i5 = locate(files, "writer-a", 5)
    name6, i6 = locate(files, "writer-a", 6)
    files[name5][i5], files[name6][i6] = files[name6][i6], files[name5][i5]
    save(log_dir, files)
    assert first_break(log_dir) == ("reordered", f"{name5}:{i5 + 1}")


def test_line_moved_to_a_later_file(log_dir: Path) -> None:
    files = load(log_dir)
    name, index = locate(files, "writer-b", 3)
    moved = files[name].pop(index)
    files["audit.log"].append(moved)
    next_name, next_index = locate(files, "writer-b", 4)
    save(log_dir, files)
    assert first_break(log_dir) == ("reordered", f"{next_name}:{next_index + 1}")


def test_swapping_lines_of_different_writers_is_not_tampering(log_dir: Path) -> None:
    files = load(log_dir)
    name = list(files)[2]
    files[name][0], files[name][1] = files[name][1], files[name][0]
    save(log_dir, files)
    assert verify(log_dir).ok


def test_truncated_last_line_is_a_crash_not_tampering(log_dir: Path) -> None:
    files = load(log_dir)
    last = files["audit.log"][-1]
    files["audit.log"][-1] = last[: len(last) // 2]
    save(log_dir, files, final_newline=False)
    report = verify(log_dir)
    assert report.ok, report.summary()
    where = f"audit.log:{len(files['audit.log'])}"
    assert [t.where for t in report.truncated] == [where]
    assert f"truncated line at {where}" in report.summary()

    # The next writer seals the torn line and appends cleanly after it.
    with AuditLog(log_dir) as log:
        log.write([AuditEvent(allowed=True, user="later", cmd="show")])
    report = verify(log_dir)
    assert report.ok, report.summary()
    assert [t.where for t in report.truncated] == [where]
    assert load(log_dir)["audit.log"][-1].endswith(
        parse_complete(load(log_dir)["audit.log"][-1])[1].hash  # type: ignore[index]
    )


def test_truncated_line_inside_a_living_chain_is_a_break(log_dir: Path) -> None:
    files = load(log_dir)
    name, index = locate(files, "writer-a", 9)
    files[name][index] = files[name][index][:150]
    save(log_dir, files)
    assert first_break(log_dir) == ("truncated", f"{name}:{index + 1}")


def test_truncated_line_whose_writer_and_seq_survive(log_dir: Path) -> None:
    files = load(log_dir)
    name, index = locate(files, "writer-a", 9)
    files[name][index] = files[name][index][:-30]  # cut inside the hash
    save(log_dir, files)
    assert first_break(log_dir) == ("truncated", f"{name}:{index + 1}")


def test_rotated_file_ending_mid_line_is_a_break(log_dir: Path) -> None:
    files = load(log_dir)
    name = list(files)[4]
    data = (log_dir / name).read_bytes()
    (log_dir / name).write_bytes(data[:-40])
    assert first_break(log_dir) == ("truncated", f"{name}:{len(files[name])}")


def test_missing_rotated_file(log_dir: Path) -> None:
    (log_dir / "audit.log.4").unlink()
    report = verify(log_dir)
    assert not report.ok
    assert any(f.kind == "deleted" and f.file == "audit.log.4" for f in report.breaks)
    assert any(f.kind == "deleted" and f.file == "audit.log.3" for f in report.breaks)


def test_oldest_files_removed_by_rotation_become_anchors(tmp_path: Path) -> None:
    build(tmp_path, backups=5)
    report = verify(tmp_path)
    assert report.ok, report.summary()
    assert report.files[0] == "audit.log.5" and report.lines < 40
    oldest = report.files[0]
    assert {a.writer for a in report.anchors} == {"writer-a", "writer-b"}
    assert all(a.file == oldest for a in report.anchors)
    assert "continue from lines that rotation deleted" in report.summary()


def test_oldest_files_removed_by_hand_are_reported(log_dir: Path) -> None:
    """Only rotation may delete files; removing (or archiving away) old files is visible."""
    for path in log_files(log_dir)[:3]:
        path.unlink()
    report = verify(log_dir)
    assert {(b.kind, b.file, b.line) for b in report.breaks} == {
        ("deleted", report.files[0], 1),
        ("deleted", report.files[0], 2),
    }
    assert "rotation did not delete it" in report.breaks[0].detail


def test_chain_start_deleted_outside_the_oldest_rotated_file(tmp_path: Path) -> None:
    build(tmp_path, lines=12, max_bytes=0)  # one file, nothing ever rotated away
    files = load(tmp_path)
    name, index = locate(files, "writer-a", 1)
    del files[name][index]
    save(tmp_path, files)
    next_name, next_index = locate(files, "writer-a", 2)
    assert first_break(tmp_path) == ("deleted", f"{next_name}:{next_index + 1}")


def test_garbage_and_blank_lines(log_dir: Path) -> None:
    files = load(log_dir)
    name = list(files)[1]
    files[name].insert(1, "hello auditor")
    save(log_dir, files)
    assert first_break(log_dir) == ("edited", f"{name}:2")
    files[name][1] = ""
    save(log_dir, files)
    assert first_break(log_dir) == ("inserted", f"{name}:2")


def test_report_json_shape(log_dir: Path) -> None:
    files = load(log_dir)
    name, index = locate(files, "writer-a", 3)
    files[name][index] = files[name][index].replace("select", "delete")
    save(log_dir, files)
    report: VerifyReport = verify(log_dir)
    data = report.to_dict()
    assert data["ok"] is False
    assert data["breaks"][0] == {  # type: ignore[index]
        "kind": "edited",
        "file": name,
        "line": index + 1,
        "writer": "writer-a",
        "seq": 3,
        "detail": "content does not match its hash",
    }


def test_explicit_writer_restarting_after_a_crash_continues_cleanly(tmp_path: Path) -> None:
    with AuditLog(tmp_path, writer_id="svc") as log:
        for i in range(4):
            log.write([AuditEvent(allowed=True, user=f"u{i}", cmd="select", src="main.s.t")])
    data = (tmp_path / "audit.log").read_bytes()
    (tmp_path / "audit.log").write_bytes(data[:-20])  # seq 4 torn inside its hash
    with AuditLog(tmp_path, writer_id="svc") as log:  # restarts from seq 3, the last intact
        log.write([AuditEvent(allowed=True, user="again", cmd="select", src="main.s.t")])
    report = verify(tmp_path)
    assert report.ok, report.summary()
    assert [(t.where, t.writer, t.seq) for t in report.truncated] == [("audit.log:4", "svc", 4)]
    assert report.writers["svc"].last_seq == 4


def idle_writer_log(directory: Path) -> str:
    """An idle writer whose previous line was rotated away, then writes again mid-log."""
    idle = AuditLog(directory, max_bytes=1500, backup_count=3)
    busy = AuditLog(directory, max_bytes=1500, backup_count=3)
    idle.write([AuditEvent(allowed=True, user="idle", cmd="select", src="main.s.a")])
    for i in range(30):  # fills and deletes the file holding the idle writer's line
        busy.write([AuditEvent(allowed=True, user="busy", cmd="select", src=f"main.s.{i}")])
        if i == 25:
            idle.write([AuditEvent(allowed=True, user="idle", cmd="select", src="main.s.b")])
    writer = idle.writer_id
    idle.close()
    busy.close()
    return writer


def test_idle_writer_whose_previous_line_was_rotated_away(tmp_path: Path) -> None:
    writer = idle_writer_log(tmp_path)
    report = verify(tmp_path)
    assert report.ok, report.summary()
    anchored = {a.writer: a for a in report.anchors}
    assert anchored[writer].file != report.files[0], "anchored outside the oldest file"
    assert "rotation deleted" in anchored[writer].detail
    index = (tmp_path / "audit.crossings").read_text().splitlines()
    notes = [line for line in index if line.startswith("C\t")]
    assert len(notes) <= 2 * len(report.files), "notes about deleted lines are pruned"
    assert sum(line.startswith("D\t") for line in index) >= 5, "deletions are remembered"


def test_deleting_the_line_before_a_file_crossing(tmp_path: Path) -> None:
    """The crossing note names the file the previous line was in; it is retained, so the
    missing lines were deleted, not rotated away."""
    build(tmp_path, lines=24, max_bytes=2500)
    files = load(tmp_path)

    def crossing_after_intact_file(seq: int) -> bool:
        prev_name = locate(files, "writer-b", seq - 1)[0]
        return locate(files, "writer-b", seq)[0] != prev_name and (
            "writer=writer-b" not in files[prev_name][0]  # its identity survives our deletions
        )

    seq = next(s for s in range(2, 12) if crossing_after_intact_file(s))
    name, index = locate(files, "writer-b", seq)
    prev_name = locate(files, "writer-b", seq - 1)[0]
    for earlier in range(1, seq):
        other, at = locate(files, "writer-b", earlier)
        del files[other][at]
    save(tmp_path, files)
    report = verify(tmp_path)
    assert (report.breaks[0].kind, report.breaks[0].where) == ("deleted", f"{name}:{index + 1}")
    assert f"was in {prev_name}, which is retained" in report.breaks[0].detail


def test_without_the_crossings_index_only_the_oldest_file_anchors(tmp_path: Path) -> None:
    writer = idle_writer_log(tmp_path)
    (tmp_path / "audit.crossings").unlink()
    report = verify(tmp_path)
    assert [b.writer for b in report.breaks] == [writer]  # the weaker rule cannot prove it
    assert any("audit.crossings" in w for w in report.warnings)
