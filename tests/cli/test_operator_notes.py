"""What an operator is told (issue 42, items 6 and 9): the README's curl reads the bearer
token from a file (on a command line every local user reads it in `ps`), and a token saved
with `token create --save` is said, by the command and by the README, to reach running
servers within a second (tests/api/test_token_reload.py shows it on real servers).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from cli import main

ROOT = Path(__file__).resolve().parents[2]
# A token pasted into a command's arguments: `Bearer $(...)`, `Bearer $VAR` or a literal.
TOKEN_ON_ARGV = re.compile(r"Bearer \$|Bearer [A-Za-z0-9_-]{20,}")


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def test_no_documented_command_puts_a_bearer_token_on_a_command_line() -> None:
    for doc in (ROOT / "README.md", ROOT / "api" / "README.md", *(ROOT / "docs").glob("*.md")):
        for block in _sh_blocks(doc.read_text()):
            for line in block.splitlines():
                if TOKEN_ON_ARGV.search(line):
                    # only a shell builtin may see it (no process, nothing in ps)
                    assert line.lstrip("( ").startswith(("printf ", "umask 077; printf ")), (
                        f"{doc.name}: {line}"
                    )


def test_the_readme_curl_sends_the_token_from_an_owner_only_header_file(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if "alice.header)" in ln)
    (tmp_path / "alice.token").write_text("s3cret-token-value\n")
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)
    header = tmp_path / "alice.header"
    assert header.read_text() == "Authorization: Bearer s3cret-token-value\n"
    assert header.stat().st_mode & 0o077 == 0
    assert any("-H @alice.header" in ln for ln in readme.splitlines() if ln.startswith("curl"))


def test_token_create_save_says_running_servers_accept_it_at_once(tmp_path: Path, capsys) -> None:
    config = tmp_path / "lakegate.yaml"
    config.write_text(yaml.safe_dump({"api": {"port": 8080}}))
    assert main(["--config", str(config), "token", "create", "-u", "alice", "--save"]) == 0
    err = capsys.readouterr().err
    assert "servers accept it within a second" in err
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "by running `serve` and `connect` servers within a second, no restart" in readme
