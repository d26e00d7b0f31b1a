"""``lakegate audit verify|query``; also ``python -m audit`` on its own (see :func:`main`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from audit.checkpoint import CheckpointError
from audit.format import FIELD_FILTERS
from audit.query import (
    Filters,
    format_csv,
    format_json,
    format_jsonl,
    format_table,
    parse_time,
    query,
)
from audit.verify import verify
from cli.audit_questions import group_members
from cli.audit_questions import register as register_questions
from cli.audit_report import register as register_report
from cli.audit_tree import landings, pending_notices, register, tree_check
from cli.audit_witness import register as register_witness
from cli.kit import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    config_option,
    config_path,
    fail,
    output_option,
)

_DIR_KEY = "lakegate.audit_dir"


def _remember_dir(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_root().meta[_DIR_KEY] = value


@click.group("audit")
@config_option
@click.option(
    "--audit-dir",
    expose_value=False,
    callback=_remember_dir,
    type=click.Path(file_okay=False),
    help="audit directory (default: the configured audit directory)",
)
def audit() -> None:
    """Verify and query the audit log."""


def _directory(explicit: str | None, command: str) -> Path | None:
    """The directory named on the command line, else the configured one; None (after one
    line on stderr) when neither is there: checking some other directory would say OK about
    nothing."""
    given = explicit or click.get_current_context().find_root().meta.get(_DIR_KEY)
    if given:
        directory = Path(given).resolve()
    else:
        from governance.config import Config

        cfg = config_path()
        if not cfg.is_file():
            fail(
                f"audit {command}: no configuration ({cfg.resolve()} not found): give the "
                "audit directory or --config"
            )
            return None
        directory = Config.load(cfg).audit
    if not directory.is_dir():
        fail(f"audit {command}: no such directory: {directory}")
        return None
    return directory


@audit.command("verify")
@config_option
@click.argument("verify_dir", required=False, metavar="[DIR]")
@click.option("--public-key", help="check the Merkle tree with this public key (PEM)")
@click.option(
    "--witness",
    help="witness directory or http(s):// URL (default: audit_checkpoints' witness and "
    "witness_url)",
)
@click.option("--origin", help="the log's checkpoint origin (default: the configured one)")
@output_option("text", "json", default="text")
def cmd_verify(
    verify_dir: str | None,
    public_key: str | None,
    witness: str | None,
    origin: str | None,
    output: str,
) -> int:
    """Check every hash chain, and the Merkle tree against the signed checkpoints and the
    witness when checkpoints are configured; exit 1 on a break, 2 when there is nothing to
    check.

    DIR defaults to the audit directory in lakegate.yaml."""
    directory = _directory(verify_dir, "verify")
    if directory is None:
        return EXIT_USAGE
    report = verify(directory)
    if not report.files:
        fail(f"audit verify: no audit log files in {directory}: nothing was verified")
        return EXIT_USAGE
    try:
        tree = tree_check(directory, public_key, witness, origin)
    except CheckpointError as exc:
        fail(f"audit verify: {exc}")
        return EXIT_USAGE
    pending = pending_notices(directory)
    if output == "json":
        data = report.to_dict() | ({"tree": tree.to_dict()} if tree is not None else {})
        click.echo(json.dumps(data | {"pending": pending}, indent=2))
    else:
        click.echo(report.summary())
        if tree is not None:
            click.echo(tree.summary())
        for item in pending:
            click.echo(
                f"notice: intent without outcome at {item['at']} (query {item['queryId']}, "
                f"{item['cmd']} {item['table']}): {item['landing']}"
            )
    return EXIT_OK if report.ok and (tree is None or tree.ok) else EXIT_FAILED


def _positive(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter("must be >= 1")
    return value


def field_filter_options(command: Callable[..., int]) -> Callable[..., int]:
    """``--<name>`` for each field ``audit.format.FIELDS`` marks as a query filter."""
    for field in reversed(FIELD_FILTERS.values()):
        assert field.filter is not None
        name = field.filter.name
        command = click.option(f"--{name.replace('_', '-')}", name, help=field.filter.help)(command)
    return command


@audit.command("query")
@config_option
@click.option("--dir", "query_dir", help="audit directory (default: the configured one)")
@field_filter_options
@click.option("--group", help="acting user in this policy group (today's membership)")
@click.option("--table", help="table read or written (src or dst)")
@click.option("--denied", is_flag=True, help="only denied/refused accesses")
@click.option(
    "--outcome",
    type=click.Choice(["succeeded", "failed", "abandoned"]),
    help="ran to completion, failed, or its client stopped reading (abandoned)?",
)
@click.option("--pending", is_flag=True, help="only intents of effects with no outcome on record")
@click.option("--since", help="ISO-8601 time (inclusive, UTC unless zoned)")
@click.option("--until", help="ISO-8601 time (exclusive)")
@click.option("--limit", type=int, callback=_positive, help="keep only the newest N matches")
@output_option("table", "json", "jsonl", "csv", default="table")
def cmd_query(
    query_dir: str | None,
    group: str | None,
    table: str | None,
    denied: bool,
    outcome: str | None,
    pending: bool,
    since: str | None,
    until: str | None,
    limit: int | None,
    output: str,
    **field_filters: str | None,
) -> int:
    """Search audit records (rotated files too)."""
    directory = _directory(query_dir, "query")
    if directory is None:
        return EXIT_USAGE
    try:
        start = parse_time(since) if since else None
        end = parse_time(until) if until else None
    except ValueError as exc:
        fail(f"audit query: {exc}")
        return EXIT_USAGE
    filters = Filters(
        users=group_members(group) if group else None,
        table=table,
        denied=denied,
        outcome=outcome,
        since=start,
        until=end,
        **field_filters,
    )
    result = query(directory, limit=limit, pending=pending, filters=filters)
    landed = landings(result.records) if pending else None
    formats = {"json": format_json, "jsonl": format_jsonl, "csv": format_csv}
    click.echo(formats.get(output, format_table)(result.records, landed))
    if result.skipped:
        fail(
            f"audit query: skipped {result.skipped} line(s) that are not complete audit "
            "records (run 'audit verify')"
        )
    return EXIT_OK


@audit.command("recover")
@config_option
def cmd_recover() -> int:
    """Write the outcomes that stopped servers left out, now (`phase=recovered`).

    `lakegate serve` and `connect` do this at start-up; run it when a dead server is not
    coming back and the running ones must not be restarted. Only intents of writers known
    to be gone are resolved (from the tables' Delta logs and the catalog); exit 1 when one
    stays unknown (it stays pending; `audit query --pending` lists it)."""
    from governance.session.governed import Lakegate
    from governance.session.recovery import recover_outcomes

    cfg = config_path()
    if not cfg.is_file():
        fail(f"audit recover: no configuration ({cfg.resolve()} not found)")
        return EXIT_USAGE
    lg = Lakegate.open(cfg)
    try:
        examined = recover_outcomes(lg)
    finally:
        lg.close()
    unknown = 0
    for item in examined:
        intent = item.landing
        unknown += intent.state == "unknown"
        click.echo(
            f"{item.intent.query_id} {item.intent.cmd} {item.intent.dst or item.intent.src}: "
            f"{intent}" + (" (left pending)" if intent.state == "unknown" else "")
        )
    click.echo(
        f"recovered {len(examined) - unknown} outcome(s) of stopped servers; {unknown} unknown"
    )
    return EXIT_FAILED if unknown else EXIT_OK


register(audit, _directory)
register_questions(audit, _directory)
register_report(audit, _directory)
register_witness(audit)
