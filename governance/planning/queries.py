"""Queries (SELECT, set operations, VALUES): every table read becomes its governed view."""

from __future__ import annotations

from sqlglot import exp

from governance.planning.context import PlanningContext
from governance.planning.planned import Planned
from governance.rewrite.aggregation import enforce_aggregation

#: The statement types planned as queries.
QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery, exp.Values)


def plan_query(ctx: PlanningContext, stmt: exp.Expression) -> Planned:
    """Every table read becomes its governed view; the rest of the query is the user's."""
    planned = Planned(cmd="select", is_query=True)
    walked = ctx.walked  # the statement's one walk, read by each step while it is current
    stmt = ctx.govern(stmt, walked)
    _, reads = ctx.reads(stmt, walked=walked)
    if enforce_aggregation(stmt, reads, ctx.user) and walked is not None:
        walked.stale = True  # the guards added HAVING clauses and counters
    stmt = ctx.views_sql(stmt, reads, planned, walked=walked, aggregated=True)
    planned.sql = ctx.generate(stmt, planned, query=True, walked=walked)
    return planned
