"""Smoke test of the benchmark report machinery, without Spark: the rewrite scaling-curve
generator on small sizes, the parsers of the benchmarks' printed figures, the dynamic-view
generator of the TPC-DS benchmark, and the report writer with its charts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks import harness, report  # noqa: E402
from benchmarks import scaling as scaling_bench  # noqa: E402
from benchmarks.breakdown import PARTS  # noqa: E402

DECISIONS_OUT = """\
   1000 lines, 1000 groups: build 0.05 s; identity 40 us/user; table decision p50 12 us, p99 30 us; casbin enforce() p50 1.5 ms (125x slower); table-level disagreements with casbin: 0/50
  10000 lines, 1000 groups: build 0.41 s; identity 52 us/user; table decision p50 14 us, p99 41 us; casbin enforce() p50 14.8 ms (1057x slower); table-level disagreements with casbin: 0/50
"""  # noqa: E501

AUDIT_OUT = """\
audit benchmark: 2.0s per run, fsync=False, dir=/tmp/x
host: 2 CPUs, load average 0.4
1 writer, 1 line(s)/stmt           61,234 lines/s   p50     12.1 µs   p99     40.2 µs   mean    14.0 µs
  per CPU-second of the writer: 70,000 lines/s (14.3 µs CPU per statement, event construction included)
1 writer, 3 line(s)/stmt           90,000 lines/s   p50     30.0 µs   p99     80.0 µs   mean    32.0 µs
2 writer threads                   50,000 lines/s   p50     20.0 µs   p99     90.0 µs   mean    25.0 µs
4 writer threads                   48,000 lines/s   p50     40.0 µs   p99    190.0 µs   mean    45.0 µs
2 writer processes                 80,000 lines/s   p50     15.0 µs   p99     60.0 µs   mean    16.0 µs
"""  # noqa: E501


@pytest.fixture(scope="module")
def scaling() -> dict:
    return scaling_bench.rewrite_scaling(table_sizes=(1, 3, 30), depths=(1, 3), reps=2)


def test_synthetic_queries_grow() -> None:
    tables = scaling_bench._first_columns()
    assert len(tables) == 24
    q = scaling_bench.join_query(30, tables)
    assert q.count("\nJOIN ") == 29 and "AS t29" in q
    n = scaling_bench.nested_query(5)
    assert n.count("SELECT") == 6 and "AS n5" in n


def test_rewrite_scaling_small(scaling: dict) -> None:
    assert [r["size"] for r in scaling["tables"]] == [1, 3, 30]
    assert [r["size"] for r in scaling["depth"]] == [1, 3]
    for row in scaling["tables"] + scaling["depth"]:
        assert 0 < row["p50_ms"] <= row["max_ms"]
        assert row["cold_ms"] > 0


def test_parsers() -> None:
    dec = report.parse_decisions(DECISIONS_OUT)
    assert [r["lines"] for r in dec] == [1000, 10000]
    assert dec[1]["p50_us"] == 14 and dec[1]["casbin_ms"] == 14.8 and dec[1]["disagree"] == 0
    aud = report.parse_audit(AUDIT_OUT)
    kinds = [(r["kind"], r["writers"], r["lines_per_stmt"]) for r in aud["rows"]]
    assert kinds == [
        ("single", 1, 1),
        ("single", 1, 3),
        ("threads", 2, 1),
        ("threads", 4, 1),
        ("processes", 2, 1),
    ]
    assert aud["rows"][0]["lines_per_s"] == 61234
    assert aud["cpu_lines_per_s"] == [70000]


def test_dynamic_views_follow_policy(tmp_path: Path) -> None:
    """B's generated view SQL: runtime membership lookups, masks, filters, user mapping."""
    import sqlglot

    from benchmarks.rewrite import setup
    from benchmarks.tpcds_views import DynamicViews

    catalog, enforcer = setup(tmp_path)
    dv = DynamicViews("osuser", "/m", {"bench": "osuser"})
    customer = dv.view_sql(enforcer, catalog.table("tpcds", "sf1", "customer"))
    sqlglot.parse_one(customer, read="spark")
    assert "grp = 'analysts'" in customer and "current_user()" in customer.lower()
    assert "'osuser'" in customer and "'bench'" not in customer  # bench -> Spark's user
    assert "CASE WHEN NOT (SELECT count(1) > 0" in customer  # pii except pii-readers
    assert "sha2(cast(`c_customer_id` as string), 256) as `c_customer_id`" in customer.lower()
    sales = dv.view_sql(enforcer, catalog.table("tpcds", "sf1", "store_sales"))
    assert "(NOT current_user() = 'osuser' OR (ss_ticket_number >= 1))" in sales
    assert "grp = 'regional'" in sales.replace("GRP", "grp")


def test_floor_views_answer_every_test_for_the_bench_user(tmp_path: Path) -> None:
    """A': the same filters and masks as B, written for the bench user alone: no membership
    lookup, no current_user() test, filters that do not apply to bench left out."""
    import sqlglot

    from benchmarks.rewrite import setup
    from benchmarks.tpcds_views import DynamicViews

    catalog, enforcer = setup(tmp_path)
    groups = frozenset(g.lower() for g in enforcer.identity("bench").groups)
    floor = DynamicViews("osuser", "/m", {"bench": "osuser"}, groups)
    for name in ("customer", "store_sales", "item"):
        info = catalog.table("tpcds", "sf1", name)
        text = floor.view_sql(enforcer, info)
        sqlglot.parse_one(text, read="spark")
        assert "/m" not in text and "current_user() =" not in text, text
        assert " WHEN " not in text, text  # every mask decided, no runtime branch
    sales = floor.view_sql(enforcer, catalog.table("tpcds", "sf1", "store_sales"))
    assert "(ss_ticket_number >= 1)" in sales  # the filter on user bench applies
    # over A's own DataFrame (a temp view), so A' - A is what the policies cost
    pinned = floor.view_sql(enforcer, catalog.table("tpcds", "sf1", "item"), source="item")
    assert " FROM item" in pinned and "delta.`" not in pinned


def test_report_writer(tmp_path: Path, scaling: dict) -> None:
    pytest.importorskip("matplotlib")
    queries = [
        {
            "id": n,
            "a_med": 1.0,
            "b_med": 1.2,
            "c_med": c,
            "c_over_a": c,
            "c_over_b": c / 1.2,
            "flag": c / 1.2 > 1.25,
            "errors": {},
            "plan_ms": 3.0,
            "floor_med": 1.01,
            "c_over_floor": c / 1.01,
            "breakdown": {k: 2.0 + i for i, k in enumerate(PARTS)},
            "files": {"A": {"store_sales": 8}, "C": {"store_sales": 8}},
        }
        for n, c in ((1, 1.05), (2, 1.6))
    ]
    summary = {
        "queries_measured": 2,
        "queries_total": 2,
        "total_a_s": 2.0,
        "total_b_s": 2.4,
        "total_c_s": 2.65,
        "c_over_a": 1.325,
        "c_over_b": 1.104,
        "b_over_a": 1.2,
        "median_query_c_over_a": 1.3,
        "median_query_c_over_b": 1.1,
        "plan_ms_median": 3.0,
        "plan_ms_max": 3.0,
        "plan_s_total": 0.006,
        "overhead_per_query_s": 0.325,
        "breakdown": {k: {"median": 1.0, "total_s": 0.002} for k in PARTS},
        "total_floor_s": 2.55,
        "c_over_floor": 1.039,
        "overhead_ms_median": 40.0,
        "flagged": [{"id": 2, "c_over_b": 1.33, "a": 1.0, "b": 1.2, "c": 1.6}],
        "worst": [{"id": 2, "c_over_b": 1.33, "c_over_a": 1.6, "a": 1.0, "b": 1.2, "c": 1.6}],
        "product_bugs": [{"id": 3, "error": "StatementFailed: boom"}],
        "answers_differ_b_c": [],
        "c_reads_more_files": [],
        "skipping": [
            {
                "id": "skip_store_sales",
                "what": "literal",
                "files_a": 1,
                "files_b": 1,
                "files_c": 1,
                "partitions_a": None,
                "partitions_c": None,
                "same": True,
                "errors": {},
            }
        ],
        "targets": {
            "total_c_over_b": {"met": False},
            "total_c_over_a": {"met": False},
            "total_c_over_floor": {"met": False},
            "overhead_ms_median": {"met": False},
            "verify_ms_median": {"met": True},
            "no_query_over_1_25_b": {"met": False},
            "skipping_kept": {"met": True},
        },
    }
    results = {
        "date": "2026-01-01T00:00:00+00:00",
        "run_s": 12.0,
        "machine": harness.machine_info(),
        "versions": {"python": "3.11"},
        "load": {"before": 0.3, "after": 0.4},
        "steps": {
            "tpcds": {
                "command": "python benchmarks/tpcds_delta.py",
                "ok": True,
                "rc": 0,
                "seconds": 10.0,
            },
            "api": {"command": "python benchmarks/api.py", "ok": False, "rc": 2},
        },
        "tpcds": {
            "config": {"sf": 0.01, "rounds": 1, "fact_files": 8, "master": "local[2]"},
            "policy": {"row_filters": 34, "column_masks": 46, "tables": 24},
            "queries": queries,
            "summary": summary,
        },
        "rewrite": {
            "queries": 99,
            "rounds": 1,
            "p50_ms": 1.2,
            "p99_ms": 9.0,
            "max_ms": 12.0,
            "cold_p50_ms": 2.0,
            "cold_max_ms": 20.0,
            "slowest": [[64, 9.0]],
            "sqlglot_p50_ms": 1.0,
            "over_sqlglot": 1.2,
            "over_sqlglot_median": 1.1,
            "settled": True,
            "gc": {"gen2_n": 4, "gen2_max_ms": 9.8, "gen2_max_cpu_ms": 9.7, "gen2_total_ms": 35}
            | {"tracked_after": 15129, "frozen": 135341, "peak_rss_mb": 216.0},
        },
        "decisions": report.parse_decisions(DECISIONS_OUT),
        "audit": report.parse_audit(AUDIT_OUT),
        "scaling": scaling,
        "analysis": {
            "ms": {
                v: {"1 ref": 1.0 + i, "3 refs, one table": 3.0 + i, "3 tables": 4.0 + i}
                | {"per_extra_ref": 1.0}
                for i, v in enumerate(("pinned", "path"))
            }
        },
        "mapping": {
            "line": "Spark 4.2.0",
            "config": {"sf": 1.0, "rounds": 3, "users": 10_000, "per_user": 20, "keys": 7200}
            | {"key": "ss_hdemo_sk"},
            "load_before": 2.1,
            "load_after": 2.4,
            "targets": {"c_over_a": 1.15, "c_over_l": 1.10},
            "queries": {
                "by-key": {"a_ms": 1000.0, "l_ms": 1020.0, "c_ms": 1030.0, "s_ms": 1500.0}
                | {"c_over_a": 1.03, "c_over_l": 1030 / 1020, "met_c_over_a": True}
                | {"met_c_over_l": True, "c_inlined": True, "s_broadcasts": 1},
            },
        },
        "not_run": ["cluster"],
        "why": ["because"],
        "caveats": ["small"],
    }
    out = report.write_report(results, tmp_path / "REPORT.md", tmp_path / "charts")
    text = out.read_text()
    for png in ("tpcds_ratios", "rewrite_scaling", "decision_scaling", "audit_scaling"):
        path = tmp_path / "charts" / f"{png}.png"
        assert path.is_file() and path.stat().st_size > 1000, png
        assert f"(charts/{png}.png)" in text
    assert "C/A 1.325" in text and "C/B 1.104" in text
    assert "**NOT met**" in text and "q2 (1.33)" in text
    assert "q3: `StatementFailed: boom`" in text  # product bugs are listed
    assert "| tables referenced | 30 |" in text
    assert (  # the collector's pauses, which the rewrite's warm max depends on
        "(heap settled as the servers settle theirs, governance/runtime/heap.py): "
        "4 full collections, "
        "longest 9.8 ms (9.7 ms CPU), 35 ms in all; 15,129 live objects walked by each, "
        "135,341 frozen at start-up; peak RSS 216 MB."
    ) in text
    assert "10,000" in text and "61,234 lines/s" in text
    assert "C/A' (governed / raw Spark with the bench user's filters" in text
    assert "| 1.039 | **NOT met** |" in text  # C/A' against 1.02
    assert "Rewrite / sqlglot's own parse + generate, same run (total) | <= 1.3 | 1.20" in text
    per_query = "Rewrite / sqlglot, per-query median, same run (issue 31: one walk)"
    assert f"{per_query} | <= 1.3 | 1.10" in text
    assert "| q1 | 2.0 | 3.0 | 4.0 | 5.0 | 6.0 | 7.0 | 8.0 |" in text  # the breakdown row
    assert "| api | `python benchmarks/api.py` | **FAILED** (exit 2) |" in text
    assert "| path | 2.0 | 4.0 | 5.0 | 1.0 |" in text  # Spark's analysis, read by path
    mapping = (
        "Mapping-table filter, Spark 4.2.0 (10,000 users), by-key: C / a literal policy, L "
        "(issue 31)"
    )
    assert f"| {mapping} | <= 1.1 | 1.010 (C 1030 ms) | **met** |" in text
    assert "| by-key | 1000 | 1020 | 1030 | 1500 | 1.030 | 1.010 | 1.500 | True | 1 |" in text
    assert "not run: cluster." in text  # a partial run says which steps it left out
