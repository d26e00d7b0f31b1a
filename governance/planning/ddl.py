"""DDL (CREATE CATALOG/SCHEMA/TABLE [AS SELECT], DROP TABLE): decided here, effects
returned as declarative actions that the session runs after the intent record.
"""

from __future__ import annotations

import re

from sqlglot import exp

from catalog.catalog import CatalogError
from governance.errors import AccessDenied, LakegateError, Refused
from governance.planning.context import PlanningContext, delta_table
from governance.planning.planned import (
    CreateCatalog,
    CreateSchema,
    DropTable,
    Planned,
    RegisterTable,
)
from governance.resolve import checked_parts, denied_or_missing, qualify_name, table_parts

#: CREATE CATALOG, which sqlglot does not parse; matched on the statement's text.
CREATE_CATALOG = re.compile(
    r"^\s*CREATE\s+CATALOG\s+(IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?\s*;?\s*$", re.IGNORECASE
)
_ALLOWED_TABLE_PROPS = (
    exp.FileFormatProperty,
    exp.PartitionedByProperty,
    exp.SchemaCommentProperty,
)


def plan_create_catalog(ctx: PlanningContext, m: re.Match[str]) -> Planned:
    """CREATE CATALOG (matched on text): MANAGE on `c.*.*`; the catalog is made by an action."""
    name, if_not_exists = m.group(2), bool(m.group(1))
    checked_parts([name])
    ok, ids = ctx.enforcer.has_privilege(ctx.ident, "manage", name, "*", "*")
    ctx.decided[f"{name.lower()}.*.*"] = ids
    if not ok:
        raise AccessDenied(
            f"access denied: user {ctx.user} may not create catalog "
            f"{name.lower()} (needs MANAGE on {name.lower()}.*.*)",
            cmd="create",
            tables=(f"{name.lower()}.*.*",),
        )
    return Planned(
        cmd="create",
        before=(CreateCatalog(name, if_not_exists),),
        local_rows=[],
        local_schema="result string",
        target_name=None,
        decided_by=ids,
    )


def plan_create(ctx: PlanningContext, stmt: exp.Create) -> Planned:
    """CREATE SCHEMA or a managed Delta CREATE TABLE [AS SELECT]; CTAS stores what the user
    sees (masked values), and the new table is registered by an action after Spark made it."""
    kind = (stmt.args.get("kind") or "").upper()
    if kind in ("SCHEMA", "DATABASE"):
        return _create_schema(ctx, stmt)
    if kind != "TABLE":
        raise Refused(
            f"CREATE {kind or '?'} is not governed by Lakegate "
            "(views, functions and temporary objects are shared across users)"
        )
    for key in ("clone", "replace", "unique", "indexes", "begin", "end", "shallow"):
        value = stmt.args.get(key)
        if value:
            raise Refused(f"CREATE TABLE with {key.upper()} is not governed")
    props = stmt.args.get("properties")
    for p in props.expressions if props else []:
        if not isinstance(p, _ALLOWED_TABLE_PROPS):
            raise Refused(f"CREATE TABLE property {p.sql('spark')!r} is not governed")
        if isinstance(p, exp.FileFormatProperty) and p.name.lower() != "delta":
            raise Refused("only Delta tables can be created (USING delta)")
    schema = stmt.this
    node = schema.this if isinstance(schema, exp.Schema) else schema
    c, s, t = qualify_name(table_parts(node), ctx.ns)
    name = f"{c}.{s}.{t}".lower()
    if not ctx.catalog.has_schema(c, s):
        raise LakegateError(f"schema {c}.{s} does not exist")
    decisions = [ctx.enforcer.has_privilege(ctx.ident, p, c, s, t) for p in ("create", "manage")]
    ok = any(d[0] for d in decisions)
    ids = tuple(dict.fromkeys(i for d in decisions for i in d[1]))
    ctx.decided[name] = ids
    if not ok:
        raise AccessDenied(
            f"access denied: user {ctx.user} has no CREATE privilege on schema {c}.{s}",
            cmd="create",
            tables=(name,),
        )
    exists = ctx.catalog.table(c, s, t) is not None
    if_not_exists = bool(stmt.args.get("exists"))
    if exists and not if_not_exists:
        raise LakegateError(f"table {name} already exists")
    try:
        location = ctx.catalog.managed_location(c, s, t)
    except CatalogError as e:
        raise Refused(f"CREATE TABLE {name} refused: {e}") from None
    planned = Planned(cmd="create", target_name=name, decided_by=ids)
    if exists:
        planned.local_rows, planned.local_schema = [], "result string"
        return planned
    query = stmt.expression
    partition = next(
        (
            p
            for p in (props.expressions if props else [])
            if isinstance(p, exp.PartitionedByProperty)
        ),
        None,
    )
    comment = next(
        (
            p
            for p in (props.expressions if props else [])
            if isinstance(p, exp.SchemaCommentProperty)
        ),
        None,
    )
    if query is not None:
        if isinstance(schema, exp.Schema):
            raise Refused("CREATE TABLE AS SELECT with a column list is not governed")
        query = ctx.govern(query)
        _, reads = ctx.reads(query)
        planned.dst = name
        wrapper = exp.Select(expressions=[exp.Star()]).from_(
            exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("__lg_q")))
        )
        wrapper = ctx.views_sql(wrapper, reads, planned, scan=query)
        create = _create_delta(location, partition, wrapper)
        planned.sql = ctx.generate(create, planned)
    else:
        if not isinstance(schema, exp.Schema) or not schema.expressions:
            raise Refused("CREATE TABLE needs a column list or AS SELECT")
        cols = []
        for cd in schema.expressions:
            if not isinstance(cd, exp.ColumnDef):
                raise Refused(f"CREATE TABLE element {cd.sql('spark')!r} is not governed")
            for con in cd.args.get("constraints") or []:
                allowed = exp.NotNullColumnConstraint | exp.CommentColumnConstraint
                if not isinstance(con.kind, allowed):
                    raise Refused(f"column constraint {con.sql('spark')!r} is not governed")
            cols.append(cd.copy())
        planned.sql = _create_delta(location, partition, None, cols).sql("spark")
    comment_text = comment.this.name if comment is not None else None
    domain = ctx.enforcer.policy_set.domain_of_schema(c, s)
    planned.after = (RegisterTable(c, s, t, location, domain, comment_text),)
    return planned


def _create_schema(ctx: PlanningContext, stmt: exp.Create) -> Planned:
    """CREATE SCHEMA: CREATE or MANAGE on `c.s.*`; the schema is made by an action."""
    node = stmt.this
    parts = table_parts(node)
    if len(parts) == 1:
        c, s = ctx.ns.catalog, parts[0]
    elif len(parts) == 2:
        c, s = parts
    else:
        raise Refused(f"schema name {'.'.join(parts)} has too many parts")
    c, s = c.lower(), s.lower()
    if stmt.args.get("properties"):
        raise Refused("CREATE SCHEMA with properties or LOCATION is not governed")
    decisions = [ctx.enforcer.has_privilege(ctx.ident, p, c, s, "*") for p in ("create", "manage")]
    ok = any(d[0] for d in decisions)
    ids = tuple(dict.fromkeys(i for d in decisions for i in d[1]))
    ctx.decided[f"{c}.{s}"] = ids
    if not ok:
        raise AccessDenied(
            f"access denied: user {ctx.user} may not create schema {c}.{s} "
            f"(needs CREATE or MANAGE on {c}.{s}.*)",
            cmd="create",
            tables=(f"{c}.{s}",),
        )
    if_not_exists = bool(stmt.args.get("exists"))
    return Planned(
        cmd="create",
        before=(CreateSchema(c, s, if_not_exists),),
        local_rows=[],
        local_schema="result string",
        target_name=f"{c}.{s}",
        decided_by=ids,
    )


def plan_drop(ctx: PlanningContext, stmt: exp.Drop) -> Planned:
    """DROP TABLE: MANAGE on the table; unregistering and file removal are an action."""
    kind = (stmt.args.get("kind") or "").upper()
    if kind != "TABLE":
        raise Refused(f"DROP {kind or '?'} is not governed by Lakegate")
    tables = stmt.args.get("tables") or []
    if len(tables) != 1:
        raise Refused("DROP TABLE takes one table")
    node = tables[0]
    c, s, t = qualify_name(table_parts(node), ctx.ns)
    info = ctx.catalog.table(c, s, t)
    name = f"{c}.{s}.{t}".lower()
    ok, ids = ctx.enforcer.has_privilege(ctx.ident, "manage", c, s, t)
    ctx.decided[name] = ids
    if info is None:
        if stmt.args.get("exists") and ok:
            return Planned(
                cmd="drop",
                local_rows=[],
                local_schema="result string",
                target_name=name,
                decided_by=ids,
            )
        raise denied_or_missing(ctx.user, "manage", name)
    if not ok:
        raise denied_or_missing(ctx.user, "manage", name)
    return Planned(
        cmd="drop",
        before=(DropTable(c, s, t, info.location),),
        local_rows=[],
        local_schema="result string",
        target_name=name,
        decided_by=ids,
    )


def _create_delta(
    location: str,
    partition: exp.Expression | None,
    query: exp.Expression | None,
    columns: list[exp.Expression] | None = None,
) -> exp.Create:
    """`CREATE TABLE delta.`<location>` [(columns)] USING delta [PARTITIONED BY ...]
    [AS query]` as a tree: nothing the user wrote is pasted into the statement's text."""
    target: exp.Expression = delta_table(location)
    if columns is not None:
        target = exp.Schema(this=target, expressions=columns)
    props: list[exp.Expression] = [exp.FileFormatProperty(this=exp.var("delta"))]
    if partition is not None:
        props.append(partition.copy())
    return exp.Create(
        kind="TABLE", this=target, properties=exp.Properties(expressions=props), expression=query
    )
