"""The demo lakehouse: three domains of small Delta tables with PII, built through the
governed session itself (as the admin `root`), so the demo exercises the real DDL path."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

REFERENCE_POLICIES = Path(__file__).resolve().parent.parent / "policies"

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
    "alice": "analyst: PII hashed, test orders hidden",
    "carol": "EMEA analyst: EMEA rows only, phone shows last 4",
    "dana": "PII reader: clear values",
}

QUERIES = [
    ("Orders per region",
     "SELECT region, count(*) AS orders, sum(amount) AS total FROM main.sales.orders "
     "GROUP BY region ORDER BY region"),
    ("Customers", "SELECT name, email, phone, country FROM main.sales.customers ORDER BY id"),
    ("Salaries", "SELECT name, salary FROM main.hr.employees"),
]


def write_config(root: Path, policies: Path | None = None) -> Path:
    """A lakegate.yaml for a lakehouse under `root`, with a copy of the policies."""
    root.mkdir(parents=True, exist_ok=True)
    dest = root / "policies"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(policies or REFERENCE_POLICIES, dest,
                    ignore=shutil.ignore_patterns("schema.json"))
    cfg = {
        "warehouse": "warehouse",
        "catalog": "catalog.db",
        "policies": "policies",
        "audit": "audit",
        "spark": {"master": "local[2]", "conf": {}},
    }
    path = root / "lakegate.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def build_demo(root: Path, spark: Any = None, policies: Path | None = None) -> Any:
    """Create the demo lakehouse under `root` and return the open Lakegate."""
    from governance.session import Lakegate

    lg = Lakegate.open(write_config(root, policies), spark=spark)
    admin = lg.session("root")
    for stmt in SETUP:
        admin.sql(stmt)
    return lg


def run_demo(root: Path, out: Any = None) -> int:
    import sys

    out = out or sys.stdout
    from governance.errors import AccessDenied

    if root.exists():
        shutil.rmtree(root)
    print(f"Building the demo lakehouse in {root} ...", file=out)
    lg = build_demo(root)
    print(f"{len(lg.catalog.tables())} Delta tables in 3 domains; policies from "
          f"{lg.config.policies}\n", file=out)
    for title, sql in QUERIES:
        print(f"=== {title}: {sql}", file=out)
        for user, role in PERSONAS.items():
            print(f"--- as {user} ({role})", file=out)
            try:
                rows = lg.session(user).sql(sql).collect()
                for r in rows:
                    print("   ", " | ".join("NULL" if v is None else str(v) for v in r), file=out)
            except AccessDenied as e:
                print(f"    DENIED: {e}", file=out)
        print(file=out)
    print("=== Rewritten SQL for carol (what Spark actually runs):", file=out)
    print("   ", lg.session("carol").explain(QUERIES[1][1]), file=out)
    print("\n=== The last audit lines:", file=out)
    log = lg.config.audit / "audit.log"
    for line in log.read_text().splitlines()[-8:]:
        print("   ", line[:300] + (" ..." if len(line) > 300 else ""), file=out)
    lg.close()
    return 0
