"""`lakegate audit keygen|checkpoint|prove|verify-proof`, and the tree check `audit verify`
adds when checkpoints are configured (audit/README.md, "Merkle tree and signed
checkpoints")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from audit.checkpoint import (
    CheckpointError,
    CheckpointSettings,
    default_origin,
    generate_key,
    load_public_key,
)
from audit.format import AuditRecord
from audit.landing import landing
from audit.merkle import ProofError
from audit.proofs import TreeReport, prove, verify_proof, verify_tree
from audit.query import open_intents, read_records
from audit.tree import force_checkpoint
from audit.witness_http import check_url
from cli.kit import EXIT_FAILED, EXIT_OK, EXIT_USAGE, config_path, fail


def checkpoint_settings() -> CheckpointSettings | None:
    """`audit_checkpoints:` of the configuration in use, None when absent or unset."""
    from governance.config import Config

    cfg = config_path()
    return Config.load(cfg).audit_checkpoints if cfg.is_file() else None


def tree_check(
    directory: Path, public_key: str | None, witness: str | None, origin: str | None
) -> TreeReport | None:
    """The tree check for `audit verify`: with the configured checkpoints, or with a public
    key given on the command line; None when neither is there."""
    settings = checkpoint_settings()
    if public_key is None and settings is None:
        return None
    key = Path(public_key) if public_key else settings.public_key_path  # type: ignore[union-attr]
    name = origin or (settings.origin if settings else None) or default_origin(directory)
    if witness and witness.startswith(("http://", "https://")):
        try:
            url = check_url(witness)
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        return verify_tree(directory, load_public_key(key), name, None, url)
    seen = Path(witness) if witness else (settings.witness if settings else None)
    url = None if witness or settings is None else settings.witness_url
    return verify_tree(directory, load_public_key(key), name, seen, url)


def landings(records: list[AuditRecord]) -> list[str]:
    """For each pending intent: did its write land (the table's Delta log says)?"""
    ask = landing_of()
    return [ask(record) for record in records]


def landing_of() -> Callable[[AuditRecord], str]:
    """`record -> "landed: ..." | "not landed: ..." | "set aside: ..." | "dropped: ..." |
    "unknown: ..."`, from the Delta logs, the catalog and the DROPs on record
    (governance/session/recovery.py), opened once."""
    from governance.config import Config
    from governance.session.recovery import config_judge

    cfg = config_path()
    if not cfg.is_file():
        return lambda record: str(landing(record, None))
    judge = config_judge(Config.load(cfg))
    return lambda record: str(judge(record))


def pending_notices(directory: Path) -> list[dict[str, object]]:
    """Every intent without an outcome, with whether its write landed (for `audit verify`)."""
    records = open_intents(read_records(directory, phased=True))
    return [
        {
            "at": f"{record.file}:{record.line}",
            "queryId": record.query_id,
            "cmd": record.cmd,
            "table": record.dst or record.src,
            "landing": text,
        }
        for record, text in zip(records, landings(records), strict=True)
    ]


def needs_settings(command: str) -> CheckpointSettings:
    settings = checkpoint_settings()
    if settings is None:
        raise click.UsageError(
            f"audit {command}: no audit_checkpoints in {config_path().resolve()}"
        )
    return settings


def register(audit: click.Group, directory: object) -> None:
    """Add the tree commands to the `audit` group (`directory` resolves the audit dir)."""

    @audit.command("keygen")
    @click.option("--key", "key_path", help="private key file (default: audit_checkpoints.key)")
    def cmd_keygen(key_path: str | None) -> int:
        """Make the Ed25519 signing key (owner-only) and its public key `<key>.pub`."""
        path = Path(key_path) if key_path else needs_settings("keygen").key
        try:
            public = generate_key(path)
        except CheckpointError as exc:
            fail(f"audit keygen: {exc}")
            return EXIT_USAGE
        click.echo(f"signing key {path}; public key {public}")
        return EXIT_OK

    @audit.command("checkpoint")
    @click.argument("audit_dir", required=False, metavar="[DIR]")
    def cmd_checkpoint(audit_dir: str | None) -> int:
        """Sign a checkpoint of the log now (and send it to the witness)."""
        settings = needs_settings("checkpoint")
        where = directory(audit_dir, "checkpoint")  # type: ignore[operator]
        if where is None:
            return EXIT_USAGE
        try:
            checkpoint = force_checkpoint(where, settings)
        except (CheckpointError, ValueError, OSError) as exc:
            fail(f"audit checkpoint: {exc}")
            return EXIT_FAILED
        click.echo(f"checkpoint: {checkpoint.size} lines, root {checkpoint.root}")
        return EXIT_OK

    @audit.command("prove")
    @click.argument("event_id")
    @click.option("--dir", "audit_dir", help="audit directory (default: the configured one)")
    @click.option("--out", type=click.Path(dir_okay=False), help="write the proof here")
    @click.option("--origin", help="the log's checkpoint origin (default: the configured one)")
    def cmd_prove(event_id: str, audit_dir: str | None, out: str | None, origin: str | None) -> int:
        """Write the inclusion proof (JSON) of the line with EVENT_ID; refused unless the
        line is in the signed tree."""
        where = directory(audit_dir, "prove")  # type: ignore[operator]
        if where is None:
            return EXIT_USAGE
        settings = checkpoint_settings()
        try:
            proof = prove(where, event_id, origin or (settings.origin if settings else None))
        except ProofError as exc:
            fail(f"audit prove: {exc}")
            return EXIT_FAILED
        text = json.dumps(proof, indent=1)
        if out:
            Path(out).write_text(text + "\n", encoding="ascii")
        else:
            click.echo(text)
        return EXIT_OK

    @audit.command("verify-proof")
    @click.argument("proof_file", type=click.Path(dir_okay=False))
    @click.option("--public-key", help="public key PEM (default: audit_checkpoints' one)")
    @click.option("--origin", help="the log the checkpoint must be of")
    def cmd_verify_proof(proof_file: str, public_key: str | None, origin: str | None) -> int:
        """Check an inclusion proof offline against its signed checkpoint."""
        key = Path(public_key) if public_key else needs_settings("verify-proof").public_key_path
        try:
            proof = json.loads(Path(proof_file).read_text(encoding="ascii"))
        except (OSError, ValueError) as exc:
            fail(f"audit verify-proof: cannot read {proof_file}: {type(exc).__name__}")
            return EXIT_USAGE
        try:
            click.echo(verify_proof(proof, load_public_key(key), origin))
        except (ProofError, CheckpointError) as exc:
            fail(f"audit verify-proof: INVALID: {exc}")
            return EXIT_FAILED
        return EXIT_OK
