"""`lakegate policy ...`: review tools for YAML policies. All but `test --spark` run without
Spark (fast, in any CI)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from governance.identity import canonical_user
from governance.policy.analysis import (
    diff_policies,
    effective_access,
    load_policies,
    tables_from_policies,
    who_can_see,
)
from governance.policy.enforcer import PolicyEnforcer
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


def cmd_test(args: argparse.Namespace) -> int:
    from governance.policy.testing import run_tests

    policy_dir = Path(args.dir)
    tests_dir = Path(args.tests) if args.tests else policy_dir / "tests"
    files = sorted([*tests_dir.rglob("*.yaml"), *tests_dir.rglob("*.yml")])
    if not files:
        print(f"lakegate: no policy test files under {tests_dir}")
        return 1
    results = run_tests(policy_dir, files, spark=args.spark)
    for r in results:
        line = f"{r.status.upper():7} {r.case.file} :: {r.case.name}"
        print(line + (f"\n        {r.message}" if r.message else ""))
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


def _tables(args: argparse.Namespace, enforcer: PolicyEnforcer) -> dict[str, Any]:
    """Catalog tables when a lakegate.yaml is at hand, else the tables policies name."""
    cfg_path = Path(getattr(args, "config", "lakegate.yaml"))
    if cfg_path.is_file():
        from catalog.catalog import Catalog
        from catalog.store import open_store
        from governance.config import Config

        cfg = Config.load(cfg_path)
        tables = Catalog(open_store(cfg.catalog), cfg.warehouse).tables()
        if tables:
            return {t.full_name: t for t in tables}
    return {t.full_name: t for t in tables_from_policies(enforcer.policy_set)}


def cmd_explain(args: argparse.Namespace) -> int:
    enforcer = PolicyEnforcer(load_policies(args.dir))
    tables = _tables(args, enforcer)
    table = tables.get(args.table.lower())
    if table is None:
        print(f"lakegate: table {args.table} is not in the catalog or the policies")
        return 2
    acc = effective_access(enforcer, args.user, table)
    ident = enforcer.identity(args.user)
    if args.format == "json":
        print(json.dumps({"user": args.user, "groups": sorted(ident.groups),
                          "table": table.full_name, **acc.to_dict()}, indent=1))
        return 0
    print(f"{args.user} (groups: {', '.join(sorted(ident.groups)) or 'none'}) on "
          f"{table.full_name}")
    none = "none (the table does not exist for this user)"
    print(f"  privileges : {', '.join(acc.privileges) or none}")
    if acc.can_select:
        print(f"  columns    : {', '.join(acc.columns)}")
        for col, mask, pid in acc.masks:
            print(f"  mask       : {col} -> {mask} (policy {pid})")
        for fid, kind, where in acc.row_filters:
            print(f"  row filter : {fid} ({kind}): {where}")
    print(f"  decided by : {', '.join(acc.decided_by) or 'default deny'}")
    if acc.error:
        print(f"  ERROR      : {acc.error}")
    return 0


def cmd_who_can_see(args: argparse.Namespace) -> int:
    enforcer = PolicyEnforcer(load_policies(args.dir))
    tables = _tables(args, enforcer)
    name = args.target.lower()
    table = tables.get(name)
    column = None
    if table is None and "." in name:
        base, _, column = name.rpartition(".")
        table = tables.get(base)
    if table is None:
        print(f"lakegate: {args.target} is not in the catalog or the policies")
        return 2
    rows = who_can_see(enforcer, table, column)
    if args.format == "json":
        print(json.dumps([{"user": u, **a.to_dict()} for u, a in rows], indent=1))
        return 0
    print(f"who can see {table.full_name}{'.' + column if column else ''}:")
    for user, acc in rows:
        masks = {c.lower(): m for c, m, _ in acc.masks}
        how = f"masked ({masks[column]})" if column and column in masks else "clear"
        detail = how if column else f"{len(acc.columns)} columns, {len(acc.masks)} masked"
        filters = f", rows filtered by {', '.join(f[0] for f in acc.row_filters)}" \
            if acc.row_filters else ""
        print(f"  {user:20} {detail}{filters}")
    if not rows:
        print("  nobody")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    old = load_policies(args.old, policy_dir=args.dir)
    new = load_policies(args.new, policy_dir=args.dir)
    enforcer = PolicyEnforcer(new)
    tables = None
    if Path(args.config).is_file():
        tables = list(_tables(args, enforcer).values())
    d = diff_policies(old, new, tables)
    print(json.dumps(d.to_json(), indent=1) if args.format == "json" else d.to_markdown())
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", required=True)
    v = sub.add_parser("validate", help="check a policy directory; exit 1 on errors")
    v.add_argument("dir", nargs="?", default="policies")
    v.add_argument("--format", choices=["text", "json"], default="text")
    v.set_defaults(func=cmd_validate)

    t = sub.add_parser("test", help="run policy test cases (YAML)")
    t.add_argument("dir", nargs="?", default="policies")
    t.add_argument("--tests", help="directory of test files (default DIR/tests)")
    t.add_argument("--spark", action="store_true", help="also check rows on real Delta tables")
    t.set_defaults(func=cmd_test)

    e = sub.add_parser("explain", help="a user's effective rights on a table")
    e.add_argument("--user", required=True, type=canonical_user)  # look-alikes: usage error
    e.add_argument("--dir", default="policies", help="policy directory or git revision")
    e.add_argument("--format", choices=["text", "json"], default="text")
    e.add_argument("table")
    e.set_defaults(func=cmd_explain)

    w = sub.add_parser("who-can-see", help="who can read a table or column")
    w.add_argument("--dir", default="policies", help="policy directory or git revision")
    w.add_argument("--format", choices=["text", "json"], default="text")
    w.add_argument("target", help="catalog.schema.table[.column]")
    w.set_defaults(func=cmd_who_can_see)

    d = sub.add_parser("diff", help="change in effective access between two policy sets")
    d.add_argument("old", help="directory or git revision (e.g. main, HEAD~1)")
    d.add_argument("new", help="directory or git revision")
    d.add_argument("--dir", default="policies", help="policy directory inside the repo")
    d.add_argument("--format", choices=["markdown", "json"], default="markdown")
    d.set_defaults(func=cmd_diff)
