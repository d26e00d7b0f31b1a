"""The HTTP witness (`audit_checkpoints.witness_url`) against the reference server
`lakegate audit witness-serve`, run for real on 127.0.0.1 by each test: checkpoints reach
it, `audit verify` reads them back, and a log rolled back or cut at its end is found through
it even when the audit directory's own checkpoints were made to match. An unreachable
witness refuses the write (default) or is recorded, warned about and caught up later."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := Path(__file__).resolve().parents[2]) and str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from audit import AuditEvent, AuditLog, AuditWriteError
from audit.checkpoint import Checkpoint, generate_key, load_private_key, load_public_key
from audit.proofs import verify_tree
from audit.witness_http import PENDING_NAME, endpoint
from cli.audit import audit
from cli.kit import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from cli.kit import run as run_cli
from governance.config import Config
from governance.errors import ConfigError


class Witness:
    """`lakegate audit witness-serve` in a child process of the test (stopped by its pid)."""

    def __init__(self, directory: Path, port: int = 0, public_key: Path | None = None) -> None:
        argv = [sys.executable, "-m", "cli", "audit", "witness-serve", "--dir", str(directory),
                "--port", str(port)]  # fmt: skip
        if public_key is not None:
            argv += ["--public-key", str(public_key)]
        self.process = subprocess.Popen(
            argv, cwd=_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        assert first.startswith("witness listening on http://127.0.0.1:"), first
        self.url = first.split()[3].rstrip("/")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Witness]:
    witness = Witness(tmp_path / "witness-store")
    yield witness
    witness.stop()


def configure(tmp_path: Path, url: str, unreachable: str = "refuse") -> Path:
    config = tmp_path / "lakegate.yaml"
    config.write_text(
        f"policies: {_ROOT / 'policies'}\n"
        "audit: audit\n"
        "audit_max_bytes: 3000\n"
        "audit_checkpoints:\n"
        "  key: keys/audit.pem\n"
        "  every_lines: 5\n"
        "  every_seconds: 3600\n"
        f"  witness_url: {url}\n"
        f"  witness_unreachable: {unreachable}\n"
        "  witness_timeout: 5\n"
    )
    if not (tmp_path / "keys" / "audit.pem").exists():
        generate_key(tmp_path / "keys" / "audit.pem")
    return config


def write(config: Path, statements: int, start: int = 0) -> None:
    cfg = Config.load(config)
    with AuditLog(
        cfg.audit, max_bytes=cfg.audit_max_bytes, checkpoints=cfg.audit_checkpoints
    ) as log:
        for i in range(start, start + statements):
            log.write([AuditEvent(allowed=True, user="alice", cmd="select", src=f"main.s.t{i}")])


def verify(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = run_cli(audit, ["--config", str(config), "verify", "-o", "json"], prog="lakegate audit")
    return code, json.loads(capsys.readouterr().out)["tree"]


def held(url: str, origin: str) -> list[str]:
    with urllib.request.urlopen(endpoint(url, origin), timeout=10) as response:
        return response.read().decode("ascii").splitlines()


def post(url: str, origin: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(endpoint(url, origin), data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def origin_of(config: Path) -> str:
    return f"lakegate-audit:{Config.load(config).audit.resolve()}"


def test_every_checkpoint_reaches_the_http_witness_and_verify_reads_it_back(
    tmp_path: Path, served: Witness, capsys: pytest.CaptureFixture[str]
) -> None:
    config = configure(tmp_path, served.url)
    write(config, 23)
    local = (Config.load(config).audit / "audit.checkpoints").read_text().splitlines()
    assert len(local) >= 5
    assert held(served.url, origin_of(config)) == local
    code, tree = verify(config, capsys)
    assert code == EXIT_OK
    assert tree["ok"] and tree["breaks"] == [] and tree["size"] == 23
    assert tree["witness"] == endpoint(served.url, origin_of(config))


def test_rolling_the_whole_log_back_is_found_through_the_http_witness(
    tmp_path: Path, served: Witness, capsys: pytest.CaptureFixture[str]
) -> None:
    config = configure(tmp_path, served.url)
    directory = Config.load(config).audit
    write(config, 12)
    shutil.copytree(directory, tmp_path / "old-copy")
    write(config, 14, start=12)
    shutil.rmtree(directory)
    shutil.copytree(tmp_path / "old-copy", directory)  # consistent in itself: chains and tree

    public = load_public_key(tmp_path / "keys" / "audit.pem.pub")
    assert verify_tree(directory, public, origin_of(config)).ok  # without the witness: unseen
    code, tree = verify(config, capsys)
    assert code == EXIT_FAILED
    first = tree["breaks"][0]
    assert first["kind"] == "truncated"
    assert first["file"].startswith(endpoint(served.url, origin_of(config)))
    assert (
        "leaves but the log has 12: its newest lines were cut or the log was rolled back"
        in (first["detail"])
    )

    report = tmp_path / "report.html"
    argv = ["--config", str(config), "report", "--html", str(report)]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_FAILED
    assert "leaves but the log has 12" in report.read_text(encoding="utf-8")

    with pytest.raises(AuditWriteError, match=r"refused the checkpoint: 409 roll-back"):
        write(config, 5, start=100)  # the rolled-back writer cannot sign past the witness


def test_cutting_the_tail_is_found_through_the_http_witness(
    tmp_path: Path, served: Witness, capsys: pytest.CaptureFixture[str]
) -> None:
    config = configure(tmp_path, served.url)
    directory = Config.load(config).audit
    write(config, 20)
    log = directory / "audit.log"
    lines = log.read_text().splitlines(True)
    log.write_text("".join(lines[:-3]))  # the newest three lines cut
    kept = 20 - 3
    checkpoints = directory / "audit.checkpoints"
    local = [
        c for c in checkpoints.read_text().splitlines() if Checkpoint.from_json(c).size <= kept
    ]
    checkpoints.write_text("".join(c + "\n" for c in local))  # the cutter hides its tracks here
    (directory / "audit.merkle").unlink()

    public = load_public_key(tmp_path / "keys" / "audit.pem.pub")
    assert verify_tree(directory, public, origin_of(config)).ok  # without the witness: unseen
    code, tree = verify(config, capsys)
    assert code == EXIT_FAILED
    assert [b["kind"] for b in tree["breaks"]] == ["truncated"]
    assert "covers 20 leaves but the log has 17" in tree["breaks"][0]["detail"]
    assert tree["breaks"][0]["file"].startswith(endpoint(served.url, origin_of(config)))


def test_unreachable_witness_refuses_the_write_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = configure(tmp_path, f"http://127.0.0.1:{free_port()}")
    with pytest.raises(AuditWriteError, match=r"WitnessUnreachable: HTTP witness .* unreachable"):
        write(config, 1)
    code, tree = verify(config, capsys)
    assert code == EXIT_FAILED
    assert tree["breaks"][0]["kind"] == "unreachable"


def test_unreachable_witness_with_record_warns_keeps_the_checkpoint_and_delivers_it_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    config = configure(tmp_path, f"http://127.0.0.1:{port}", unreachable="record")
    directory = Config.load(config).audit
    with caplog.at_level(logging.WARNING, logger="lakegate.errors"):
        write(config, 7)  # the writes go on
    assert "recorded, not witnessed" in caplog.text
    waiting = (directory / PENDING_NAME).read_text().splitlines()
    assert waiting == (directory / "audit.checkpoints").read_text().splitlines()
    code, tree = verify(config, capsys)
    assert code == EXIT_FAILED and tree["breaks"][0]["kind"] == "unreachable"
    assert tree["undelivered"] == len(waiting)
    report = tmp_path / "report.html"
    argv = ["--config", str(config), "report", "--html", str(report)]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_FAILED
    page = report.read_text(encoding="utf-8")
    assert f"Warning: {len(waiting)} checkpoint(s) not yet delivered to the HTTP witness" in page

    witness = Witness(tmp_path / "witness-store", port=port)
    try:
        write(config, 4, start=7)  # the next checkpoint delivers the backlog first
        assert not (directory / PENDING_NAME).exists()
        assert held(witness.url, origin_of(config)) == (
            (directory / "audit.checkpoints").read_text().splitlines()
        )
        code, tree = verify(config, capsys)
        assert code == EXIT_OK and tree["undelivered"] == 0
    finally:
        witness.stop()


def test_witness_server_takes_only_signed_checkpoints_of_the_log_and_never_goes_back(
    tmp_path: Path,
) -> None:
    key = tmp_path / "keys" / "audit.pem"
    public = generate_key(key)
    other = generate_key(tmp_path / "keys" / "other.pem")
    witness = Witness(tmp_path / "witness-store", public_key=public)
    origin, root = "lakegate-audit:/var/audit", "ab" * 32
    try:

        def signed(size: int, by: Path = key, name: str = origin) -> bytes:
            cp = Checkpoint(origin=name, size=size, root=root, time="2026-11-26T00:00:00.000Z")
            return cp.signed(load_private_key(by)).to_json().encode() + b"\n"

        assert post(witness.url, origin, signed(10)) == (201, "stored")
        assert post(witness.url, origin, signed(10)) == (200, "already held")
        assert post(witness.url, origin, b"{not json\n") == (400, "not a checkpoint line")
        assert post(witness.url, origin, signed(11, name="lakegate-audit:/x")) == (
            400, "not a checkpoint of this log",
        )  # fmt: skip
        status, why = post(witness.url, origin, signed(12, by=tmp_path / "keys" / "other.pem"))
        assert (status, why.split(":")[0]) == (403, "checkpoint refused")
        assert post(witness.url, origin, signed(20)) == (201, "stored")
        assert post(witness.url, origin, signed(15)) == (409, "roll-back: this log had 20 lines")
        assert [Checkpoint.from_json(c).size for c in held(witness.url, origin)] == [10, 20]
        assert other.is_file()
    finally:
        witness.stop()


def test_a_redirecting_witness_is_a_refusal_not_a_delivery(tmp_path: Path) -> None:
    """urllib would follow a POST's 302 as a GET and take its 200 for "stored"."""

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = configure(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(AuditWriteError, match=r"refused the checkpoint: 302"):
            write(config, 1)
    finally:
        server.shutdown()
        server.server_close()


def test_verify_witness_option_takes_an_http_witness_url(
    tmp_path: Path, served: Witness, capsys: pytest.CaptureFixture[str]
) -> None:
    config = configure(tmp_path, served.url)
    write(config, 8)
    plain = tmp_path / "plain.yaml"  # the same log and key, no witness configured
    plain.write_text(
        f"audit: {Config.load(config).audit}\n"
        "audit_checkpoints:\n"
        f"  key: {tmp_path / 'keys' / 'audit.pem'}\n"
    )
    capsys.readouterr()
    argv = ["--config", str(plain), "verify", "--witness", served.url, "-o", "json"]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_OK
    tree = json.loads(capsys.readouterr().out)["tree"]
    assert tree["witness"] == endpoint(served.url, origin_of(config))
    argv = ["--config", str(plain), "verify", "--witness", "http://127.0.0.1:1/?x=1"]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_USAGE
    assert "witness URL must not carry a query" in capsys.readouterr().err


def test_config_refuses_a_witness_url_that_is_not_http(tmp_path: Path) -> None:
    config = configure(tmp_path, "ftp://witness.example.org/")
    with pytest.raises(ConfigError, match=r"must be an http:// or https:// URL"):
        Config.load(config)
    config.write_text(config.read_text().replace("ftp://", "http://").replace("refuse", "maybe"))
    with pytest.raises(ConfigError, match=r"must be refuse or record"):
        Config.load(config)
