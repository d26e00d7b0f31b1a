"""An unexpected error (a bug, a JVM that did not start) leaves its class on the caller's
stderr and nothing more, since its text may quote rows; where the command routed a server
log (`lakegate-server.log`: serve, connect, the commands that start Spark), the whole error,
traceback and text, goes there, so a failure seen only by its class can be read."""

from __future__ import annotations

from pathlib import Path

import click

from cli.kit import EXIT_FAILED, run
from governance.execute.run import ERROR_LOG, route_error_log

SECRET = "ssn 123-45-6789 of row 7"


@click.command("boom")
def boom() -> None:
    raise RuntimeError(SECRET)


def test_an_unexpected_error_tells_the_caller_its_class_only(capsys, monkeypatch) -> None:
    monkeypatch.setattr(ERROR_LOG, "handlers", [])  # no server log routed: nowhere to write
    assert run(boom, [], prog="lakegate") == EXIT_FAILED
    out = capsys.readouterr()
    assert out.err == "lakegate: unexpected error (RuntimeError)\n"
    assert SECRET not in out.out


def test_an_unexpected_error_is_written_whole_to_the_routed_server_log(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(ERROR_LOG, "handlers", [])
    log = tmp_path / "lakegate-server.log"
    route_error_log(log)
    try:
        assert run(boom, [], prog="lakegate") == EXIT_FAILED
    finally:
        for h in ERROR_LOG.handlers:
            h.close()
    assert capsys.readouterr().err == "lakegate: unexpected error (RuntimeError)\n"
    text = log.read_text()
    assert "lakegate: unexpected error" in text
    assert "Traceback (most recent call last)" in text
    assert f"RuntimeError: {SECRET}" in text
