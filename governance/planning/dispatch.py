"""The statement kinds Lakegate governs, as a table: statement type -> (audit cmd, planner).

The kinds are an allow-list: queries, INSERT, UPDATE, DELETE, MERGE, CREATE
CATALOG/SCHEMA/TABLE [AS SELECT], DROP TABLE, ALTER TABLE, COMMENT ON TABLE, USE, DESCRIBE,
SHOW, and the session's temporary views (views.py: CREATE TEMP VIEW / DROP VIEW, and their
expansion before any other kind is planned). Everything else is refused, never passed
through. A new kind is one new family module and one entry below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from catalog.catalog import Catalog
from catalog.model import TableInfo
from governance.errors import Refused
from governance.planning import ddl, metadata, queries, views, writes
from governance.planning.context import PlanningContext
from governance.planning.planned import Planned
from governance.policy.enforcer import AmbiguousMask, PolicyEnforcer
from governance.rewrite.dynamic_views import PolicySql
from governance.sql.parse import parse_walked
from governance.sql.resolve import Namespace
from governance.sql.walk import collect


@dataclass(frozen=True)
class Kind:
    """A governed statement kind: its audit cmd and the function that plans it."""

    cmd: str
    plan: Callable[[PlanningContext, Any], Planned]


#: Parsed statements, by sqlglot type (exact: no registered type has subclasses).
PLANNERS: dict[type[exp.Expression], Kind] = {
    **dict.fromkeys(queries.QUERY_TYPES, Kind("select", queries.plan_query)),
    exp.Insert: Kind("insert", writes.plan_insert),
    exp.Update: Kind("update", writes.plan_update),
    exp.Delete: Kind("delete", writes.plan_delete),
    exp.Merge: Kind("merge", writes.plan_merge),
    exp.Create: Kind("create", ddl.plan_create),
    exp.Drop: Kind("drop", ddl.plan_drop),
    exp.Use: Kind("use", metadata.plan_use),
    exp.Describe: Kind("describe", metadata.plan_describe),
    exp.Alter: Kind("alter", ddl.plan_alter),
    exp.Comment: Kind("alter", ddl.plan_comment),
}
#: Statements sqlglot does not parse into a tree, matched on their whole text first.
TEXT_PLANNERS: tuple[tuple[re.Pattern[str], Kind], ...] = (
    (metadata.SHOW, Kind("show", metadata.plan_show)),
    (metadata.SHOW_COLUMNS, Kind("show", metadata.plan_show_columns)),
    (ddl.CREATE_CATALOG, Kind("create", ddl.plan_create_catalog)),
)
# Statement classes named in a refusal by their type; anything else by its first word.
_NAMED_KINDS = (
    exp.DDL,
    exp.DML,
    exp.Command,
    exp.Set,
    exp.Cache,
    exp.Uncache,
    exp.Refresh,
    exp.Analyze,
)


class Planner:
    """Plans one statement for one user; `cmd`, `decided` and `filters` (what planning
    learnt, also when it refused) feed the session's audit lines."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        enforcer: PolicyEnforcer,
        policy_sql: PolicySql,
        user: str,
        namespace: Namespace,
        derived: dict[str, str] | None = None,
        temp_views: views.TempViews | None = None,
        pin: Callable[[TableInfo], str] | None = None,
        pin_view: Callable[[str, str], str | None] | None = None,
        groups: frozenset[str] = frozenset(),
    ) -> None:
        """`derived`: full table name -> the SQL relation it is read from (layer-owned temp
        views, e.g. the audit log), instead of its Delta location; `temp_views`: the
        session's temporary views (None: the caller has no session, views are refused);
        `pin`, `pin_view`: see PlanningContext."""
        self.temp_views = temp_views
        self.ctx = PlanningContext(
            catalog=catalog,
            enforcer=enforcer,
            policy_sql=policy_sql,
            user=user,
            namespace=namespace,
            derived=derived,
            pin=pin,
            pin_view=pin_view,
            groups=groups,
        )

    @property
    def cmd(self) -> str:
        return self.ctx.cmd

    @property
    def decided(self) -> dict[str, tuple[str, ...]]:
        return self.ctx.decided

    @property
    def filters(self) -> dict[str, tuple[str, ...]]:
        return self.ctx.filters

    def plan(self, statement: str | bytes) -> Planned:
        """The statement's plan, against one catalog generation (checked once, on entry)."""
        with self.ctx.catalog.pinned():
            planned = self._plan(statement)
        planned.statement = statement  # the caller's words, for readable errors
        return planned

    def _plan(self, statement: str | bytes) -> Planned:
        ctx = self.ctx
        if isinstance(statement, str):
            for pattern, kind in TEXT_PLANNERS:
                m = pattern.match(statement)
                if m:
                    ctx.cmd = kind.cmd
                    return kind.plan(ctx, m)
        stmt, walked = parse_walked(statement)
        if walked.hints:
            for hint in walked.hints:
                hint.pop()  # hints name tables; they only tune plans, so they are dropped
            walked = collect(stmt)  # without what the hints held
        if views.is_view_statement(stmt):
            return views.plan_view_statement(ctx, stmt, self.temp_views)
        expanded = views.expand(stmt, self.temp_views)
        if expanded is not stmt:  # a temp view's query went in: the statement was re-parsed
            stmt, walked = expanded, collect(expanded)
        kind = PLANNERS.get(type(stmt))
        if kind is None:
            ctx.cmd = "refused"
            raise Refused(
                f"statement kind {_kind_name(stmt, statement)} is not governed by Lakegate"
            )
        ctx.cmd = kind.cmd
        ctx.walked = walked  # of this tree: a step finds it current or walks again
        try:
            return kind.plan(ctx, stmt)
        except AmbiguousMask as e:
            raise Refused(f"policy conflict, statement refused: {e}") from None


def _kind_name(stmt: exp.Expression, statement: str | bytes) -> str:
    """How a refusal names the statement kind: its sqlglot type, else its first word."""
    if isinstance(stmt, _NAMED_KINDS):
        return type(stmt).__name__.upper()
    text = statement.decode("utf-8", "replace") if isinstance(statement, bytes) else statement
    return (text.split(None, 1) or ["?"])[0].upper()
