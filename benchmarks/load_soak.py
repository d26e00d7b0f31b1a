"""The soak's verdict (issue 39 item 4), from load.py's soak samples: each measure against
its rule, printed met / not met.

* memory (Python and JVM RSS, JVM heap used, Python objects): a plateau, growth over the
  run's last half under 5 % (load.py's `growth`: the mean of the last tenth of the samples
  against the highest mean of a tenth before the last half, the level already reached);
* file descriptors and threads (Python process and JVM): the same rule, no growth;
* bounded caches (open Connect sessions, plan cache entries, verified Datasets the gateway
  keeps in the backend): the largest sample within the configured bound (load_server.py's
  `bounds`), and the same plateau rule.
"""

from __future__ import annotations

from typing import Any

SOAK_GROWTH = 0.05  # issue 39: growth over the soak's last half under 5 %
PLATEAU = ("rss_py_mb", "rss_jvm_mb", "heap_mb", "py_objects")
NO_GROWTH = ("fds_py", "fds_jvm", "threads_py", "threads_jvm")
BOUNDED = ("sessions", "plan_cache", "kept")


def verdict(soak: dict[str, Any], bounds: dict[str, float]) -> list[dict[str, Any]]:
    """One row per measure: its growth, first/last/max samples, bound, and whether met."""
    rows = []
    for name, values in soak["series"].items():
        g = soak["growth"].get(name)
        bound = bounds.get(name)
        grew_ok = g is not None and g < SOAK_GROWTH
        # a cache that sits at zero or one entry has nothing to grow: small absolute
        # changes (0 -> 2 sessions) are not growth of a bounded cache
        if name in BOUNDED and values and max(values) <= 2:
            grew_ok = True
        within = bound is None or (bool(values) and max(values) <= bound)
        rule = "bound and plateau" if name in BOUNDED else "plateau"
        rows.append(
            {
                "measure": name,
                "rule": rule,
                "growth": g,
                "first": values[0] if values else None,
                "last": values[-1] if values else None,
                "max": max(values) if values else None,
                "bound": bound,
                "met": grew_ok and within,
            }
        )
    return rows


def print_verdict(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        g = "-" if r["growth"] is None else f"{r['growth']:+.1%}"
        b = "" if r["bound"] is None else f" / bound {r['bound']:g}"
        print(
            f"  {r['measure']:<12} first {r['first'] or 0:9.0f} last {r['last'] or 0:9.0f} "
            f"max {r['max'] or 0:9.0f}{b}  last-half growth {g}: "
            f"{'MET' if r['met'] else 'NOT MET'} ({r['rule']})"
        )


def markdown(soak: dict[str, Any], add: Any) -> None:
    """The soak's table for REPORT.md: each measure, its bound, its growth, met or not."""
    rows = soak.get("verdict")
    if rows is None:  # a run from before the bounds were sampled: growth only
        rows = verdict(soak, {})
    add("| measure | first | last | max | bound | last-half growth | rule | met |")
    add("|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = "-" if r["growth"] is None else f"{r['growth']:+.1%}"
        b = "-" if r["bound"] is None else f"{r['bound']:,.0f}"
        add(
            f"| {r['measure']} | {_num(r['first'])} | {_num(r['last'])} | {_num(r['max'])} | "
            f"{b} | {g} | {r['rule']} | {'**met**' if r['met'] else '**NOT met**'} |"
        )


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"
