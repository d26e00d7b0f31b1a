"""The demo lakehouse: three domains of small Delta tables with PII, built through the
governed session itself (as the admin `root`), so the demo exercises the real DDL path."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from governance.files import owner_only_tree

# The reference policies travel inside the package (a link to policies/ in a clone), so a
# wheel-installed `lakegate demo` finds them too.
REFERENCE_POLICIES = Path(__file__).resolve().parents[1] / "reference" / "policies"

SETUP = [
    "CREATE CATALOG IF NOT EXISTS main",
    "CREATE SCHEMA IF NOT EXISTS main.sales",
    "CREATE SCHEMA IF NOT EXISTS main.hr",
    "CREATE SCHEMA IF NOT EXISTS main.marketing",
    """CREATE TABLE main.sales.orders (
        id INT, customer_id INT, region STRING, amount DECIMAL(10,2), order_date DATE,
        is_test BOOLEAN)""",
    """INSERT INTO main.sales.orders VALUES
        (1, 1, 'EMEA', 120.00, DATE'2026-01-05', false),
        (2, 2, 'AMER', 75.50, DATE'2026-01-07', false),
        (3, 3, 'APAC', 310.25, DATE'2026-02-11', false),
        (4, 1, 'EMEA', 42.00, DATE'2026-02-14', false),
        (5, 4, 'EMEA', 999.99, DATE'2026-03-01', true),
        (6, 5, 'AMER', 18.75, DATE'2026-03-09', false),
        (7, 6, 'APAC', 230.00, DATE'2026-03-21', false),
        (8, 4, 'EMEA', 64.10, DATE'2026-04-02', false)""",
    """CREATE TABLE main.sales.customers (
        id INT, name STRING, email STRING, phone STRING, ssn STRING, country STRING)""",
    """INSERT INTO main.sales.customers VALUES
        (1, 'Anna Schmidt', 'anna@example.de', '+49 30 1234567', '111-22-3333', 'DE'),
        (2, 'Ben Carter', 'ben@example.com', '+1 212 5550199', '222-33-4444', 'US'),
        (3, 'Chen Wei', 'chen@example.cn', '+86 10 8888 1234', '333-44-5555', 'CN'),
        (4, 'Dominique Leroy', 'dom@example.fr', '+33 1 4567 8910', '444-55-6666', 'FR'),
        (5, 'Eve Moore', 'eve@example.com', '+1 415 5550142', '555-66-7777', 'US'),
        (6, 'Farah Khan', 'farah@example.uk', '+44 20 7946 0958', '666-77-8888', 'UK')""",
    """CREATE TABLE main.hr.employees (
        id INT, name STRING, department STRING, salary DOUBLE, birth_date DATE)""",
    """INSERT INTO main.hr.employees VALUES
        (1, 'Grace Hopper', 'engineering', 185000.0, DATE'1986-12-09'),
        (2, 'Alan Turing', 'research', 172000.0, DATE'1992-06-23'),
        (3, 'Ada Lovelace', 'engineering', 191000.0, DATE'1995-12-10')""",
    """CREATE TABLE main.marketing.campaigns (
        id INT, name STRING, budget DOUBLE, starts DATE)""",
    """INSERT INTO main.marketing.campaigns VALUES
        (1, 'Spring launch', 50000.0, DATE'2026-03-01'),
        (2, 'Summer sale', 20000.0, DATE'2026-06-15')""",
]

PERSONAS = {
    "erin": "sales domain owner: every order, test orders included; PII hashed",
    "alice": "analyst: PII hashed, test orders hidden, no salaries",
    "carol": "EMEA analyst: EMEA rows only, phone shows last 4",
    "dana": "PII reader: clear values, test orders hidden",
}

QUERIES = [
    (
        "Orders per region",
        "SELECT region, count(*) AS orders, sum(amount) AS total FROM main.sales.orders "
        "GROUP BY region ORDER BY region",
    ),
    ("Customers", "SELECT name, email, phone, country FROM main.sales.customers ORDER BY id"),
    ("Salaries", "SELECT name, salary FROM main.hr.employees"),
]


MARKER = ".lakegate-demo"
# What the demo creates inside its folder; nothing else there is ever touched.
OWNED = (
    "warehouse",
    "catalog.db",
    "catalog.db-wal",
    "catalog.db-shm",
    "audit",
    "policies",
    "state",
    "lakegate-spark.log",
)
DEMO_KEYS = {
    "warehouse": "warehouse",
    "catalog": "catalog.db",
    "policies": "policies",
    "audit": "audit",
}


class DemoRefused(Exception):
    """The demo folder holds something the demo did not make."""


def write_config(root: Path, policies: Path | None = None) -> Path:
    """A lakegate.yaml for a lakehouse under `root`, with a copy of the policies.

    An existing lakegate.yaml keeps every key the demo does not own (an `api:` section, a
    Spark master, ...); the demo resets only where its own files live."""
    root.mkdir(parents=True, exist_ok=True)
    dest = root / "policies"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(
        policies or REFERENCE_POLICIES, dest, ignore=shutil.ignore_patterns("schema.json")
    )
    owner_only_tree(dest)  # copies keep the source's modes
    path = root / "lakegate.yaml"
    cfg: dict[str, Any] = {}
    if path.is_file():
        loaded = yaml.safe_load(path.read_text())
        cfg = loaded if isinstance(loaded, dict) else {}
    cfg.update(DEMO_KEYS)
    cfg.setdefault("spark", {"master": "local[2]", "conf": {}})
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def prepare_dir(root: Path, *, force: bool = False) -> list[str]:
    """Make `root` ready for a fresh demo without deleting anything the demo did not make.

    A previous demo (it carries the marker file) has its own files replaced; a non-empty
    folder that is not one is refused unless `force`, and even then only if none of the
    names the demo writes are taken. Returns the user's lakegate.yaml keys that are kept."""
    if root.exists() and not root.is_dir():
        raise DemoRefused(f"{root} exists and is not a folder")
    entries = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    is_demo = (root / MARKER).is_file()
    if entries and not is_demo:
        taken = [n for n in (*OWNED, "lakegate.yaml") if n in entries]
        if not force:
            raise DemoRefused(
                f"refusing to build the demo in {root}: the folder is not empty and is not a "
                "previous demo (pass --force to build beside its contents, or choose --dir)"
            )
        if taken:
            raise DemoRefused(
                f"refusing to build the demo in {root}: {', '.join(taken)} already exist and "
                "were not made by the demo; nothing was changed"
            )
    for name in OWNED if is_demo else ():
        target = root / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    kept: list[str] = []
    cfg_path = root / "lakegate.yaml"
    if is_demo and cfg_path.is_file():
        loaded = yaml.safe_load(cfg_path.read_text())
        if isinstance(loaded, dict):
            kept = [k for k in loaded if k not in DEMO_KEYS]
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text(
        "Made by `lakegate demo`: it may replace " + ", ".join(OWNED) + " here.\n"
    )
    return kept


def build_demo(
    root: Path, spark: Any = None, policies: Path | None = None, spark_log: Path | None = None
) -> Any:
    """Create the demo lakehouse under `root` and return the open Lakegate."""
    from governance.session.governed import Lakegate

    lg = Lakegate.open(write_config(root, policies), spark=spark, spark_log=spark_log)
    admin = lg.session("root")
    for stmt in SETUP:
        admin.sql(stmt)
    return lg


def _table(columns: list[str], rows: list[tuple]) -> list[str]:
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
        "-+-".join("-" * w for w in widths),
    ]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return lines


def _audit_summary(record: Any) -> str:
    fields = [
        f"user={record.user}",
        f"cmd={record.cmd}",
        f"src={record.src or '-'}",
        f"allowed={str(record.allowed).lower()}",
    ]
    if record.masked:
        fields.append("masked=" + ",".join(f"{c}:{m}" for c, m in record.masked))
    if record.row_filters:
        fields.append("rowFilters=" + ",".join(record.row_filters))
    if record.policies:
        fields.append("policies=" + ",".join(record.policies))
    if record.reason:
        fields.append(f"reason={record.reason}")
    return "  ".join(fields)


def run_demo(root: Path, out: Any = None, *, force: bool = False) -> int:
    import sys

    out = out or sys.stdout
    from audit.query import query
    from governance.errors import AccessDenied

    kept = prepare_dir(root, force=force)
    print(
        f"Building the demo lakehouse in {root} (the first run downloads the Delta jars "
        "and starts Spark; its output goes to lakegate-spark.log) ...",
        file=out,
    )
    if kept:
        print(f"Kept your lakegate.yaml settings: {', '.join(kept)}", file=out)
    lg = build_demo(root, spark_log=root / "lakegate-spark.log")
    print(
        f"{len(lg.catalog.tables())} Delta tables in 3 domains; policies from "
        f"{lg.config.policies}\n",
        file=out,
    )
    for title, sql in QUERIES:
        print(f"=== {title}: {sql}", file=out)
        for user, role in PERSONAS.items():
            print(f"--- as {user} ({role})", file=out)
            try:
                df = lg.session(user).sql(sql)
                lines = _table(df.columns, [tuple(r) for r in df.collect()])
            except AccessDenied as e:
                lines = [f"DENIED: {e}"]
            for line in lines:
                print("   ", line, file=out)
        print(file=out)
    print("=== Rewritten SQL for carol (what Spark actually runs):", file=out)
    print("   ", lg.session("carol").explain(QUERIES[1][1]), file=out)
    print(
        "\n=== What the audit log recorded for those queries "
        f"(lakegate --config {root / 'lakegate.yaml'} audit query --user carol):",
        file=out,
    )
    for user in PERSONAS:
        for record in query(lg.config.audit, user=user, limit=len(QUERIES)).records:
            print("   ", _audit_summary(record), file=out)
    lg.close()
    return 0
