"""`lakegate audit keygen|checkpoint|prove|verify-proof` and the tree part of `audit verify`,
configured through lakegate.yaml's `audit_checkpoints`."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog
from cli.audit import audit
from cli.kit import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from cli.kit import run as run_cli
from governance.config import Config


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Config]:
    config = tmp_path / "lakegate.yaml"
    config.write_text(
        "audit: audit\n"
        "audit_max_bytes: 4000\n"
        "audit_checkpoints:\n"
        "  key: keys/audit.pem\n"
        "  every_lines: 25\n"
        "  every_seconds: 3600\n"
        "  witness: witness\n"
    )
    return config, Config.load(config)


def cli(config: Path, *argv: str) -> int:
    return run_cli(audit, ["--config", str(config), *argv], prog="lakegate audit")


def write(cfg: Config, statements: int) -> list[str]:
    ids: list[str] = []
    with AuditLog(
        cfg.audit, max_bytes=cfg.audit_max_bytes, checkpoints=cfg.audit_checkpoints
    ) as log:
        for i in range(statements):
            event = AuditEvent(allowed=True, user="alice", cmd="select", src=f"main.s.t{i % 4}")
            ids.append(event.event_id or "")
            log.write([event])
    return ids


def test_config_reads_audit_checkpoints_relative_to_the_file(setup: tuple[Path, Config]) -> None:
    config, cfg = setup
    settings = cfg.audit_checkpoints
    assert settings is not None
    assert settings.key == config.parent / "keys" / "audit.pem"
    assert settings.public_key_path == config.parent / "keys" / "audit.pem.pub"
    assert settings.witness == config.parent / "witness"
    assert (settings.every_lines, settings.every_seconds) == (25, 3600)


def test_keygen_writes_an_owner_only_key_and_never_overwrites_it(
    setup: tuple[Path, Config], capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    assert cfg.audit_checkpoints is not None
    assert os.stat(cfg.audit_checkpoints.key).st_mode & 0o777 == 0o600
    assert cfg.audit_checkpoints.public_key_path.is_file()
    assert cli(config, "keygen") == EXIT_USAGE
    assert "exists; not overwriting it" in capsys.readouterr().err


def test_proof_written_by_prove_verifies_offline_and_a_changed_one_does_not(
    setup: tuple[Path, Config], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    ids = write(cfg, 120)
    proof_file = tmp_path / "proof.json"
    assert cli(config, "prove", ids[37], "--out", str(proof_file)) == EXIT_OK
    assert cfg.audit_checkpoints is not None
    public = str(cfg.audit_checkpoints.public_key_path)
    capsys.readouterr()
    assert cli(config, "verify-proof", str(proof_file), "--public-key", public) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"OK: event {ids[37]} is line 38 of 120 in lakegate-audit:")

    proof = json.loads(proof_file.read_text())
    changed = dict(proof, line=proof["line"].replace("alice", "bob"))
    proof_file.write_text(json.dumps(changed))
    assert cli(config, "verify-proof", str(proof_file)) == EXIT_FAILED
    assert "INVALID: the path does not lead to the checkpoint's root" in capsys.readouterr().err

    moved = dict(proof, leafIndex=proof["leafIndex"] + 1)
    proof_file.write_text(json.dumps(moved))
    assert cli(config, "verify-proof", str(proof_file)) == EXIT_FAILED
    assert "INVALID: " in capsys.readouterr().err

    other_origin = ["--origin", "lakegate-audit:/elsewhere"]
    proof_file.write_text(json.dumps(proof))
    assert cli(config, "verify-proof", str(proof_file), *other_origin) == EXIT_FAILED
    assert "INVALID: checkpoint of another log" in capsys.readouterr().err


def test_prove_refuses_a_line_no_checkpoint_covers_yet(
    setup: tuple[Path, Config], capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    write(cfg, 3)
    assert cfg.audit_checkpoints is not None
    with AuditLog(cfg.audit, checkpoints=cfg.audit_checkpoints) as log:
        late = AuditEvent(allowed=True, user="bob", cmd="select", src="main.s.t0")
        log.write([late])
        capsys.readouterr()
        assert cli(config, "prove", late.event_id or "") == EXIT_FAILED
        assert "no checkpoint covers line 4 yet" in capsys.readouterr().err
        assert cli(config, "checkpoint") == EXIT_OK
        assert cli(config, "prove", late.event_id or "") == EXIT_OK
    assert cli(config, "prove", "no-such-event") == EXIT_FAILED
    assert "no retained audit line has eventId no-such-event" in capsys.readouterr().err


def test_verify_checks_the_tree_and_fails_on_a_cut_tail(
    setup: tuple[Path, Config], capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    write(cfg, 60)
    capsys.readouterr()
    assert cli(config, "verify") == EXIT_OK
    out = capsys.readouterr().out
    assert "OK: every chain verifies" in out
    assert "OK: the lines match every signed checkpoint" in out
    current = cfg.audit / "audit.log"
    current.write_text("".join(current.read_text().splitlines(keepends=True)[:-2]))
    assert cli(config, "verify", "-o", "json") == EXIT_FAILED
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True  # the chains alone cannot see a cut tail
    assert report["tree"]["ok"] is False
    assert report["tree"]["breaks"][0]["kind"] == "truncated"


def _line_file(directory: Path, event_id: str) -> Path:
    """The audit file holding the line of `event_id`."""
    for path in sorted(directory.glob("audit.log*")):
        if f"\teventId={event_id}\t" in path.read_text():
            return path
    raise AssertionError(f"no line has {event_id}")


def _change_line(directory: Path, event_id: str) -> None:
    """Change the line of `event_id` in place (same length, eventId kept)."""
    path = _line_file(directory, event_id)
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if f"\teventId={event_id}\t" in line:
            lines[i] = line.replace("ugi=alice", "ugi=mally", 1)
            assert lines[i] != line
    path.write_text("".join(lines))


def test_prove_takes_the_origin_of_a_copied_log(
    setup: tuple[Path, Config], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    ids = write(cfg, 60)
    copy = tmp_path / "copy-of-audit"
    shutil.copytree(cfg.audit, copy)
    origin = f"lakegate-audit:{cfg.audit.resolve()}"
    capsys.readouterr()
    assert cli(config, "prove", ids[10], "--dir", str(copy)) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "no checkpoint of origin lakegate-audit:" in err
    assert f"its checkpoints are of {origin} (a copy of the log: give --origin)" in err
    proof_file = tmp_path / "proof.json"
    argv = ["prove", ids[10], "--dir", str(copy), "--origin", origin, "--out", str(proof_file)]
    assert cli(config, *argv) == EXIT_OK
    assert cli(config, "verify-proof", str(proof_file), "--origin", origin) == EXIT_OK
    assert capsys.readouterr().out.startswith(f"OK: event {ids[10]} is line 11 of ")


def test_prove_refuses_a_line_the_signed_tree_does_not_hold(
    setup: tuple[Path, Config], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    ids = write(cfg, 120)
    _change_line(cfg.audit, ids[37])
    proof_file = tmp_path / "proof.json"
    capsys.readouterr()
    assert cli(config, "prove", ids[37], "--out", str(proof_file)) == EXIT_FAILED
    err = capsys.readouterr().err
    assert f"line 38 (event {ids[37]}) is not what the checkpoint signed" in err
    assert "the log changed after it was signed" in err
    assert not proof_file.exists()
    # a changed neighbour is on the proven line's path: refused as well
    assert cli(config, "prove", ids[36]) == EXIT_FAILED
    assert f"line 37 (event {ids[36]}) is not what" in capsys.readouterr().err


def test_verify_of_a_broken_tree_says_how_far_it_checked(
    setup: tuple[Path, Config], capsys: pytest.CaptureFixture[str]
) -> None:
    config, cfg = setup
    assert cli(config, "keygen") == EXIT_OK
    ids = write(cfg, 120)
    _change_line(cfg.audit, ids[80])
    capsys.readouterr()
    assert cli(config, "verify") == EXIT_FAILED
    out = capsys.readouterr().out
    assert "tree: 0 leaves" not in out
    found = re.search(r"tree: stopped at the first break, after (\d+) leaves", out)
    assert found is not None, out
    checked = int(found.group(1))
    assert 81 <= checked < 120  # up to the first checkpoint after the changed line 81
    assert "the lines after it were not checked" in out
    assert f"the first {checked} leaves do not match the checkpoint" in out
    assert cli(config, "verify", "-o", "json") == EXIT_FAILED
    tree = json.loads(capsys.readouterr().out)["tree"]
    assert (tree["stopped"], tree["size"]) == (True, checked)
