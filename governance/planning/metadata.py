"""Session and metadata statements (USE, DESCRIBE, SHOW [COLUMNS], DESCRIBE HISTORY): answered
from the catalog and the policies, showing only what the user may see; only DESCRIBE
HISTORY reads anything at the Spark edge (the Delta log, see `ReadHistory`).
"""

from __future__ import annotations

import re

from sqlglot import exp

from governance.errors import LakegateError, Refused
from governance.planning.context import PlanningContext
from governance.planning.planned import Planned, ReadHistory
from governance.policy.masks import masked_type
from governance.sql.resolve import Namespace, checked_parts, table_parts

#: SHOW TABLES/SCHEMAS/CATALOGS, which sqlglot does not parse into a tree; matched on text.
SHOW = re.compile(
    r"^\s*SHOW\s+(TABLES|SCHEMAS|DATABASES|CATALOGS)(?:\s+(?:FROM|IN)\s+([`\w.]+))?\s*;?\s*$",
    re.IGNORECASE,
)
_NAME = r"((?:`(?:[^`]|``)+`|[\w-]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w-]+))*)"
#: SHOW COLUMNS {IN|FROM} t [{IN|FROM} schema], which sqlglot does not parse; the names
#: matched here are parsed by sqlglot and checked like every other name.
SHOW_COLUMNS = re.compile(
    rf"^\s*SHOW\s+COLUMNS\s+(?:FROM|IN)\s+{_NAME}(?:\s+(?:FROM|IN)\s+{_NAME})?\s*;?\s*$",
    re.IGNORECASE,
)


def plan_use(ctx: PlanningContext, stmt: exp.Use) -> Planned:
    """USE [CATALOG]: the session's namespace changes once the statement is on record."""
    kind = stmt.args.get("kind").name.upper() if stmt.args.get("kind") else ""
    parts = [p.lower() for p in table_parts(stmt.this)]
    if kind == "CATALOG":
        if len(parts) != 1 or not ctx.catalog.has_catalog(parts[0]):
            raise LakegateError(f"catalog {'.'.join(parts)} does not exist")
        ns = Namespace(parts[0], "default")
    else:
        if len(parts) == 1:
            ns = Namespace(ctx.ns.catalog, parts[0])
        elif len(parts) == 2:
            ns = Namespace(parts[0], parts[1])
        else:
            raise LakegateError(f"USE {'.'.join(parts)}: too many name parts")
        if not ctx.catalog.has_schema(ns.catalog, ns.schema):
            raise LakegateError(f"schema {ns.catalog}.{ns.schema} does not exist")
    return Planned(cmd="use", local_rows=[], local_schema="result string", namespace=ns)


def plan_describe(ctx: PlanningContext, stmt: exp.Describe) -> Planned:
    """DESCRIBE TABLE: visible columns only, masked ones with the type the user sees."""
    style = (stmt.args.get("style") or "").upper()
    if style == "HISTORY" and not stmt.args.get("partition") and not stmt.args.get("as_json"):
        return _describe_history(ctx, stmt.this)
    if style in ("HISTORY", "DETAIL") or stmt.args.get("partition"):
        raise Refused(f"DESCRIBE {style or 'PARTITION'} is not governed by Lakegate")
    kind = (stmt.args.get("kind") or "TABLE").upper()
    if kind != "TABLE":
        raise Refused(f"DESCRIBE {kind} is not governed by Lakegate")
    node = stmt.this
    if not isinstance(node, exp.Table):
        raise Refused("DESCRIBE of a query is not governed")
    _, reads = ctx.reads(node)
    ref, access = reads[0]
    planned = Planned(cmd="describe", target=access, target_name=ref.info.full_name)
    rows = []
    for name in access.visible_columns:
        col = ref.info.column(name)
        assert col is not None
        applied = access.masks.get(name.lower())
        if applied is None:
            rows.append((col.name, col.type_text, col.comment))
            continue
        rows.append(
            (
                col.name,
                masked_type(applied.mask.mask, col.type_text),
                f"masked ({applied.mask.mask})" + (f"; {col.comment}" if col.comment else ""),
            )
        )
    planned.local_rows = rows
    planned.local_schema = "col_name string, data_type string, comment string"
    return planned


def _describe_history(ctx: PlanningContext, node: exp.Expression) -> Planned:
    """DESCRIBE HISTORY: `select` on the table, as DESCRIBE; what a commit tells about rows
    or values the user cannot see is left out (see `ReadHistory`)."""
    if not isinstance(node, exp.Table):
        raise Refused("DESCRIBE HISTORY takes a table name")
    _, reads = ctx.reads(node)
    ref, access = reads[0]
    if ref.info.full_name in ctx.derived:
        raise Refused(f"DESCRIBE HISTORY is not available on {ref.info.full_name}")
    planned = Planned(cmd="describe", target=access, target_name=ref.info.full_name)
    whole = not (access.row_filters or access.hidden_columns or access.masks)
    planned.history = ReadHistory(
        ref.info.location, parameters=whole, metrics=not access.row_filters
    )
    return planned


def plan_show_columns(ctx: PlanningContext, m: re.Match[str]) -> Planned:
    """SHOW COLUMNS: the columns DESCRIBE shows (visible ones only), under the same
    `select` privilege."""
    node = _name_node(m.group(1))
    if m.group(2) is not None:
        if node.args.get("db") is not None:
            raise Refused("SHOW COLUMNS: name the schema either in the table name or after it")
        schema = _name_node(m.group(2))
        node.set("db", schema.this)
        node.set("catalog", schema.args.get("db"))
    table_parts(node)
    _, reads = ctx.reads(node)
    ref, access = reads[0]
    planned = Planned(cmd="show", target=access, target_name=ref.info.full_name)
    planned.local_rows = [(c,) for c in access.visible_columns]
    planned.local_schema = "col_name string"
    return planned


def _name_node(text: str) -> exp.Table:
    """A (possibly qualified, backticked) name from statement text, as sqlglot reads it."""
    try:
        node = exp.to_table(text, dialect="spark")
    except Exception:
        raise Refused(f"invalid name: {text[:100]!r}") from None
    if not isinstance(node, exp.Table) or set(node.args) - {"this", "db", "catalog"}:
        raise Refused(f"invalid name: {text[:100]!r}")
    return node


def plan_show(ctx: PlanningContext, m: re.Match[str]) -> Planned:
    """SHOW TABLES/SCHEMAS/CATALOGS (matched on text): only what holds a visible table."""
    what, where = m.group(1).upper(), m.group(2)
    visible = [
        t for t in ctx.catalog.tables() if ctx.enforcer.table_access(ctx.ident, t).can_select
    ]
    planned = Planned(cmd="show")
    if what == "TABLES":
        parts = checked_parts((where or "").replace("`", "").split(".")) if where else []
        c, s = parts if len(parts) == 2 else [ctx.ns.catalog, parts[0] if parts else ctx.ns.schema]
        rows = [
            (t.catalog, t.schema, t.name)
            for t in visible
            if t.catalog == c.lower() and t.schema == s.lower()
        ]
        planned.local_rows = rows
        planned.local_schema = "catalog string, namespace string, tableName string"
    elif what in ("SCHEMAS", "DATABASES"):
        c = checked_parts([(where or ctx.ns.catalog).replace("`", "")])[0].lower()
        rows = sorted({(t.schema,) for t in visible if t.catalog == c})
        planned.local_rows = rows
        planned.local_schema = "namespace string"
    else:
        planned.local_rows = sorted({(t.catalog,) for t in visible})
        planned.local_schema = "catalog string"
    return planned
