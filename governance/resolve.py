"""Step 2: find every table the statement touches and resolve it through the catalog.

Every `exp.Table` node in the tree is classified, none skipped: a reference to a CTE in
scope (compared case-insensitively, as Spark does), or a physical table that must resolve
in the catalog. CTEs are renamed to names the layer owns (`__lg_cte_N`), so the names left
for Spark to resolve are exactly the ones the layer chose: a CTE cannot hide a real table,
and a real table can never be taken for a CTE. Where this layer and Spark might scope a
name differently, the layer's choice only ever yields governed data, never raw data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp

from catalog.catalog import Catalog
from catalog.model import TableInfo
from catalog.names import InvalidName, check_name
from governance.constructs import function_name
from governance.errors import AccessDenied, Refused

Role = Literal["read", "target"]

# `format.`path`` spellings Spark reads files through; any db part naming one is refused.
FILE_FORMATS = frozenset(
    {
        "delta",
        "parquet",
        "json",
        "csv",
        "text",
        "orc",
        "binaryfile",
        "avro",
        "jdbc",
        "xml",
        "hive",
        "file",
        "libsvm",
        "image",
        "noop",
        "console",
        "kafka",
        "rate",
        "socket",
    }
)
# Table-valued functions that read no table; everything else in FROM position is refused.
SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "inline",
        "inline_outer",
        "posexplode",
        "posexplode_outer",
        "stack",
    }
)


@dataclass
class TableRef:
    """One physical table reference in the statement."""

    node: exp.Table
    info: TableInfo
    role: Role
    name_text: str  # as the user wrote it, for messages


@dataclass
class Resolved:
    refs: list[TableRef] = field(default_factory=list)

    @property
    def reads(self) -> list[TableRef]:
        return [r for r in self.refs if r.role == "read"]

    @property
    def targets(self) -> list[TableRef]:
        return [r for r in self.refs if r.role == "target"]


@dataclass(frozen=True)
class Namespace:
    """The session's current catalog and schema (changed by USE)."""

    catalog: str
    schema: str


def table_parts(node: exp.Table) -> list[str]:
    """The name parts of a table, schema or catalog reference, each a valid name."""
    return checked_parts(_raw_parts(node))


def checked_parts(parts: list[str]) -> list[str]:
    """Names are never paths: every part is checked in every statement kind."""
    try:
        for p in parts:
            check_name(p, "name part")
    except InvalidName as e:
        raise Refused(f"invalid name: {e}") from None
    return parts


def _raw_parts(node: exp.Table) -> list[str]:
    parts = [node.args.get("catalog"), node.args.get("db"), node.this]
    out = []
    for p in parts:
        if p is None:
            continue
        if not isinstance(p, exp.Identifier):
            raise Refused(f"table name {node.sql('spark')!r} is not a plain identifier")
        out.append(p.this)
    return out


def qualify_name(parts: list[str], ns: Namespace) -> tuple[str, str, str]:
    """One-, two- and three-part names against the current catalog and schema."""
    if len(parts) == 1:
        return ns.catalog, ns.schema, parts[0]
    if len(parts) == 2:
        return ns.catalog, parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise Refused(f"table name {'.'.join(parts)!r} has {len(parts)} parts; at most 3 are allowed")


def denied_or_missing(
    user: str, privilege: str, name: str, policies: tuple[str, ...] = ()
) -> AccessDenied:
    """One message for 'absent' and 'not granted', so denial never reveals existence."""
    return AccessDenied(
        f"access denied: user {user} has no {privilege.upper()} privilege on table {name}"
        " (or it does not exist)",
        cmd=privilege,
        tables=(name,),
        policies=policies,
    )


def resolve_tables(
    stmt: exp.Expression,
    catalog: Catalog,
    ns: Namespace,
    user: str,
    targets: set[int] | None = None,
) -> Resolved:
    """Classify and resolve every Table node; `targets` are ids of nodes written to."""
    targets = targets or set()
    out = Resolved()
    cte_counter = [0]
    # iterative walk: (node, visible CTEs lower-name -> new name)
    stack: list[tuple[exp.Expression, dict[str, str]]] = [(stmt, {})]
    extend = stack.extend
    while stack:
        node, env = stack.pop()
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With):
            if with_.args.get("recursive"):
                raise Refused("recursive CTEs are not governed")
            inner = dict(env)
            for cte in with_.expressions:
                alias = cte.alias_or_name
                if not alias:
                    raise Refused("a CTE without a name")
                stack.append((cte.this, dict(inner)))  # sees earlier CTEs only
                cte_counter[0] += 1
                new = f"__lg_cte_{cte_counter[0]}"
                inner[alias.lower()] = new
                named = cte.args.get("alias")  # `w (a, b)`: the column names stay
                columns = named.args.get("columns") if named is not None else None
                cte.set("alias", exp.TableAlias(this=exp.to_identifier(new), columns=columns))
            for key, child in node.args.items():
                if key == "with_":
                    continue
                _push(stack, child, inner)
            continue
        if isinstance(node, exp.Table):
            _classify(node, env, catalog, ns, user, targets, out)
            # time travel / sample arguments and a table function's arguments can hold
            # subqueries: their tables are governed like any other read
            for key, child in node.args.items():
                if key in ("db", "catalog", "alias") or (key == "this" and _is_name(child)):
                    continue
                _push(stack, child, env)
            continue
        # sqlglot's own (compiled) child iteration, in the order of `_push`: most nodes
        # are neither a WITH owner nor a table, and this loop is the walk's cost
        extend([(c, env) for c in node.iter_expressions() if not isinstance(c, _LEAVES)])
    return out


# Nodes whose arguments are only text and flags: nothing under them can be a table.
_LEAVES = (exp.Identifier, exp.Literal)


def _push(stack: list, child: object, env: dict[str, str]) -> None:
    if isinstance(child, exp.Expression):
        stack.append((child, env))
    elif isinstance(child, list):
        for c in child:
            if isinstance(c, exp.Expression):
                stack.append((c, env))


def _classify(
    node: exp.Table,
    env: dict[str, str],
    catalog: Catalog,
    ns: Namespace,
    user: str,
    targets: set[int],
    out: Resolved,
) -> None:
    if not isinstance(node.this, exp.Identifier):
        fn = node.this
        name = function_name(fn)
        if name in SAFE_TABLE_FUNCTIONS:
            return
        shown = name or type(fn).__name__
        raise Refused(f"table-valued function {shown}(...) is not governed")
    alias = node.args.get("alias")
    if alias is not None and not isinstance(alias.this, exp.Identifier | type(None)):
        raise Refused(
            f"the `name@version` time-travel spelling in {node.sql('spark')!r} is not governed;"
            " write VERSION AS OF / TIMESTAMP AS OF"
        )
    parts = _raw_parts(node)
    if len(parts) == 1 and id(node) not in targets and parts[0].lower() in env:
        _rename_cte_ref(node, env[parts[0].lower()])
        return
    if len(parts) == 2 and parts[0].lower() in FILE_FORMATS:
        raise Refused(
            f"path-based table reference {parts[0]}.`...` is not allowed; "
            "query tables by their catalog name"
        )
    checked_parts(parts)  # `/`, `:` and every other path character included
    c, s, t = qualify_name(parts, ns)
    role: Role = "target" if id(node) in targets else "read"
    info = catalog.table(c, s, t)
    shown = f"{c}.{s}.{t}".lower()
    if info is None and role == "read":
        raise denied_or_missing(user, "select", shown)
    if info is not None:
        out.refs.append(TableRef(node, info, role, ".".join(parts)))


def _is_name(node: object) -> bool:
    """A table's `this` is its name, or a table function whose arguments are walked."""
    return not isinstance(node, exp.Func)


def _rename_cte_ref(node: exp.Table, new: str) -> None:
    original = node.this
    if node.args.get("alias") is None:
        node.set(
            "alias", exp.TableAlias(this=exp.to_identifier(original.this, quoted=original.quoted))
        )
    node.set("this", exp.to_identifier(new))
