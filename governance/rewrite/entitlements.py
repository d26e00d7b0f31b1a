"""A mapping-table lookup becomes a literal before Spark plans (issue 31, item 1).

A row filter or custom mask such as

    region IN (SELECT allowed_region FROM m.acl.user_regions WHERE user_name = current_user())

is, once identity functions are resolved, a question about one version of one small Delta
table. It is answered here at plan time, with delta-rs (no JVM, no Spark job), and the
subquery is replaced by its answer:

- `x IN (SELECT k FROM t WHERE c)` becomes `x IN (k1, k2, ...)`, the distinct keys of the
  rows where `c` is TRUE, built as sqlglot literals of `k`'s type (a NULL key adds a typed
  NULL, so a row that matches no key is NULL, not FALSE, exactly as with the subquery); no
  key at all becomes FALSE (`x IN (<empty>)` is FALSE even for a NULL `x`).
- `EXISTS (SELECT ... FROM t WHERE c)` becomes TRUE or FALSE.

Only what can be answered with the subquery's exact semantics is inlined; everything else
keeps the subquery (read by Spark at run time, as before), which is always correct:

- the subquery is one plain SELECT over one mapping table (no join, GROUP BY, HAVING,
  ORDER BY, LIMIT, set operation, nested subquery), uncorrelated (every column is the
  mapping table's);
- its WHERE uses only =, <>, AND, OR, NOT, IS [NOT] NULL, parentheses, the mapping
  table's columns and literals of the same kind (string with `string`, integer with the
  integral types, boolean with `boolean`), evaluated with SQL's three-valued logic;
- an IN's left side is a column of the governed table, and it and the key are both
  `string`, or both integral (`tinyint` .. `bigint`: the keys are written in the wider
  type, which is what Spark compares the subquery in too);
- the table is local, its protocol is one delta-rs reads row for row (reader version 1, or
  3 without reader features but `timestampNtz`: no deletion vectors, no column mapping),
  it holds at most MAX_ROWS rows and the answer at most the configured number of keys
  (`mapping_inline_max_keys`).

The table is read at the version its log names when the statement is planned
(`catalog.identity.delta_identity`), checked to be the same table (`metaData.id`), and kept
per (location, table id, version, columns): users and statements share one read.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from catalog.identity import DeltaIdentity
from catalog.locations import normalise_location
from catalog.model import TableInfo
from governance.policy.expressions import mapping_name

#: Keys inlined at most per lookup; a larger entitlement keeps the subquery (config:
#: `mapping_inline_max_keys`).
INLINE_MAX_KEYS = 10_000
#: Mapping-table rows read into memory at plan time at most; a larger table keeps the subquery.
MAX_ROWS = 2_000_000
_CACHED_TABLES = 32
_INTEGRAL = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INT", "bigint": "BIGINT"}
_READER_FEATURES_OK = frozenset({"timestampNtz"})
_SELECT_ARGS = frozenset({"expressions", "from", "from_", "where", "distinct"})
_INTEGER = re.compile(r"-?[0-9]+")


class _Unsupported(Exception):
    """This subquery is not one answered here: it keeps its subquery form."""


@dataclass(frozen=True)
class Mapped:
    """A mapping table as this statement reads it: its catalog entry and its Delta identity
    (None: not readable here, e.g. an object store; the subquery form is kept)."""

    info: TableInfo
    identity: DeltaIdentity | None


def _kind(type_text: str) -> str | None:
    t = type_text.strip().lower()
    if t == "string":
        return "string"
    if t in _INTEGRAL:
        return "int"
    if t == "boolean":
        return "bool"
    return None


class _Scope:
    """The mapping table in a subquery's FROM: its alias and columns (lower name -> name,
    type), for SQL's scoping rule (an unqualified column is the mapping table's when it has
    one, else the outer row's: a correlation, not answered here)."""

    def __init__(self, table: exp.Table, info: TableInfo) -> None:
        alias = table.args.get("alias")
        self.alias = (alias.name if alias is not None else table.name).lower()
        self.db = None if alias is not None else (table.args.get("db") and table.db.lower())
        self.columns = {c.name.lower(): (c.name, c.type_text) for c in info.columns}

    def column(self, col: exp.Column) -> tuple[str, str]:
        """(name, type) of a mapping column; _Unsupported for an outer (correlated) one."""
        qual = col.table.lower() if col.args.get("table") is not None else None
        db = col.db.lower() if col.args.get("db") is not None else None
        if col.args.get("catalog") is not None and db is None:
            raise _Unsupported("odd qualifier")
        if qual is not None and (qual != self.alias or (db is not None and db != self.db)):
            raise _Unsupported("correlated")
        found = self.columns.get(col.name.lower())
        if found is None:
            raise _Unsupported("correlated")
        return found


class Entitlements:
    """Answers mapping-table subqueries from delta-rs reads, kept per table version."""

    def __init__(self, max_keys: int = INLINE_MAX_KEYS) -> None:
        self.max_keys = max_keys
        self._tables: OrderedDict[tuple, pa.Table | None] = OrderedDict()
        self._lock = threading.Lock()

    def inline(
        self,
        tree: exp.Expression,
        mapped: dict[str, Mapped],
        row_types: dict[str, str],
    ) -> tuple[exp.Expression, frozenset[str]]:
        """`tree` (identity functions already resolved) with each answerable top-level
        lookup replaced by its answer; and the mapping tables still read by a subquery.
        `row_types`: the governed table's lower-case column names -> Spark type."""
        for node in list(tree.find_all(exp.In, exp.Exists)):
            if node.find_ancestor(exp.Query) is not None:
                continue  # inside another subquery: that one decides
            try:
                answer = self._answer(node, mapped, row_types)
            except _Unsupported:
                continue
            if node is tree:
                tree = answer
            else:
                node.replace(answer)
        raw = frozenset(mapping_name(t) for t in tree.find_all(exp.Table))
        return tree, raw

    def _answer(
        self, node: exp.Expression, mapped: dict[str, Mapped], row_types: dict[str, str]
    ) -> exp.Expression:
        if isinstance(node, exp.Exists):
            select = node.this
            table, scope = self._source(select, mapped)
            for e in select.expressions:
                if not isinstance(e, exp.Literal | exp.Star | exp.Column):
                    raise _Unsupported("projection")
                if isinstance(e, exp.Column):
                    scope.column(e)
            where = select.args.get("where")
            cond = where.this if where is not None else None
            link = _correlation(cond, scope, row_types) if cond is not None else None
            if link is None:
                rows = self._rows(table, scope, cond, ())
                return exp.true() if rows.num_rows else exp.false()
            # EXISTS (... WHERE rest AND k = x) is TRUE iff x equals a non-NULL key of a row
            # where `rest` is TRUE, else FALSE (never NULL)
            outer, key, key_type, rest = link
            items = self._keys(self._rows(table, scope, rest, (key,)), key, key_type, False)
            if not items:
                return exp.false()
            return exp.func("coalesce", exp.In(this=outer.copy(), expressions=items), exp.false())
        query = node.args.get("query")
        lhs = node.this
        if (
            not isinstance(query, exp.Subquery)
            or node.args.get("unnest") is not None
            or node.args.get("field") is not None
            or node.expressions
            or not isinstance(lhs, exp.Column)
            or len(lhs.parts) != 1
        ):
            raise _Unsupported("shape")
        select = query.this
        table, scope = self._source(select, mapped)
        if len(select.expressions) != 1 or not isinstance(select.expressions[0], exp.Column):
            raise _Unsupported("projection")
        key, key_type = scope.column(select.expressions[0])
        key_type = _common_type(row_types.get(lhs.name.lower()), key_type)
        where = select.args.get("where")
        rows = self._rows(table, scope, where.this if where is not None else None, (key,))
        items = self._keys(rows, key, key_type, True)
        if not items:
            return exp.false()
        return exp.paren(exp.In(this=lhs.copy(), expressions=items), copy=False)

    def _keys(
        self, rows: pa.Table, key: str, key_type: str, with_null: bool
    ) -> list[exp.Expression]:
        """The distinct keys as literals, sorted; a typed NULL last when one is NULL and
        `with_null`; _Unsupported past the threshold."""
        if not rows.num_rows:
            return []
        values = pc.unique(rows.column(key).combine_chunks())
        if len(values) > self.max_keys:
            raise _Unsupported("too many keys")
        items = [
            _literal(v, key_type) for v in sorted(v for v in values.to_pylist() if v is not None)
        ]
        if with_null and values.null_count:
            items.append(exp.cast(exp.null(), exp.DataType.build(key_type)))
        return items

    def _source(self, select: Any, mapped: dict[str, Mapped]) -> tuple[Mapped, _Scope]:
        """The one mapping table a plain SELECT reads, and its scope."""
        if not isinstance(select, exp.Select):
            raise _Unsupported("not a plain select")
        for name, value in select.args.items():
            if value and name not in _SELECT_ARGS:
                raise _Unsupported(f"select has {name}")
        distinct = select.args.get("distinct")
        if distinct is not None and (distinct.args.get("on") or distinct.expressions):
            raise _Unsupported("distinct on")
        source = select.args.get("from") or select.args.get("from_")
        table = source.this if source is not None else None
        if not isinstance(table, exp.Table) or any(
            v for k, v in table.args.items() if k not in ("this", "db", "catalog", "alias")
        ):
            raise _Unsupported("source")
        alias = table.args.get("alias")
        if alias is not None and alias.columns:
            raise _Unsupported("column aliases")
        m = mapped.get(mapping_name(table))
        if m is None or m.identity is None or m.identity.version is None:
            raise _Unsupported("not readable here")
        where = select.args.get("where")
        if where is not None and where.find(exp.Query) is not None:
            raise _Unsupported("nested subquery")
        return m, _Scope(table, m.info)

    def _rows(
        self, m: Mapped, scope: _Scope, where: exp.Expression | None, keep: tuple[str, ...]
    ) -> pa.Table:
        """The mapping rows where `where` is TRUE (only the columns in `keep`)."""
        used = [scope.column(c)[0] for c in (where.find_all(exp.Column) if where else ())]
        columns = tuple(sorted({*keep, *used}))
        data = self._table(m, columns)
        if data is None:
            raise _Unsupported("unreadable")
        types = {n: t for n, t in scope.columns.values()}
        for name in columns:  # the log's types are the catalog's (else Spark decides)
            if not _arrow_is(data.schema.field(name).type, _kind(types[name])):
                raise _Unsupported("types moved")
        if where is None:
            return data
        value, kind = _eval(where, data, scope)
        if kind not in ("bool", "null"):
            raise _Unsupported("not a predicate")
        if isinstance(value, pa.Scalar):
            return data if value.is_valid and value.as_py() else data.slice(0, 0)
        return data.filter(pc.fill_null(value, False))

    def _table(self, m: Mapped, columns: tuple[str, ...]) -> pa.Table | None:
        assert m.identity is not None
        ident = m.identity
        key = (normalise_location(m.info.location), ident.table_id, ident.version, columns)
        with self._lock:
            if key in self._tables:
                self._tables.move_to_end(key)
                return self._tables[key]
        data = read_mapping(m.info.location, m.identity, columns)
        with self._lock:
            self._tables[key] = data
            while len(self._tables) > _CACHED_TABLES:
                self._tables.popitem(last=False)
        return data


def read_mapping(
    location: str, identity: DeltaIdentity, columns: tuple[str, ...]
) -> pa.Table | None:
    """`columns` of the Delta table at `location` as of `identity`'s version, by delta-rs;
    None when it cannot be read here row for row (another table there now, a protocol
    feature that changes which rows or values a reader sees, too many rows, any error)."""
    from deltalake import DeltaTable

    root = normalise_location(location)
    if "://" in root or identity.version is None:
        return None
    try:
        table = DeltaTable(root, version=identity.version)
        if table.metadata().id != identity.table_id:
            return None
        protocol = table.protocol()
        features = set(protocol.reader_features or ())
        if protocol.min_reader_version not in (1, 3) or not features <= _READER_FEATURES_OK:
            return None
        actions = pa.table(table.get_add_actions(flatten=True))  # an arro3 table
        counts = actions.column("num_records") if "num_records" in actions.column_names else None
        if counts is None or counts.null_count or (pc.sum(counts).as_py() or 0) > MAX_ROWS:
            return None
        names = {f.name.lower(): f.name for f in table.schema().fields}
        if any(c.lower() not in names for c in columns):
            return None
        data = table.to_pyarrow_table(columns=[names[c.lower()] for c in columns])
    except Exception:  # unreadable here: Spark reads it through the subquery, or fails
        return None
    return data.rename_columns(list(columns))


def _arrow_is(dtype: pa.DataType, kind: str | None) -> bool:
    if kind == "string":
        return (
            pa.types.is_string(dtype)
            or pa.types.is_large_string(dtype)
            or (pa.types.is_string_view(dtype))
        )
    if kind == "int":
        return pa.types.is_integer(dtype)
    return kind == "bool" and pa.types.is_boolean(dtype)


def _conjuncts(cond: exp.Expression) -> list[exp.Expression]:
    """The operands of a (parenthesized) chain of ANDs."""
    cond = cond.unnest()
    if isinstance(cond, exp.And):
        return _conjuncts(cond.this) + _conjuncts(cond.expression)
    return [cond]


def _outer(col: exp.Column, scope: _Scope) -> bool:
    """A column SQL's scoping gives to the governed row, not to the mapping table."""
    try:
        scope.column(col)
    except _Unsupported:
        return True
    return False


def _correlation(
    cond: exp.Expression, scope: _Scope, row_types: dict[str, str]
) -> tuple[exp.Column, str, str, exp.Expression | None] | None:
    """For a WHERE `rest AND k = x`, `x` the governed row's column and the one reference to
    the row: (x, k, the type they compare in, rest); None when nothing is correlated;
    _Unsupported for any other correlation."""
    parts = _conjuncts(cond)
    linked = [p for p in parts if any(_outer(c, scope) for c in p.find_all(exp.Column))]
    if not linked:
        return None
    eq = linked[0]
    if len(linked) != 1 or not isinstance(eq, exp.EQ):
        raise _Unsupported("correlated")
    key, outer = eq.this, eq.expression
    if isinstance(key, exp.Column) and _outer(key, scope):
        key, outer = outer, key
    if (
        not isinstance(key, exp.Column)
        or not isinstance(outer, exp.Column)
        or _outer(key, scope)
        or len(outer.parts) != 1
    ):
        raise _Unsupported("correlated")
    name, key_type = scope.column(key)
    common = _common_type(row_types.get(outer.name.lower()), key_type)
    rest = [p for p in parts if p is not eq]
    return outer, name, common, exp.and_(*rest) if rest else None


def _common_type(row_type: str | None, key_type: str) -> str:
    """The type both sides of the IN compare as, the one the keys are written in: `string`
    with `string`, or the wider of two integral types (Spark widens the narrower side, an
    exact conversion, whether the right side is a subquery or a list of that type)."""
    left, right = (row_type or "").strip().lower(), key_type.strip().lower()
    if left == right == "string":
        return "string"
    if left in _INTEGRAL and right in _INTEGRAL:
        return max(left, right, key=list(_INTEGRAL).index)
    raise _Unsupported("types differ")


def _literal(value: object, type_text: str) -> exp.Expression:
    """A key as a literal (never text pasted into SQL): a string, or an integer, which
    Spark types INT or BIGINT by its size; comparing it with the column widens one side
    to the other's integral type, an exact conversion, so the answer is the subquery's."""
    if type_text == "string":
        return exp.Literal.string(str(value))
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Unsupported("key type")
    return exp.Literal.number(value)


def _eval(node: exp.Expression, data: pa.Table, scope: _Scope) -> tuple[Any, str]:
    """(value, kind) of a WHERE expression over the mapping rows: an array or a scalar,
    with Spark's three-valued logic; _Unsupported for anything else."""
    if isinstance(node, exp.Paren):
        return _eval(node.this, data, scope)
    if isinstance(node, exp.Boolean):
        return pa.scalar(bool(node.this), pa.bool_()), "bool"
    if isinstance(node, exp.Null):
        return pa.scalar(None, pa.bool_()), "null"
    if isinstance(node, exp.Literal):
        if node.is_string:
            return pa.scalar(node.this, pa.string()), "string"
        if _INTEGER.fullmatch(node.this):
            return pa.scalar(int(node.this), pa.int64()), "int"
        raise _Unsupported("number")
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value, kind = _eval(node.this, data, scope)
        return pa.scalar(-value.as_py(), pa.int64()), kind
    if isinstance(node, exp.Column):
        name, type_text = scope.column(node)
        kind = _kind(type_text)
        if kind is None:
            raise _Unsupported("column type")
        return data.column(name), kind
    if isinstance(node, exp.EQ | exp.NEQ):
        left, lk = _eval(node.this, data, scope)
        right, rk = _eval(node.expression, data, scope)
        if "null" in (lk, rk):
            return pa.scalar(None, pa.bool_()), "null"
        if lk != rk:
            raise _Unsupported("mixed types")
        fn = pc.equal if isinstance(node, exp.EQ) else pc.not_equal
        return fn(left, right), "bool"
    if isinstance(node, exp.And | exp.Or):
        left, lk = _eval(node.this, data, scope)
        right, rk = _eval(node.expression, data, scope)
        if lk not in ("bool", "null") or rk not in ("bool", "null"):
            raise _Unsupported("not boolean")
        fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
        return fn(left, right), "bool"
    if isinstance(node, exp.Not):
        value, kind = _eval(node.this, data, scope)
        if kind not in ("bool", "null"):
            raise _Unsupported("not boolean")
        return pc.invert(value), "bool"
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        value, _ = _eval(node.this, data, scope)
        return pc.is_null(value), "bool"
    raise _Unsupported(type(node).__name__)
