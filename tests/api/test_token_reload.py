"""A token saved with `lakegate token create --save` takes effect at once (issue 42, item 9):
a server's token checker re-reads lakegate.yaml's `api.tokens` when the file changes, as
policy files are re-read; a token taken out is refused as soon; a file that no longer loads
changes nothing (the last good tokens stay, the rejection is logged: fail closed). Real
running servers: tests/governance/test_crash_recovery.py (REST) and
tests/cli/test_server_startup.py (the Connect gateway).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from api import auth
from api.auth import TokenAuth, Unauthenticated, token_hash
from cli import main
from governance.config import Config


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(auth, "RELOAD_SECONDS", 0.0)  # every check looks at the file
    path = tmp_path / "lakegate.yaml"
    path.write_text(yaml.safe_dump({"api": {"tokens": [{"user": "dana", "sha256": "a" * 64}]}}))
    path.chmod(0o600)
    return path


def _saved(config: Path, capsys, user: str) -> str:
    capsys.readouterr()
    assert main(["--config", str(config), "token", "create", "-u", user, "--save"]) == 0
    return capsys.readouterr().out.splitlines()[0]


def test_a_saved_token_is_accepted_without_a_restart_and_a_removed_one_refused(
    config: Path, capsys
) -> None:
    checker = TokenAuth(Config.load(config).api, source=config)
    token = _saved(config, capsys, "alice")
    assert checker.authenticate(f"Bearer {token}").user == "alice"
    raw = yaml.safe_load(config.read_text())
    raw["api"]["tokens"] = [t for t in raw["api"]["tokens"] if t["sha256"] != token_hash(token)]
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(Unauthenticated):
        checker.authenticate(f"Bearer {token}")


@pytest.mark.parametrize(
    "broken",
    [
        "api: {tokens: [",  # not YAML
        "api: {tokens: [{user: mallory}]}\n",  # a token without its hash
        "api: {tokenz: []}\n",  # an unknown key
    ],
)
def test_a_file_that_no_longer_loads_keeps_the_last_good_tokens_and_says_so(
    config: Path, capsys, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    checker = TokenAuth(Config.load(config).api, source=config)
    token = _saved(config, capsys, "alice")
    assert checker.authenticate(f"Bearer {token}").user == "alice"
    config.write_text(broken)
    with caplog.at_level(logging.ERROR, logger="lakegate.errors"):
        assert checker.authenticate(f"Bearer {token}").user == "alice"
        checker.authenticate(f"Bearer {token}")  # the same broken file: said once
    said = [r.getMessage() for r in caplog.records if r.name == "lakegate.errors"]
    assert len(said) == 1 and said[0].startswith(
        "token reload rejected, the last good tokens stay in force: "
    ), said
    config.unlink()  # a file gone is no open door either
    assert checker.authenticate(f"Bearer {token}").user == "alice"
    with pytest.raises(Unauthenticated):
        checker.authenticate("Bearer " + "x" * 43)


def test_a_checker_without_a_source_keeps_the_tokens_it_was_built_with(
    config: Path, capsys
) -> None:
    """Embedded and test servers pass their own `ApiConfig`: no file is theirs to follow."""
    checker = TokenAuth(Config.load(config).api)
    token = _saved(config, capsys, "alice")
    with pytest.raises(Unauthenticated):
        checker.authenticate(f"Bearer {token}")
