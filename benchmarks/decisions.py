"""Policy decision latency at 10k and 100k policy lines with 1k groups.

Compares the index-backed decision (what the session uses) with casbin's own `enforce()`,
which scans every line per request, and checks both agree on every sampled request.

    python benchmarks/decisions.py [--lines 10000 100000] [--requests 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from catalog.model import ColumnInfo, TableInfo
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.model import (
    ColumnMask,
    Grant,
    NamePattern,
    PolicySet,
    Principal,
    RowFilter,
)

GROUPS = 1000
USERS = 5000
SCHEMAS = 50
TABLES_PER_SCHEMA = 40


def generate(lines: int, seed: int = 7) -> tuple[PolicySet, list[TableInfo]]:
    rnd = random.Random(seed)
    groups: dict[str, tuple[Principal, ...]] = {}
    for g in range(GROUPS):
        members = [Principal("user", f"u{rnd.randrange(USERS)}") for _ in range(10)]
        if g >= 10:  # some nesting: each group also contains a lower-numbered group
            members.append(Principal("group", f"g{rnd.randrange(g)}"))
        groups[f"g{g}"] = tuple(members)
    tables = [
        TableInfo(
            "main",
            f"s{s}",
            f"t{t}",
            f"/wh/s{s}/t{t}",
            tuple(ColumnInfo(f"c{i}", "string", position=i) for i in range(12)),
        )
        for s in range(SCHEMAS)
        for t in range(TABLES_PER_SCHEMA)
    ]
    grants, filters, masks = [], [], []
    for i in range(lines):
        g = Principal("group", f"g{rnd.randrange(GROUPS)}")
        t = rnd.choice(tables)
        kind = rnd.random()
        on = NamePattern("main", t.schema, t.name if rnd.random() < 0.9 else "*")
        if kind < 0.7:
            deny = rnd.random() < 0.1
            cols = (f"c{rnd.randrange(12)}",) if rnd.random() < 0.2 else None
            grants.append(Grant(f"gr{i}", (g,), ("select",), on, "deny" if deny else "allow", cols))
        elif kind < 0.85:
            filters.append(
                RowFilter(
                    f"rf{i}",
                    on,
                    (g,),
                    f"c{rnd.randrange(12)} > '{i}'",
                    rnd.choice(["permissive", "restrictive"]),
                )
            )
        else:
            masks.append(
                ColumnMask(
                    f"m{i}",
                    on,
                    "hash",
                    columns=(f"c{rnd.randrange(12)}",),
                    principals=(g,),
                    priority=i,
                )
            )
    return PolicySet(
        groups=groups, grants=tuple(grants), row_filters=tuple(filters), column_masks=tuple(masks)
    ), tables


def bench(lines: int, requests: int) -> None:
    ps, tables = generate(lines)
    t0 = time.perf_counter()
    enforcer = PolicyEnforcer(ps)
    build_s = time.perf_counter() - t0
    rnd = random.Random(1)
    users = [f"u{rnd.randrange(USERS)}" for _ in range(requests)]
    picks = [rnd.choice(tables) for _ in range(requests)]

    t0 = time.perf_counter()
    idents = {u: enforcer.identity(u) for u in set(users)}
    ident_us = (time.perf_counter() - t0) / len(idents) * 1e6

    lat = []
    for u, t in zip(users, picks, strict=True):
        t0 = time.perf_counter()
        enforcer._table_access(idents[u], t)  # uncached: the real decision cost
        lat.append((time.perf_counter() - t0) * 1e6)

    sample = min(50, requests)
    casbin_lat = []
    disagreements = 0
    for u, t in list(zip(users, picks, strict=True))[:sample]:
        t0 = time.perf_counter()
        allowed = enforcer.casbin.enforce(f"user:{u}", f"main.{t.schema}.{t.name}", "select")
        casbin_lat.append((time.perf_counter() - t0) * 1e6)
        mine, _ = enforcer.has_privilege(idents[u], "select", "main", t.schema, t.name)
        disagreements += allowed != mine
    print(
        f"{lines:>7} lines, {GROUPS} groups: build {build_s:.2f} s; identity "
        f"{ident_us:.0f} us/user; table decision p50 {statistics.median(lat):.0f} us, "
        f"p99 {harness.percentile(lat, 0.99):.0f} us; casbin enforce() p50 "
        f"{statistics.median(casbin_lat) / 1000:.1f} ms "
        f"({statistics.median(casbin_lat) / statistics.median(lat):.0f}x slower); "
        f"table-level disagreements with casbin: {disagreements}/{sample}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args(argv)
    for n in args.lines:
        bench(n, args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(harness.main("decisions", main))
