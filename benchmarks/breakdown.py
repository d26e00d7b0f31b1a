"""Where a governed statement's time goes (issue 14): each step of the real pipeline timed
on its own, from outside the session, so nothing in governance/ changes for the benchmark.

The steps are the ones `GovernedSession._run` and `_execute` take, called the same way:
the session's own `Planner`, Spark's parse + analysis of the rewritten text (and of the raw
text, for comparison), `verify_plan` with the session's cached view analyser, the optimiser,
execution, and the audit record written through the session. A step that raises fails the
benchmark (benchmarks/harness.py): a breakdown that records errors shows nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from benchmarks.harness import ScenarioFailed, timed_ms

PARTS = (
    "plan_ms",
    "analyze_a_ms",
    "analyze_c_ms",
    "verify_ms",
    "optimize_a_ms",
    "optimize_ms",
    "execute_a_ms",
    "execute_ms",
    "audit_ms",
)


def breakdown_ms(spark: Any, session: Any, sql: str) -> dict[str, float]:
    """Milliseconds per pipeline step for one query as the session's user, plus the raw
    text's analysis, optimisation and execution (A's steps) for comparison. Run after the
    query has been run governed at least once, so the verifier's view cache is warm, as in
    steady state."""
    from audit import statement_hash
    from governance.verify.guard import query_frame
    from governance.verify.plan import verify_plan

    out: dict[str, float] = {}
    out["plan_ms"], planned = timed_ms(lambda: session._planner().plan(sql))
    if not planned.is_query or planned.sql is None:
        raise ScenarioFailed(f"breakdown needs a query, got {planned.cmd}")
    out["analyze_a_ms"], raw = timed_ms(lambda: spark.sql(sql))
    raw_qe = raw._jdf.queryExecution()
    out["optimize_a_ms"], _ = timed_ms(raw_qe.optimizedPlan)
    out["execute_a_ms"], _ = timed_ms(raw.collect)
    # parsed as the governed path parses it (governance/verify/guard.py)
    out["analyze_c_ms"], df = timed_ms(lambda: query_frame(spark, planned.sql))
    qe = df._jdf.queryExecution()
    if session.lg.config.verify_plans:
        out["verify_ms"], _ = timed_ms(
            lambda: verify_plan(qe.analyzed(), planned.expected, session.lg.analyze_view)
        )
    else:
        raise ScenarioFailed("plan verification is off in this configuration: nothing to time")
    out["optimize_ms"], _ = timed_ms(qe.optimizedPlan)
    out["execute_ms"], _ = timed_ms(df.collect)

    def audit() -> None:  # the statement's outcome line, as the session writes it
        session.record.begin(uuid.uuid4().hex, statement_hash(sql), session.lg.policy_version)
        session.record.ok(planned)

    out["audit_ms"], _ = timed_ms(audit)
    out["rewritten_chars"] = float(len(planned.sql))
    missing = [k for k in PARTS if not isinstance(out.get(k), float)]
    if missing:
        raise ScenarioFailed(f"breakdown is missing {missing}")
    return out
