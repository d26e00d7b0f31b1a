"""`lakegate audit witness-serve`: run the reference HTTP witness (audit/witness_server.py)
that `audit_checkpoints.witness_url` points at."""

from __future__ import annotations

from pathlib import Path

import click

from audit.checkpoint import CheckpointError, load_public_key
from audit.witness_server import make_server
from cli.kit import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, fail


def register(audit: click.Group) -> None:
    """Add `audit witness-serve` to the `audit` group."""

    @audit.command("witness-serve")
    @click.option(
        "--dir", "witness_dir", required=True, type=click.Path(file_okay=False),
        help="where the checkpoints are kept (append-only, one file per log)",
    )  # fmt: skip
    @click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
    @click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True,
                  help="port (0: any free port, printed)")  # fmt: skip
    @click.option("--public-key", help="take only checkpoints this key signed (PEM)")
    def cmd_witness_serve(witness_dir: str, host: str, port: int, public_key: str | None) -> int:
        """Serve an HTTP witness: POST /v1/logs/<id>/checkpoints stores a checkpoint (never
        one of fewer lines than the newest it holds), GET returns them all."""
        try:
            public = load_public_key(Path(public_key)) if public_key else None
        except CheckpointError as exc:
            fail(f"audit witness-serve: {exc}")
            return EXIT_USAGE
        try:
            server = make_server(Path(witness_dir), host, port, public)
        except OSError as exc:
            fail(f"audit witness-serve: cannot listen on {host}:{port}: {exc.strerror}")
            return EXIT_UNAVAILABLE
        bound_host, bound_port = server.server_address[:2]
        click.echo(f"witness listening on http://{bound_host}:{bound_port}/ (dir {witness_dir})")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return EXIT_OK
