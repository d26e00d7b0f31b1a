"""The `lakegate` command: demo, governed SQL, explain, catalog, policy and audit tools.

Exit codes: 0 ok, 1 failure, 2 usage or configuration error, 3 access denied.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

EXIT_DENIED = 3


def _config_path(args: argparse.Namespace) -> Path:
    return Path(args.config)


def _open(args: argparse.Namespace) -> Any:
    """Spark's own console output and full Spark error texts go to logs beside the config
    (lakegate-spark.log, lakegate-server.log), keeping stdout for results and stderr for
    one-line errors that carry no data."""
    from governance.session import Lakegate

    path = _config_path(args)
    here = path.resolve().parent
    return Lakegate.open(path, spark_log=here / "lakegate-spark.log",
                         error_log=here / "lakegate-server.log")


def cmd_demo(args: argparse.Namespace) -> int:
    from governance.demo import DemoRefused, run_demo

    try:
        return run_demo(Path(args.dir).resolve(), force=args.force)
    except DemoRefused as e:
        print(f"lakegate: {e}", file=sys.stderr)
        return 1


def _print_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str,
                         indent=1))
    elif fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        print(" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        print("-+-".join("-" * w for w in widths))
        for r in cells:
            print(" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def cmd_sql(args: argparse.Namespace) -> int:
    lg = _open(args)
    try:
        df = lg.session(args.user).sql(args.statement)
        rows = [tuple(r) for r in df.collect()]
        _print_rows(df.columns, rows, args.format)
    finally:
        lg.close()
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    lg = _open(args)
    try:
        print(lg.session(args.user).explain(args.statement))
    finally:
        lg.close()
    return 0


def cmd_catalog_register(args: argparse.Namespace) -> int:
    lg = _open(args)
    try:
        info = lg.register_table(args.name, args.path, replace=args.replace)
        print(f"registered {info.full_name} -> {info.location} ({len(info.columns)} columns)")
    finally:
        lg.close()
    return 0


def cmd_catalog_list(args: argparse.Namespace) -> int:
    from catalog.catalog import Catalog
    from catalog.store import open_store
    from governance.config import Config

    cfg = Config.load(_config_path(args))
    cat = Catalog(open_store(cfg.catalog), cfg.warehouse)
    for t in cat.tables():
        print(f"{t.full_name}\t{t.domain or '-'}\t{t.location}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakegate", description=__doc__.splitlines()[0])
    p.add_argument("--config", default="lakegate.yaml", help="path of lakegate.yaml")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="build a demo lakehouse and query it as four personas")
    d.add_argument("--dir", default="demo-lakehouse",
                   help="where to build it: a new or empty folder, or a previous demo")
    d.add_argument("--force", action="store_true",
                   help="build in a non-empty folder (never replacing what the demo did not "
                        "make)")
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("sql", help="run one governed statement as a user")
    s.add_argument("--user", required=True)
    s.add_argument("--format", choices=["table", "json", "csv"], default="table")
    s.add_argument("statement")
    s.set_defaults(func=cmd_sql)

    e = sub.add_parser("explain", help="print the Spark SQL a statement is rewritten to")
    e.add_argument("--user", required=True)
    e.add_argument("statement")
    e.set_defaults(func=cmd_explain)

    c = sub.add_parser("catalog", help="catalog administration")
    csub = c.add_subparsers(dest="catalog_command", required=True)
    r = csub.add_parser("register", help="register an existing Delta table")
    r.add_argument("name", help="catalog.schema.table")
    r.add_argument("path", help="the Delta table's directory")
    r.add_argument("--replace", action="store_true")
    r.set_defaults(func=cmd_catalog_register)
    ls = csub.add_parser("list", help="list registered tables")
    ls.set_defaults(func=cmd_catalog_list)

    from audit import cli as audit_cli
    from governance.policy import cli as policy_cli

    policy_cli.register(sub.add_parser("policy", help="validate, test, diff, explain policies"))
    audit_cli.register(sub.add_parser("audit", help="verify and query the audit log"))
    from api import server as api_server

    api_server.register(sub.add_parser(
        "serve", help="serve the REST API: Unity Catalog discovery, domains, governed SQL"))
    _register_connect(sub)
    return p


def _register_connect(sub: Any) -> None:
    """`lakegate connect`: governed Spark Connect (api/connect)."""
    from api.connect import server as connect_server

    connect_server.register(sub.add_parser(
        "connect", help="serve governed Spark Connect (gRPC over TLS) for stock PySpark"))


def main(argv: list[str] | None = None) -> int:
    from governance.errors import AccessDenied, ConfigError, LakegateError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "audit_dir") or args.audit_dir is None:
        args.audit_dir = _default_audit_dir(args)
    try:
        return int(args.func(args) or 0)
    except AccessDenied as e:
        print(f"lakegate: {e}", file=sys.stderr)
        return EXIT_DENIED
    except ConfigError as e:
        print(f"lakegate: {e}", file=sys.stderr)
        return 2
    except LakegateError as e:
        print(f"lakegate: {e}", file=sys.stderr)
        return 1


def _default_audit_dir(args: argparse.Namespace) -> str:
    try:
        from governance.config import Config

        return str(Config.load(_config_path(args)).audit)
    except Exception:
        return "audit"


if __name__ == "__main__":
    sys.exit(main())
