"""Step 4: build the Spark SQL that runs: each governed table becomes a dynamic view.

A read of `main.sales.orders AS o` becomes

    (SELECT `id`, sha2(CAST(`email` AS STRING), 256) AS `email`
     FROM delta.`/warehouse/main/sales/orders` [VERSION AS OF n] [TABLESAMPLE ...]
     WHERE (<permissive> OR <permissive>) AND <restrictive>) AS o

so row filters see real values, masks happen before anything the user's query does, and
hidden columns are not there at all. A query's view projects only the visible columns the
query can name (every word of its text counts; `*`, NATURAL JOIN and PIVOT keep them all):
Spark's analysis of the statement costs in proportion to the columns projected. The
subquery text is cached per user and table version (see `_key`), and spliced into the
generated statement at a placeholder carrying a per-statement nonce (no user text can forge
it): generating the policy part once is what keeps rewriting fast.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from sqlglot import exp

from catalog.catalog import Catalog
from catalog.identity import DeltaIdentity, IdentityUnreadable, delta_identity
from catalog.model import TableInfo
from governance.errors import Refused
from governance.policy.enforcer import Identity, PolicyEnforcer, TableAccess
from governance.policy.expressions import checked_expression, mapping_name, mapping_tables
from governance.policy.masks import mask_expr, quote_ident
from governance.rewrite.entitlements import INLINE_MAX_KEYS, Entitlements, Mapped
from governance.sql.constructs import govern_expression
from governance.sql.resolve import TableRef

# The relation inside a view body is always explicitly aliased, so nothing after it (WHERE
# is not reserved with ANSI off) can be read as its alias; the mark is where the Delta
# source is spliced in, and carries a per-process random token no policy text can know.
VIEW_ALIAS = "__lg_v"
SOURCE_MARK = "__lg_source_" + secrets.token_hex(8) + "__"


@functools.lru_cache(maxsize=4096)
def quote_path(location: str) -> str:
    """`delta.`<location>``, generated from a tree once per location (a pure function of
    the text, so a location seen again costs a lookup, not a generator run)."""
    return exp.Table(
        this=exp.to_identifier(location, quoted=True), db=exp.to_identifier("delta")
    ).sql("spark")


@dataclass(frozen=True)
class PolicyRead:
    """A mapping table a policy on a governed table reads with the policy's rights."""

    table: TableInfo
    policies: tuple[str, ...]  # ids of the filters/masks (applied to this user) reading it
    columns: tuple[str, ...]  # the mapping table's columns those policies name
    # the Delta table at its location when planned (None: not readable here): the version
    # whose rows an inlined lookup holds, and part of the view's cache key
    identity: DeltaIdentity | None = None
    inlined: bool = False  # every lookup of it was answered at plan time (no raw read)

    @property
    def version(self) -> int | None:
        return self.identity.version if self.identity is not None else None


@dataclass
class ReadView:
    """One governed read: where it sits in the statement and what it exposes."""

    ref: TableRef
    access: TableAccess
    placeholder: str
    alias: str


_MAX_CACHED = 100_000  # entries per cache; a re-registered table adds new ones


def _key(ident: Identity, access: TableAccess, reads: tuple[PolicyRead, ...] = ()) -> tuple:
    """A view depends on the user and on the table as registered: its columns and types
    change only by re-registering, which moves `updated_at` (the table's catalog version) and
    may move its location; on the Delta version its column tags were read from (for
    tag-driven rules); the policies are fixed for this PolicySql's enforcer. A mapping
    table's registration (its location) and its Delta identity (table id and version) are
    part of the view too: an inlined lookup holds that version's rows, so a new version
    is a new view at the next statement (governance/rewrite/entitlements.py)."""
    table = access.table
    mapped = tuple(
        (r.table.full_name, r.table.updated_at, r.table.location, r.identity) for r in reads
    )
    return (ident.keys, table.full_name, table.updated_at, table.location, access.tags.key, mapped)


@dataclass
class _Lookups:
    """What a view's policy expressions may look up: the mapping tables (name -> table and
    identity), the governed table's column types, and (filled in) the tables still read raw."""

    mapped: dict[str, Mapped]
    row_types: dict[str, str]
    raw: set[str] = field(default_factory=set)


def _identity(info: TableInfo, known: dict[str, DeltaIdentity] | None) -> DeltaIdentity | None:
    """The Delta table at a mapping table's location for this statement (None: its log
    names no table id; the lookup then stays a subquery, which Spark reads or fails on)."""
    if known is not None and info.location in known:
        return known[info.location]
    try:
        found = delta_identity(info.location)
    except IdentityUnreadable:
        return None
    if known is not None:
        known[info.location] = found
    return found


def _raw_read(tree: exp.Expression, tables: dict[str, TableInfo]) -> exp.Expression:
    """Each mapping table in a policy expression becomes a path read of its current version
    (the policy's rights: no grant, row filter or mask of the reader applies), aliased by
    its own name (or the policy's alias) so the policy's column references still resolve."""
    for node in list(tree.find_all(exp.Table)):
        name = mapping_name(node)
        info = tables[name]
        alias = node.args.get("alias")
        if alias is None:
            alias = exp.TableAlias(this=exp.to_identifier(node.name))
        node.replace(
            exp.Table(
                this=exp.to_identifier(info.location, quoted=True),
                db=exp.to_identifier("delta"),
                alias=alias.copy(),
            )
        )
    qualified = {tuple(n.split(".")[1:]) for n in tables}
    for col in tree.find_all(exp.Column):
        if col.args.get("db") is not None and (col.db.lower(), col.table.lower()) in qualified:
            col.set("db", None)  # `acl.user_regions.region` reads the alias `user_regions`
            col.set("catalog", None)
    return tree


class PolicySql:
    """Per-enforcer cache of what the policies contribute for a user and table.

    Everything is kept as sqlglot trees; the one text cached is each view body, generated
    from a tree whose relation is a nonce placeholder so that the Delta source (path, time
    travel, sampling) is spliced in per statement. Filters are parenthesized nodes of the
    tree, so no policy text (one word, a comment, a boolean column) can change the shape of
    the statement around it.
    """

    def __init__(
        self,
        enforcer: PolicyEnforcer,
        catalog: Catalog | None = None,
        inline_max_keys: int = INLINE_MAX_KEYS,
    ) -> None:
        """`catalog` resolves the mapping tables policies read; without one, a policy that
        reads a mapping table refuses the statement. Lookups answering at most
        `inline_max_keys` keys are inlined as literals (0: never)."""
        self.enforcer = enforcer
        self.catalog = catalog
        self.entitlements = Entitlements(inline_max_keys) if inline_max_keys > 0 else None
        # view key -> the mapping tables its policies still read by a subquery
        self._raw: dict[tuple, frozenset[str]] = {}
        self._parsed: dict[tuple[str, str], exp.Expression] = {}
        # (key, text) -> (mapping tables it reads, column names it uses): fixed per policy
        self._mapped: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # keyed like the enforcer's TableAccess cache (see _key): a view is cached exactly as
        # long as the access it is built from
        self._views: dict[tuple, tuple[list[exp.Expression], exp.Expression | None]] = {}
        self._bodies: dict[tuple, str] = {}
        # id(access) -> (access, mapping table -> (policy ids, column names)): what the
        # policies applied on an access read depends on the access alone, and the enforcer
        # hands out one TableAccess per (user, table version); the entry holds the access so
        # its id cannot be reused while cached
        self._found: dict[int, tuple[TableAccess, dict[str, tuple[list[str], list[str]]]]] = {}
        self._lock = threading.Lock()

    def _expr(self, key: str, text: str) -> exp.Expression:
        """The policy expression's tree, through the checker validation uses (same rules).

        Cached by key and text: a mask's key (`id:column`) may equal a row filter's id."""
        tree = self._parsed.get((key, text))
        if tree is None:
            row_filter = self.enforcer.row_filter(key)
            kind = "mask"
            if row_filter is not None and (row_filter.where == text or row_filter.match):
                kind = "filter"  # a tag-driven filter's text is bound per table
            tree = checked_expression(key, text, kind, self.enforcer.policy_set.groups)
            self._parsed[(key, text)] = tree
        return tree

    def governed_expr(
        self, key: str, text: str, ident: Identity, lookups: _Lookups
    ) -> exp.Expression:
        """The policy's tree for this user: identity functions resolved (inside subqueries
        too), lookups answered at plan time where they can be, the other mapping tables
        read raw (the policy's rights)."""
        tree = self._expr(key, text).copy()
        tree = govern_expression(tree, ident.user, ident.is_member, where=f"policy {key}")
        if not lookups.mapped:
            return tree
        if self.entitlements is not None:
            tree, raw = self.entitlements.inline(tree, lookups.mapped, lookups.row_types)
            lookups.raw |= raw
        else:
            lookups.raw |= set(lookups.mapped)
        return _raw_read(tree, {n: m.info for n, m in lookups.mapped.items()})

    def filter_expr(
        self, key: str, text: str, ident: Identity, lookups: _Lookups
    ) -> exp.Expression:
        """A row filter's tree; a bare NULL is typed BOOLEAN (Spark rejects a VOID filter),
        and like any filter that evaluates to NULL it lets no row through."""
        tree = self.governed_expr(key, text, ident, lookups)
        if isinstance(tree.unnest(), exp.Null):
            return exp.cast(exp.null(), exp.DataType.build("boolean"))
        return tree

    def _mapping(self, key: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The mapping tables a policy expression reads and the column names it uses; walked
        once per expression, not per statement (most policies read no table)."""
        hit = self._mapped.get((key, text))
        if hit is None:
            tree = self._expr(key, text)
            names = mapping_tables(tree)
            cols = (
                tuple(dict.fromkeys(c.name.lower() for c in tree.find_all(exp.Column) if c.name))
                if names
                else ()
            )
            hit = self._mapped[(key, text)] = (names, cols)
        return hit

    def _applied(self, access: TableAccess) -> list[tuple[str, str]]:
        """(key, text) of every filter and custom mask applied on this access."""
        out = [(f.id, f.where) for f in access.row_filters]
        for name in access.visible_columns:
            applied = access.masks.get(name.lower())
            if applied is not None and applied.mask.mask == "custom":
                m = applied.mask
                out.append(
                    (f"{m.id}:{name}", (m.expression or "").replace("{col}", quote_ident(name)))
                )
        return out

    def policy_reads(
        self,
        access: TableAccess,
        *,
        row_filters_only: bool = False,
        identities: dict[str, DeltaIdentity] | None = None,
    ) -> tuple[PolicyRead, ...]:
        """The mapping tables the policies applied on this access read, resolved in the
        catalog now (a name that does not resolve refuses the statement), each with the
        Delta table at its location: from `identities` (the statement's, location ->
        identity) when there, else read now (one listing of its log) and added to it."""
        found = self._mapped_by(access, row_filters_only)
        if not found:
            return ()
        reads = []
        for name, (ids, cols) in found.items():
            info = self.catalog.table(*name.split(".")) if self.catalog is not None else None
            if info is None:
                raise Refused(  # the mapping table's name is not the caller's to see
                    f"policy {ids[0]} on {access.table.full_name} reads a mapping table that "
                    "is not in the catalog; statement refused (run lakegate policy validate)"
                )
            named = {c.lower() for c in cols}
            columns = tuple(c.name for c in info.columns if c.name.lower() in named)
            reads.append(PolicyRead(info, tuple(ids), columns, _identity(info, identities)))
        return tuple(reads)

    def _mapped_by(
        self, access: TableAccess, row_filters_only: bool
    ) -> dict[str, tuple[list[str], list[str]]]:
        """Mapping table -> (ids of the policies reading it, column names they use), for the
        filters and custom masks applied on `access`; memoised per access (callers must
        not change the result)."""
        if not row_filters_only:
            hit = self._found.get(id(access))
            if hit is not None and hit[0] is access:
                return hit[1]
        found: dict[str, tuple[list[str], list[str]]] = {}
        applied = self._applied(access)
        if row_filters_only:
            applied = applied[: len(access.row_filters)]
        for key, text in applied:
            names, used = self._mapping(key, text)
            for name in names:
                ids, cols = found.setdefault(name, ([], []))
                policy = key.split(":", 1)[0]
                if policy not in ids:
                    ids.append(policy)
                cols += used
        if not row_filters_only:
            with self._lock:
                if len(self._found) >= _MAX_CACHED:
                    self._found.clear()
                self._found[id(access)] = (access, found)
        return found

    def refuse_in_write_condition(self, access: TableAccess, cmd: str) -> None:
        """A write under a row filter that reads a mapping table is refused: Delta evaluates
        no subquery in an UPDATE/DELETE/MERGE condition (so the filter could not guard the
        user's expressions), and an INSERT's row check is not a governed view the plan
        verifier can match, so its raw mapping read could not be proven the policy's."""
        reads = self.policy_reads(access, row_filters_only=True)
        if reads:
            raise Refused(
                f"{cmd.upper()} on {access.table.full_name} is not available: its row filter "
                f"{reads[0].policies[0]} reads mapping table {reads[0].table.full_name}, and "
                "writes are not governed under mapping-table filters"
            )

    def statement_reads(
        self,
        ident: Identity,
        access: TableAccess,
        identities: dict[str, DeltaIdentity] | None = None,
    ) -> tuple[PolicyRead, ...]:
        """The policy reads of this user's view, each marked `inlined` when no lookup of
        its table is left for Spark (the verifier then allows no raw read of it)."""
        reads = self.policy_reads(access, identities=identities)
        if not reads:
            return reads
        self.view(ident, access, identities)
        raw = self._raw.get(_key(ident, access, reads), frozenset(r.table.full_name for r in reads))
        return tuple(replace(r, inlined=r.table.full_name not in raw) for r in reads)

    def view(
        self,
        ident: Identity,
        access: TableAccess,
        identities: dict[str, DeltaIdentity] | None = None,
    ) -> tuple[list[exp.Expression], exp.Expression | None]:
        """(projection, filter) trees for this user on this table; filter may be None.

        Callers must copy before changing them: they are shared through the cache."""
        reads = self.policy_reads(access, identities=identities)
        key = _key(ident, access, reads)
        hit = self._views.get(key)
        if hit is not None:
            return hit
        tables = _Lookups(
            {r.table.full_name: Mapped(r.table, r.identity) for r in reads},
            {c.name.lower(): c.type_text for c in access.table.columns},
        )
        proj: list[exp.Expression] = []
        table = access.table
        for name in access.visible_columns:
            applied = access.masks.get(name.lower())
            if applied is None:
                proj.append(exp.column(name, quoted=True))
                continue
            m = applied.mask
            col = table.column(name)
            custom = None
            if m.mask == "custom":
                custom = self.governed_expr(
                    f"{m.id}:{name}",
                    (m.expression or "").replace("{col}", quote_ident(name)),
                    ident,
                    tables,
                )
            proj.append(
                exp.alias_(
                    mask_expr(m.mask, name, col.type_text if col else "string", custom),
                    name,
                    quoted=True,
                )
            )
        permissive = [f for f in access.row_filters if f.kind == "permissive"]
        restrictive = [f for f in access.row_filters if f.kind == "restrictive"]
        parts: list[exp.Expression] = []
        if permissive:
            parts.append(
                exp.paren(
                    exp.or_(
                        *(
                            exp.paren(self.filter_expr(f.id, f.where, ident, tables))
                            for f in permissive
                        ),
                        copy=False,
                    ),
                    copy=False,
                )
            )
        parts += [
            exp.paren(self.filter_expr(f.id, f.where, ident, tables), copy=False)
            for f in restrictive
        ]
        where = exp.and_(*parts, copy=False) if parts else None
        out = (proj, where)
        with self._lock:
            if len(self._views) >= _MAX_CACHED:
                self._views.clear()
                self._raw.clear()
            self._raw[key] = frozenset(tables.raw)
            self._views[key] = out
        return out

    def body(
        self,
        ident: Identity,
        access: TableAccess,
        picks: tuple[int, ...] | None = None,
        identities: dict[str, DeltaIdentity] | None = None,
    ) -> str:
        """The view body's SQL with SOURCE_MARK where the Delta relation goes; `picks`
        (positions among the visible columns, in order) narrows the projection."""
        key = (_key(ident, access, self.policy_reads(access, identities=identities)), picks)
        hit = self._bodies.get(key)
        if hit is not None:
            return hit
        proj, where = self.view(ident, access, identities)
        if picks is not None:
            proj = [proj[i] for i in picks]
        select = exp.Select(expressions=[p.copy() for p in proj]).from_(
            exp.Table(
                this=exp.to_identifier(SOURCE_MARK),
                alias=exp.TableAlias(this=exp.to_identifier(VIEW_ALIAS)),
            ),
            copy=False,
        )
        if where is not None:
            select.set("where", exp.Where(this=where.copy()))
        text = select.sql("spark", normalize_functions=False)  # masks keep their names
        if text.count(SOURCE_MARK) != 1:
            raise Refused("internal: governed view source placeholder lost in rewriting")
        with self._lock:
            if len(self._bodies) >= _MAX_CACHED:
                self._bodies.clear()
            self._bodies[key] = text
        return text

    def filter_columns(self, access: TableAccess) -> set[str]:
        """Lower-case names of the columns the row filters on this access read."""
        cols: set[str] = set()
        for f in access.row_filters:
            cols.update(c.name.lower() for c in self._expr(f.id, f.where).find_all(exp.Column))
        return cols

    def filter_check(
        self, ident: Identity, access: TableAccess, alias: str | None = None
    ) -> exp.Expression | None:
        """The row filter as `coalesce(filter, false)`: NULL fails, and the result is never
        NULL, so an AND with it on the left short-circuits. Columns are qualified by `alias`."""
        _, where = self.view(ident, access)
        if where is None:
            return None
        filt = where.copy()
        if alias:
            for col in filt.find_all(exp.Column):
                if not col.table and col.find_ancestor(exp.Query) is None:  # the row's own
                    col.set("table", exp.to_identifier(alias))
        return exp.func("coalesce", filt, exp.false())


def view_sql(
    ps: PolicySql,
    ident: Identity,
    access: TableAccess,
    node: exp.Table | None = None,
    source: str | None = None,
    picks: tuple[int, ...] | None = None,
    identities: dict[str, DeltaIdentity] | None = None,
) -> str:
    """The governed view's body; `source` replaces the Delta path (a derived table, or
    a query's pinned source: see governance/execute/sources.py);
    `picks` narrows the projection (see `governance.rewrite.columns.columns_to_project`);
    `identities`: the statement's Delta identities (see `PolicySql.policy_reads`)."""
    if source is not None:
        if node is not None and (node.args.get("version") or node.args.get("sample")):
            raise Refused(f"time travel and sampling are not available on {access.table.full_name}")
    else:
        source = quote_path(access.table.location)
    if node is not None and source.startswith("delta."):
        version = node.args.get("version")
        if version is not None:
            source += " " + version.sql("spark")
        sample = node.args.get("sample")
        if sample is not None:
            # A fixed seed per statement: random sampling stays random between statements,
            # while the verifier's separate analysis of this view draws the same rows.
            # (sqlglot writes the seed as SEED (n) and puts TABLESAMPLE before VERSION AS
            # OF, neither of which Spark parses, so these two clauses are joined here.)
            sample = sample.copy()
            seed = sample.args.get("seed")
            sample.set("seed", None)
            seed_sql = seed.sql("spark") if seed is not None else str(secrets.randbelow(2**31))
            source += f" {sample.sql('spark')} REPEATABLE ({seed_sql})"
    return ps.body(ident, access, picks, identities).replace(SOURCE_MARK, source, 1)


def replace_reads(
    stmt: exp.Expression,
    reads: list[tuple[TableRef, TableAccess]],
    columns: Iterable[exp.Column] | None = None,
) -> tuple[exp.Expression, list[ReadView]]:
    """Swap each read Table node for a placeholder table aliased like the original;
    `columns`: the statement's Column nodes when its one walk has them (else found here)."""
    nonce = secrets.token_hex(6)
    views: list[ReadView] = []
    unaliased: dict[tuple[str, str], str] = {}
    for i, (ref, access) in enumerate(reads):
        node = ref.node
        alias_node = node.args.get("alias")
        # the original node leaves the tree, so its alias (like its pivots and joins
        # below) moves to the placeholder uncopied
        if alias_node is not None and alias_node.this is not None:
            alias = alias_node.this
            table_alias = alias_node
        else:
            alias = node.this
            table_alias = exp.TableAlias(this=alias)
            parts = [p.this.lower() for p in (node.args.get("db"), node.this) if p is not None]
            if len(parts) == 2:
                unaliased[(parts[0], parts[1])] = alias.this
        placeholder = f"__lg_{nonce}_{i}__"  # terminated: `_1__` is not inside `_10__`
        new = exp.Table(this=exp.to_identifier(placeholder), alias=table_alias)
        if node.args.get("pivots"):
            new.set("pivots", node.args["pivots"])
        if node.args.get("joins"):
            new.set("joins", node.args["joins"])
        if node is stmt:
            raise Refused("a bare table is not a statement")
        node.replace(new)
        views.append(ReadView(ref, access, placeholder, alias.this))
    if unaliased:
        _strip_qualifiers(stmt.find_all(exp.Column) if columns is None else columns, unaliased)
    return stmt, views


def _strip_qualifiers(columns: Iterable[exp.Column], unaliased: dict[tuple[str, str], str]) -> None:
    """`sales.orders.id` and `main.sales.orders.id` name the view `orders` now."""
    for col in columns:
        db = col.args.get("db")
        table = col.args.get("table")
        if db is None or table is None:
            continue
        key = (db.name.lower(), table.name.lower())
        if key in unaliased:
            col.set("db", None)
            col.set("catalog", None)


def splice(sql: str, views: list[ReadView], relations: list[str]) -> str:
    """Each view's placeholder replaced by its relation: a parenthesized body, or the name
    of a governed view made over a pin (governance/execute/sources.py)."""
    for v, relation in zip(views, relations, strict=True):
        if sql.count(v.placeholder) != 1:
            raise Refused("internal: governed view placeholder lost in rewriting")
        sql = sql.replace(v.placeholder, relation)
    return sql
