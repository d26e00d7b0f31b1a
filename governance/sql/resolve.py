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
from governance.errors import AccessDenied, Refused
from governance.sql.constructs import function_name
from governance.sql.walk import Walked, collect, valid

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
    walked: Walked | None = None,
) -> Resolved:
    """Classify and resolve every Table node; `targets` are ids of nodes written to;
    `walked`: the statement's one walk (governance/sql/walk.py), read if current.

    The tables and WITH clauses come from that one walk, each table's CTE scope from its
    path to the root. They are visited in the order of a depth-first walk that takes a
    node's children last to first, and a WITH's CTEs (last to first, each seeing the
    earlier ones only) after the rest of its owner: that order fixes the `__lg_cte_N`
    numbering, the order of the reads and which refusal comes first."""
    targets = targets or set()
    nodes = valid(stmt, walked) or collect(stmt)
    out = Resolved()
    visits = []
    for node in [*(w.parent for w in nodes.withs if _owns(w)), *nodes.tables]:
        path = _path(node, stmt)
        if path is not None:
            visits.append((_order(path), node, path))
    visits.sort(key=lambda v: v[0])
    scopes: dict[int, list[tuple[str, str]]] = {}  # WITH owner -> (CTE name, new name)
    renamed = 0
    for _, node, path in visits:
        if isinstance(node, exp.Table):
            _classify(node, _scope(path, scopes), catalog, ns, user, targets, out)
        else:
            scopes[id(node)] = names = _rename_ctes(node.args["with_"], renamed)
            renamed += len(names)
    return out


# Nodes whose arguments are only text and flags: nothing under them can be a table.
_LEAVES = (exp.Identifier, exp.Literal)
# A table's arguments that name it: nothing under them is a table read.
_NAME_ARGS = frozenset({"db", "catalog", "alias"})
_Step = tuple[exp.Expression, exp.Expression]


def _owns(with_: exp.Expression) -> bool:
    """Whether this WITH scopes its parent (it is the parent's `with_`)."""
    parent = with_.parent
    return parent is not None and parent.args.get("with_") is with_


def _path(node: exp.Expression, root: exp.Expression) -> list[_Step] | None:
    """(parent, child) from `root` down to `node`; None when the node is not one the
    table walk visits: below a table's name or alias, or below a WITH other than through
    a CTE's query."""
    steps: list[_Step] = []
    while node is not root:
        parent = node.parent
        held = parent.args.get(node.arg_key) if parent is not None else None
        if held is not node and not (isinstance(held, list) and _holds(held, node)):
            # found under the root, yet its parents do not lead there: fail closed
            raise Refused("internal: the statement's tree is inconsistent; statement refused")
        steps.append((parent, node))
        node = parent
    steps.reverse()
    last = len(steps) - 1
    for i, (parent, child) in enumerate(steps):
        if isinstance(parent, _LEAVES):
            return None
        if isinstance(parent, exp.Table) and (
            child.arg_key in _NAME_ARGS or (child.arg_key == "this" and _is_name(child))
        ):
            return None
        # owner -> WITH -> CTE -> its query: nothing else under a WITH is walked
        if (
            isinstance(parent, exp.With)
            and _owns(parent)
            and (child.arg_key != "expressions" or i == last or steps[i + 1][1].arg_key != "this")
        ):
            return None
    return steps


def _holds(held: list, node: exp.Expression) -> bool:
    """Whether the list holds this very node: at its recorded index, else anywhere."""
    index = node.index
    if index is not None and index < len(held) and held[index] is node:
        return True
    return any(h is node for h in held)


def _order(path: list[_Step]) -> tuple[tuple[int, int, int], ...]:
    """The path's sort key: at each node its children last to first, a WITH's CTEs after
    every other child of its owner, last to first."""
    out = []
    i = 0
    while i < len(path):
        parent, child = path[i]
        if isinstance(child, exp.With) and parent.args.get("with_") is child:
            out.append((1, -_position(child, path[i + 1][1]), 0))
            i += 3  # owner -> WITH -> CTE -> the CTE's query
            continue
        out.append((0, -list(parent.args).index(child.arg_key), -_position(parent, child)))
        i += 1
    return tuple(out)


def _position(parent: exp.Expression, child: exp.Expression) -> int:
    """The child's place in its parent's list argument (0 when the argument is no list)."""
    held = parent.args.get(child.arg_key)
    if not isinstance(held, list):
        return 0
    index = child.index
    if index is not None and index < len(held) and held[index] is child:
        return index
    return next(i for i, c in enumerate(held) if c is child)


def _scope(path: list[_Step], scopes: dict[int, list[tuple[str, str]]]) -> dict[str, str]:
    """The CTEs a table at the end of `path` sees, lower-case name -> new name."""
    env: dict[str, str] = {}
    for i, (parent, child) in enumerate(path):
        names = scopes.get(id(parent))
        if names is None:
            continue
        if child is parent.args.get("with_"):
            names = names[: _position(child, path[i + 1][1])]  # the earlier CTEs only
        env.update(names)
    return env


RECURSIVE_CTE = (
    "recursive CTEs (WITH RECURSIVE) are not governed by Lakegate: Spark runs the recursive "
    "step as a loop over its own output, which the plan verifier cannot yet prove reads only "
    "governed views; write the recursion as a fixed number of joins"
)


def _rename_ctes(with_: exp.With, renamed: int) -> list[tuple[str, str]]:
    """Each CTE's new name (`__lg_cte_N`, numbered on from `renamed`); its columns stay."""
    if with_.args.get("recursive"):
        raise Refused(RECURSIVE_CTE)
    names: list[tuple[str, str]] = []
    for cte in with_.expressions:
        alias = cte.alias_or_name
        if not alias:
            raise Refused("a CTE without a name")
        new = f"__lg_cte_{renamed + len(names) + 1}"
        names.append((alias.lower(), new))
        named = cte.args.get("alias")  # `w (a, b)`: the column names stay
        columns = named.args.get("columns") if named is not None else None
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(new), columns=columns))
    return names


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
