"""`lakegate policy ...`: policy tools that run without Spark (fast, in any CI)."""

from __future__ import annotations

import argparse
from pathlib import Path

from governance.policy.validate import format_problems, validate_policy_dir


def cmd_validate(args: argparse.Namespace) -> int:
    path = Path(args.dir)
    if not path.is_dir():
        print(f"lakegate: policy directory {path} not found")
        return 2
    problems = validate_policy_dir(path)
    errors = [p for p in problems if p.severity == "error"]
    if args.format == "json" or problems:
        print(format_problems(problems, args.format))
    if args.format == "text":
        warnings = len(problems) - len(errors)
        print(f"{path}: {len(errors)} error(s), {warnings} warning(s)")
    return 1 if errors else 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", required=True)
    v = sub.add_parser("validate", help="check a policy directory; exit 1 on errors")
    v.add_argument("dir", nargs="?", default="policies")
    v.add_argument("--format", choices=["text", "json"], default="text")
    v.set_defaults(func=cmd_validate)
