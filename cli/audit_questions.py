"""`lakegate audit question NAME ...`: the auditor's named questions (audit/questions.py),
each answered in one command as a table, JSON, JSON lines or CSV."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from audit import questions
from audit.query import parse_time
from cli.kit import EXIT_OK, EXIT_USAGE, config_path, fail, output_option, print_rows


def group_members(group: str) -> frozenset[str]:
    """Users of a policy group (nested groups expanded) in the configured policies: the log
    records users, not groups, so this is today's membership."""
    from governance.config import Config
    from governance.policy.loader import load_policy_dir
    from governance.policy.model import group_users

    cfg = config_path()
    if not cfg.is_file():
        raise click.UsageError(f"--group needs the policies: {cfg.resolve()} not found")
    config = Config.load(cfg)
    policies = load_policy_dir(config.policies, config.identity.provider_groups())
    return group_users(policies.groups, group.lower())


def _show(answer: questions.Answer, output: str) -> None:
    columns, rows = answer
    if output == "jsonl":
        for row in rows:
            click.echo(json.dumps(dict(zip(columns, row, strict=True)), separators=(",", ":")))
    else:
        print_rows(columns, rows, output)


def _times(since: str | None, until: str | None) -> dict[str, Any]:
    return {
        "since": parse_time(since) if since else None,
        "until": parse_time(until) if until else None,
    }


_SINCE = click.option("--since", help="ISO-8601 time (inclusive, UTC unless zoned)")
_UNTIL = click.option("--until", help="ISO-8601 time (exclusive)")
_DIR = click.option("--dir", "audit_dir", help="audit directory (default: the configured one)")


def register(audit: click.Group, directory: Callable[[str | None, str], Path | None]) -> None:
    """Add `audit question` and its questions to the `audit` group."""

    @audit.group("question")
    def question() -> None:
        """Named questions, each answered in one command."""

    def answer(name: str, ask: Callable[[Path], questions.Answer], output: str, where: Any) -> int:
        found = directory(where, f"question {name}")
        if found is None:
            return EXIT_USAGE
        _show(ask(found), output)
        return EXIT_OK

    def timed(f: Callable[..., int]) -> Callable[..., int]:
        def run(*args: Any, since: str | None, until: str | None, **kw: Any) -> int:
            try:
                times = _times(since, until)
            except ValueError as exc:
                fail(f"audit question: {exc}")
                return EXIT_USAGE
            return f(*args, times=times, **kw)

        run.__doc__, run.__name__ = f.__doc__, f.__name__
        return _UNTIL(_SINCE(run))

    formats: Sequence[str] = ("table", "json", "jsonl", "csv")

    @question.command("who-read-column")
    @click.option("--table", required=True, help="the table (full name or trailing parts)")
    @click.option("--column", required=True)
    @_DIR
    @output_option(*formats, default="table")
    @timed
    def who_read_column(
        table: str, column: str, audit_dir: str | None, output: str, times: dict[str, Any]
    ) -> int:
        """Who read COLUMN of TABLE, in the clear or masked, how often, first and last."""
        return answer(
            "who-read-column",
            lambda d: questions.who_read_column(d, table, column, **times),
            output,
            audit_dir,
        )

    @question.command("masked-for")
    @click.option("--user", required=True)
    @_DIR
    @output_option(*formats, default="table")
    @timed
    def masked_for(user: str, audit_dir: str | None, output: str, times: dict[str, Any]) -> int:
        """What USER saw masked: table, column, mask, statements, last time."""
        return answer(
            "masked-for", lambda d: questions.masked_for(d, user, **times), output, audit_dir
        )

    @question.command("denials")
    @click.option("--table", help="only this table")
    @_DIR
    @output_option(*formats, default="table")
    @timed
    def denials(
        table: str | None, audit_dir: str | None, output: str, times: dict[str, Any]
    ) -> int:
        """Denials and refusals by table and reason: count, users, last time."""
        return answer("denials", lambda d: questions.denials(d, table, **times), output, audit_dir)

    @question.command("decided-by")
    @click.argument("event_or_query")
    @_DIR
    @output_option(*formats, default="table")
    def decided_by(event_or_query: str, audit_dir: str | None, output: str) -> int:
        """Which policy version (git commit) and policies decided an event or statement."""
        return answer(
            "decided-by", lambda d: questions.decided_by(d, event_or_query), output, audit_dir
        )

    @question.command("writes")
    @click.option("--table", required=True)
    @_DIR
    @output_option(*formats, default="table")
    @timed
    def writes(table: str, audit_dir: str | None, output: str, times: dict[str, Any]) -> int:
        """Writes to TABLE with their intent and outcome (pending ones: landed or not)."""
        from cli.audit_tree import landing_of

        return answer(
            "writes",
            lambda d: questions.writes(d, table, landing=landing_of(), **times),
            output,
            audit_dir,
        )
