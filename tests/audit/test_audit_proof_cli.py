"""`lakegate audit keygen|checkpoint|prove|verify-proof` and the tree part of `audit verify`,
configured through lakegate.yaml's `audit_checkpoints`."""

from __future__ import annotations

import json
import os
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
