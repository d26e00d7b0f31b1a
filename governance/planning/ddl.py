"""DDL (CREATE CATALOG/SCHEMA/TABLE [AS SELECT], DROP TABLE, ALTER TABLE, COMMENT ON
TABLE): decided here, effects returned as declarative actions that the session runs after
the intent record.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlglot import exp

from catalog.catalog import CatalogError
from catalog.model import TableInfo
from governance.errors import AccessDenied, LakegateError, Refused
from governance.planning.context import PlanningContext, delta_table
from governance.planning.lineage import plan_carry
from governance.planning.planned import (
    AlterTable,
    CreateCatalog,
    CreateSchema,
    DropTable,
    Planned,
    RegisterTable,
    SetAside,
)
from governance.policy.tag_rights import tag_changes
from governance.policy.tag_state import governed_state
from governance.sql.resolve import (
    TableRef,
    checked_parts,
    denied_or_missing,
    qualify_name,
    table_parts,
)

#: CREATE CATALOG, which sqlglot does not parse; matched on the statement's text.
CREATE_CATALOG = re.compile(
    r"^\s*CREATE\s+CATALOG\s+(IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?\s*;?\s*$", re.IGNORECASE
)
#: A table property a manage holder may set: a plain dotted key outside the namespaces
#: that change how the table is read or stored (Delta's features and protocol, Spark's
#: reserved keys and data source options).
_PROPERTY_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
_RESERVED_PROPERTY_PREFIXES = ("delta.", "spark.", "option.", "parquet.", "hive.", "external.")
_RESERVED_PROPERTIES = frozenset(
    {"location", "provider", "owner", "comment", "external", "is_managed_location", "path"}
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
        target_name=name.lower(),  # on its audit line: recovery asks the catalog for it
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
        if not exists:  # before Spark writes a file there (the registration checks again)
            ctx.catalog.check_location_free(c, s, t, location)
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
        sources = [(r.node, r.info, a.visible_columns) for r, a in reads]
        planned.carry = plan_carry(ctx.enforcer.policy_set, query, sources, name)
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
    if Path(location).exists():  # crash leftovers under an unregistered name: see SetAside
        planned.before = (SetAside(location),)
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
    _drop_rights(ctx, info)
    return Planned(
        cmd="drop",
        before=(DropTable(c, s, t, info.location),),
        local_rows=[],
        local_schema="result string",
        target_name=name,
        decided_by=ids,
    )


def _drop_rights(ctx: PlanningContext, info: TableInfo) -> None:
    """Dropping a table removes its governed tags (a table created again under the name
    starts without them), so it needs APPLY_TAG on each, as removing them with ALTER does:
    a manager cannot clear a copy's tags by dropping it and writing it back."""
    try:
        state = governed_state(info)
    except ValueError:
        raise Refused(
            f"governed tags of table {info.full_name} cannot be read from the catalog; "
            "DROP TABLE is refused"
        ) from None
    ids: list[str] = []
    for column, tags in sorted(state.items()):
        for tag in sorted(tags):
            ok, by = ctx.enforcer.tag_right(ctx.ident, info, tag)
            if not ok:
                raise AccessDenied(
                    f"access denied: user {ctx.user} may not drop {info.full_name}: it "
                    f"removes governed tag {tag} of column {column} (needs APPLY_TAG on "
                    f"tag {tag}; MANAGE is not enough)",
                    cmd="drop",
                    tables=(info.full_name,),
                    policies=(*by, *ctx.decided.get(info.full_name, ())),
                )
            ids += by
    name = info.full_name
    ctx.decided[name] = tuple(dict.fromkeys((*ctx.decided.get(name, ()), *ids)))


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


def plan_alter(ctx: PlanningContext, stmt: exp.Alter) -> Planned:
    """ALTER TABLE: SET TBLPROPERTIES, ALTER COLUMN c COMMENT, ADD COLUMNS; MANAGE on the
    table. The statement runs on the table's Delta location (generated from a tree) as an
    action after the intent record, and the catalog entry is re-read from Delta."""
    kind = (stmt.args.get("kind") or "").upper()
    if kind != "TABLE":
        raise Refused(f"ALTER {kind or '?'} is not governed by Lakegate")
    for key in ("exists", "only", "cluster", "not_valid", "options", "partition", "cascade"):
        if stmt.args.get(key):
            raise Refused(f"ALTER TABLE with {key.upper().replace('_', ' ')} is not governed")
    actions = stmt.args.get("actions") or []
    if not actions:
        raise Refused("ALTER TABLE without an action is not governed")
    for a in actions:
        _check_form(a)
    ref = _managed_table(ctx, stmt.this, "alter")
    info = ref.info
    hidden = {h.lower() for h in ctx.enforcer.table_access(ctx.ident, info).hidden_columns}
    governed = [_alter_action(ctx, a, ref, hidden) for a in actions]
    state = _tag_rights(ctx, info, governed)
    alter = exp.Alter(this=delta_table(info.location), kind="TABLE", actions=governed)
    action = AlterTable(
        info.catalog, info.schema, info.name, info.location, alter.sql("spark"), tags=state
    )
    return _altered(ctx, info.full_name, action)


def _tag_rights(
    ctx: PlanningContext, info: TableInfo, actions: list[exp.Expression]
) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """Every tag an ALTER adds to or removes from a column needs APPLY_TAG on that tag
    (governance.policy.tag_rights; MANAGE is not enough) and, where the policies declare
    `governed_tags`, an added tag must be one of them. Returns the columns' new governed
    state, or None when no tag moves."""
    props = [
        (p.this.this, p.args["value"].this)
        for a in actions
        if isinstance(a, exp.AlterSet)
        for p in a.expressions[0].expressions
    ]
    changes = [c for c in tag_changes(info, props) if c.added or c.removed]
    if not changes:
        return None
    vocabulary = ctx.enforcer.policy_set.governed_tags
    ids: list[str] = []
    moves = [
        (verb, tag, change)
        for verb in ("remove", "add")
        for change in changes
        for tag in sorted(change.removed if verb == "remove" else change.added)
    ]
    for verb, tag, change in moves:
        ok, by = ctx.enforcer.tag_right(ctx.ident, info, tag)
        if not ok:
            raise AccessDenied(
                f"access denied: user {ctx.user} may not {verb} tag {tag} "
                f"{'on' if verb == 'add' else 'from'} column {change.column} of "
                f"{info.full_name} (needs APPLY_TAG on tag {tag}; MANAGE is not enough)",
                cmd="alter",
                tables=(info.full_name,),
                policies=(*by, *ctx.decided.get(info.full_name, ())),
            )
        if verb == "add" and vocabulary and tag not in vocabulary:
            raise AccessDenied(
                f"tag {tag} is not a governed tag (the policies' governed_tags); "
                f"column {change.column} of {info.full_name} keeps its tags",
                cmd="alter",
                tables=(info.full_name,),
            )
        ids += by
    name = info.full_name
    ctx.decided[name] = tuple(dict.fromkeys((*ctx.decided.get(name, ()), *ids)))
    return tuple((c.column, tuple(sorted(c.after))) for c in changes)


def plan_comment(ctx: PlanningContext, stmt: exp.Comment) -> Planned:
    """COMMENT ON TABLE t IS '...': MANAGE on the table; the comment is the catalog's
    (as CREATE TABLE ... COMMENT stores it), changed by an action."""
    kind = (stmt.args.get("kind") or "").upper()
    if kind != "TABLE" or stmt.args.get("materialized"):
        raise Refused(f"COMMENT ON {kind or '?'} is not governed by Lakegate")
    text = stmt.expression
    if not (isinstance(text, exp.Literal) and text.is_string):
        raise Refused("COMMENT ON TABLE takes a string literal")
    comment = text.this
    info = _managed_table(ctx, stmt.this, "comment").info
    action = AlterTable(
        info.catalog, info.schema, info.name, info.location, None, set_comment=True, comment=comment
    )
    return _altered(ctx, info.full_name, action)


def _managed_table(ctx: PlanningContext, node: exp.Expression, cmd: str) -> TableRef:
    """The table an ALTER names, resolved in the catalog; MANAGE on it, else the one
    'denied or missing' answer."""
    if not isinstance(node, exp.Table):
        raise Refused(f"{cmd.upper()} target is not a table")
    c, s, t = qualify_name(table_parts(node), ctx.ns)
    name = f"{c}.{s}.{t}".lower()
    ok, ids = ctx.enforcer.has_privilege(ctx.ident, "manage", c, s, t)
    ctx.decided[name] = ids
    if not ok or ctx.catalog.table(c, s, t) is None or name in ctx.derived:
        raise denied_or_missing(ctx.user, "manage", name)
    targets, _ = ctx.reads(node, {id(node)})
    return targets[0]


def _altered(ctx: PlanningContext, name: str, action: AlterTable) -> Planned:
    return Planned(
        cmd="alter",
        before=(action,),
        local_rows=[],
        local_schema="result string",
        target_name=name,
        decided_by=ctx.decided.get(name, ()),
    )


def _check_form(action: exp.Expression) -> None:
    """Only the allowed ALTER TABLE forms, refused alike for every user (before deciding)."""
    if isinstance(action, exp.AlterSet):
        props = action.expressions
        if (
            {k for k, v in action.args.items() if v} != {"expressions"}
            or len(props) != 1
            or not isinstance(props[0], exp.Properties)
        ):
            raise Refused(f"ALTER TABLE {action.sql('spark')[:80]!r} is not governed")
        for p in props[0].expressions:
            if not isinstance(p, exp.Property):
                raise Refused("ALTER TABLE SET takes TBLPROPERTIES ('key' = 'value', ...)")
            _property_key(p.this)
            _property_value(p)
    elif isinstance(action, exp.AlterColumn):
        if {k for k, v in action.args.items() if v} != {"this", "comment"}:
            raise Refused("ALTER TABLE ... ALTER COLUMN may only change a column's COMMENT")
    elif not isinstance(action, exp.ColumnDef) and not (
        isinstance(action, exp.Schema) and not action.this
    ):
        raise Refused(
            f"ALTER TABLE {type(action).__name__} is not governed (allowed: SET TBLPROPERTIES, "
            "ALTER COLUMN ... COMMENT, ADD COLUMNS)"
        )


def _alter_action(
    ctx: PlanningContext, action: exp.Expression, ref: TableRef, hidden: set[str]
) -> exp.Expression:
    """One ALTER TABLE action (its form checked by `_check_form`), checked and rebuilt."""
    info = ref.info
    if isinstance(action, exp.AlterSet):
        rebuilt = []
        for p in action.expressions[0].expressions:
            rebuilt.append(exp.Property(this=_property_key(p.this), value=_property_value(p)))
        return exp.AlterSet(expressions=[exp.Properties(expressions=rebuilt)])
    if isinstance(action, exp.AlterColumn):
        column = info.column(action.name)
        if column is None or column.name.lower() in hidden:
            raise AccessDenied(
                f"access denied: column {action.name} of {info.full_name} does not exist "
                f"or is hidden from user {ctx.user}",
                cmd="alter",
                tables=(info.full_name,),
            )
        comment = action.args["comment"]
        if not (isinstance(comment, exp.Literal) and comment.is_string):
            raise Refused("a column COMMENT must be a string literal")
        return exp.AlterColumn(
            this=exp.to_identifier(column.name, quoted=True),
            comment=exp.Literal.string(comment.this),
        )
    if isinstance(action, exp.Schema):
        return exp.Schema(expressions=[_new_column(c, info) for c in action.expressions])
    return _new_column(action, info)


def _property_key(key: exp.Expression) -> exp.Literal:
    text = key.this if isinstance(key, exp.Literal) and key.is_string else None
    if text is None and isinstance(key, exp.Var | exp.Identifier | exp.Dot | exp.Column):
        text = key.sql("spark").replace("`", "")
    if text is None or not _PROPERTY_KEY.fullmatch(text):
        raise Refused(f"table property key {key.sql('spark')[:80]!r} is not allowed")
    low = text.lower()
    if low in _RESERVED_PROPERTIES or low.startswith(_RESERVED_PROPERTY_PREFIXES):
        raise Refused(
            f"table property {text!r} is refused: it would change how the table is stored or "
            "read (delta.*, spark.*, option.* and Spark's reserved keys)"
        )
    return exp.Literal.string(text)


def _property_value(prop: exp.Property) -> exp.Literal:
    value = prop.args.get("value")
    if isinstance(value, exp.Literal):
        return exp.Literal.string(str(value.this))
    if isinstance(value, exp.Boolean):
        return exp.Literal.string("true" if value.this else "false")
    raise Refused("a table property value must be a literal")


def _new_column(cd: exp.Expression, info: TableInfo) -> exp.ColumnDef:
    """An added column: a valid name not in the table, a type, at most a COMMENT."""
    if not isinstance(cd, exp.ColumnDef) or not isinstance(cd.this, exp.Identifier):
        raise Refused("ADD COLUMNS takes column definitions (name type [COMMENT '...'])")
    name = checked_parts([cd.this.this])[0]
    if info.column(name) is not None:
        raise LakegateError(f"column {name} already exists")
    kind = cd.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise Refused(f"ADD COLUMNS: column {name} needs a type")
    constraints = []
    for con in cd.args.get("constraints") or []:
        comment = con.kind if isinstance(con, exp.ColumnConstraint) else None
        if not isinstance(comment, exp.CommentColumnConstraint):
            raise Refused(f"column constraint {con.sql('spark')!r} is not governed in ADD COLUMNS")
        constraints.append(con.copy())
    if set(k for k, v in cd.args.items() if v) - {"this", "kind", "constraints"}:
        raise Refused(f"ADD COLUMNS: column {name} has clauses that are not governed")
    return exp.ColumnDef(
        this=exp.to_identifier(name, quoted=True), kind=kind.copy(), constraints=constraints
    )
