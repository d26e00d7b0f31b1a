"""``lakegate audit verify|query``: wired into the main CLI by :func:`register`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from audit.query import format_json, format_table, parse_time, query
from audit.verify import verify

DEFAULT_AUDIT_DIR = "./audit"


def _directory(args: argparse.Namespace, explicit: str | None) -> Path:
    """The directory given on the command line, else the configured ``args.audit_dir``."""
    return Path(explicit or getattr(args, "audit_dir", None) or DEFAULT_AUDIT_DIR)


def _cmd_verify(args: argparse.Namespace) -> int:
    directory = _directory(args, args.verify_dir)
    if not directory.is_dir():
        print(f"audit verify: no such directory: {directory}", file=sys.stderr)
        return 2
    report = verify(directory)
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    return 0 if report.ok else 1


def _cmd_query(args: argparse.Namespace) -> int:
    directory = _directory(args, args.query_dir)
    if not directory.is_dir():
        print(f"audit query: no such directory: {directory}", file=sys.stderr)
        return 2
    try:
        since = parse_time(args.since) if args.since else None
        until = parse_time(args.until) if args.until else None
    except ValueError as exc:
        print(f"audit query: {exc}", file=sys.stderr)
        return 2
    result = query(
        directory,
        user=args.user,
        table=args.table,
        cmd=args.cmd,
        denied=args.denied,
        since=since,
        until=until,
        limit=args.limit,
        pending=args.pending,
    )
    print(format_json(result.records) if args.format == "json" else format_table(result.records))
    if result.skipped:
        print(
            f"audit query: skipped {result.skipped} line(s) that are not complete audit records "
            "(run 'audit verify')",
            file=sys.stderr,
        )
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    """Add ``verify`` and ``query`` sub-commands; each sets ``func(args) -> exit code``."""
    commands = parser.add_subparsers(dest="audit_command", metavar="{verify,query}")
    commands.required = True

    check = commands.add_parser("verify", help="check every hash chain; exit 1 on the first break")
    check.add_argument(
        "verify_dir", nargs="?", metavar="DIR", help="audit directory (default: audit_dir)"
    )
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.set_defaults(func=_cmd_verify)

    search = commands.add_parser("query", help="search audit records (rotated files too)")
    search.add_argument("--dir", dest="query_dir", help="audit directory")
    search.add_argument("--user", help="acting user (exact)")
    search.add_argument("--table", help="table read or written (src or dst)")
    search.add_argument("--cmd", help="command, e.g. select, refused, policyReload")
    search.add_argument("--denied", action="store_true", help="only denied/refused accesses")
    search.add_argument("--pending", action="store_true",
                        help="only intents of effects with no outcome on record")
    search.add_argument("--since", help="ISO-8601 time (inclusive, UTC unless zoned)")
    search.add_argument("--until", help="ISO-8601 time (exclusive)")
    search.add_argument("--limit", type=_positive, help="keep only the newest N matches")
    search.add_argument("--format", choices=("table", "json"), default="table")
    search.set_defaults(func=_cmd_query)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m audit verify DIR``."""
    parser = argparse.ArgumentParser(prog="python -m audit")
    parser.add_argument("--audit-dir", dest="audit_dir", default=DEFAULT_AUDIT_DIR)
    register(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))
