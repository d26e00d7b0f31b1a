"""The planning context: one statement's user, namespace and policy state, and the steps
every statement family shares (govern, resolve and decide reads, replace them by governed
views, generate the SQL, refuse masked reads in writes, check a write target).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from catalog.catalog import Catalog
from catalog.identity import DeltaIdentity, IdentityUnreadable, columns_at, delta_identity
from catalog.model import TableInfo
from governance.errors import AccessDenied, Refused
from governance.planning.planned import Planned
from governance.policy.enforcer import Identity, PolicyEnforcer, TableAccess, mask_columns
from governance.rewrite.columns import (
    check_hidden_columns,
    columns_named,
    columns_read,
    columns_to_project,
    words_spark_may_resolve,
)
from governance.rewrite.dynamic_views import PolicySql, replace_reads, splice, view_sql
from governance.sql.constructs import GOVERNED_NODES, govern_nodes
from governance.sql.resolve import (
    Namespace,
    TableRef,
    denied_or_missing,
    qualify_name,
    resolve_tables,
    table_parts,
)
from governance.sql.sqlgen import spark_sql
from governance.sql.walk import Walked, valid


class PlanningContext:
    """What a statement is planned against, and what planning learnt on the way (the audit
    cmd, the deciding policies and row filters per table) for the session's audit lines."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        enforcer: PolicyEnforcer,
        policy_sql: PolicySql,
        user: str,
        namespace: Namespace,
        derived: dict[str, str] | None = None,
        pin: Callable[[TableInfo, str | None], str] | None = None,
        groups: frozenset[str] = frozenset(),
        pin_view: Callable[[str, str], str | None] | None = None,
    ) -> None:
        """`derived`: full table name -> the SQL relation it is read from (layer-owned temp
        views, e.g. the audit log), instead of its Delta location; `pin`: a query's
        relation for a table read at its current version, named by the table and its Delta
        id (governance/execute/sources.py), None: `delta.`<location>``; `pin_view`: the name of
        the governed view made once over a pin for a view body (None: bodies are inlined);
        `groups`: the identity provider's groups for this user (IdpClaims.groups)."""
        self.derived = derived or {}
        self.pin = pin
        self.pin_view = pin_view
        self.cmd = "select"  # the statement's audit cmd, known as soon as its kind is
        self.decided: dict[str, tuple[str, ...]] = {}  # table -> deciding policy ids
        self.filters: dict[str, tuple[str, ...]] = {}  # table -> row filter ids
        self.catalog = catalog
        self.enforcer = enforcer
        self.ps = policy_sql
        self.user = user
        self.ns = namespace
        self.ident: Identity = enforcer.identity(user, groups)
        self.clock_read = False  # a time was folded from the clock: the plan holds only now
        # the parsed statement's one walk (governance/sql/walk.py), set by the dispatcher
        self.walked: Walked | None = None

    def govern(self, tree: exp.Expression, walked: Walked | None = None) -> exp.Expression:
        """The user's expression with identity functions resolved and unsafe constructs
        refused; `walked`: the statement's one walk, read if current (stale once a node is
        replaced)."""
        current = valid(tree, walked)
        tree, changed = govern_nodes(
            tree,
            current.governed if current is not None else tree.find_all(*GOVERNED_NODES),
            self.user,
            self.ident.is_member,
            namespace=(self.ns.catalog, self.ns.schema),
            on_clock=self._clock_read,
        )
        if changed and walked is not None:
            walked.stale = True
        return tree

    def _clock_read(self) -> None:
        self.clock_read = True

    def note(self, access: TableAccess, extra: tuple[str, ...] = ()) -> None:
        """Remember the deciding policies and row filters of a table, for the audit lines."""
        name = access.table.full_name
        self.decided[name] = tuple(dict.fromkeys((*access.policy_ids, *extra)))
        self.filters[name] = tuple(f.id for f in access.row_filters)

    def access(self, ref: TableRef, privilege: str = "select") -> TableAccess:
        """The user's access to a table read; refused unless it grants `privilege`."""
        access = self.enforcer.table_access(self.ident, ref.info)
        self.note(access)
        if privilege not in access.privileges:
            raise denied_or_missing(self.user, privilege, ref.info.full_name)
        return access

    def reads(
        self,
        stmt: exp.Expression,
        targets: set[int] | None = None,
        walked: Walked | None = None,
    ) -> tuple[list[TableRef], list[tuple[TableRef, TableAccess]]]:
        """Resolve the statement's tables (`targets`: node ids written, not read) and decide
        every read; `walked`: the statement's one walk, read if current."""
        resolved = resolve_tables(stmt, self.catalog, self.ns, self.user, targets, walked)
        reads = [(r, self.access(r)) for r in resolved.reads]
        return resolved.targets, reads

    def views_sql(
        self,
        stmt: exp.Expression,
        reads: list[tuple[TableRef, TableAccess]],
        planned: Planned,
        scan: exp.Expression | None = None,
        walked: Walked | None = None,
        aggregated: bool = False,
    ) -> exp.Expression:
        """Replace reads by views; `scan` is the user's part when `stmt` wraps it;
        `walked`: the statement's one walk, read if current; `aggregated`: the reads of
        aggregate-only tables were checked and guarded (governance/rewrite/aggregation.py), else
        such a read is refused (writes, DDL and view bodies never read one)."""
        if not aggregated:
            for _, access in reads:
                rule = access.aggregate
                if rule is not None:
                    raise Refused(
                        f"aggregation policy {', '.join(rule.ids)}: table "
                        f"{access.table.full_name} is aggregate-only for user {self.user}; "
                        f"only a query may read it (refused in a {self.cmd} statement)",
                        tables=(access.table.full_name,),
                    )
        if walked is not None and any(_drops_nodes(ref.node) for ref, _ in reads):
            walked.stale = True  # the rewrite drops what the table node holds beyond names
        current = valid(stmt, walked)
        stmt, views = replace_reads(stmt, reads, current.columns if current else None)
        check_hidden_columns(stmt, views, self.user, current)
        if scan is None:
            names, _, star, qstars = columns_named(stmt, current)
        else:
            names, _, star, qstars = columns_named(scan)
        planned.views = views
        for i, v in enumerate(views):
            planned.columns[i] = columns_read(v, names, star, qstars)
            for c in planned.columns[i]:
                leak = v.access.mask_reads_hidden.get(c.lower())
                if leak is not None:  # the mask would show the hidden column's values
                    raise AccessDenied(
                        f"access denied: column mask {leak[0]} on "
                        f"{v.access.table.full_name}.{c} reads column {leak[1]}, which is "
                        f"hidden from user {self.user}",
                        cmd=self.cmd,
                        tables=(v.access.table.full_name,),
                        policies=(leak[0],),
                    )
        return stmt

    @staticmethod
    def identity(planned: Planned, table: TableInfo) -> DeltaIdentity:
        """The Delta table at `table`'s location as this plan reads it (one listing of its
        log, no JVM); a log whose table id cannot be read is refused (fail closed)."""
        known = planned.identities.get(table.location)
        if known is None:
            try:
                known = delta_identity(table.location)
            except IdentityUnreadable:
                raise Refused(
                    f"table {table.full_name} cannot be read: its Delta log names no table id"
                ) from None
            planned.identities[table.location] = known
        return known

    def columns_at_version(self, access: TableAccess, node: exp.Table) -> tuple[int, ...] | None:
        """For `VERSION AS OF n`: positions of the visible columns that version has (None:
        all of them, or the version is not readable here), so the view is built from the
        schema of the version read, not today's. A version lacking a column a row filter or
        mask on it reads is refused: the rule could not be applied as written."""
        version = node.args.get("version")
        literal = version.expression if version is not None else None
        if str(getattr(version, "name", "")).upper() != "VERSION" or not isinstance(
            literal, exp.Literal
        ):
            return None
        try:
            number = int(literal.this)
        except ValueError:
            return None
        table = access.table
        names = columns_at(table.location, number)
        if names is None:
            return None
        present = {n.lower() for n in names}
        visible = access.visible_columns
        keep = tuple(i for i, c in enumerate(visible) if c.lower() in present)
        if len(keep) == len(visible):
            return None
        missing = {c.name.lower() for c in table.columns} - present
        needed = set(self.ps.filter_columns(access))
        for i in keep:
            applied = access.masks.get(visible[i].lower())
            if applied is not None:
                needed |= mask_columns(applied.mask)
        if needed & missing:
            raise Refused(
                f"time travel refused: table {table.full_name} at version {number} lacks a "
                f"column its row filters or masks for user {self.user} read"
            )
        if not keep:
            raise Refused(
                f"time travel refused: table {table.full_name} at version {number} has no "
                f"column user {self.user} may read"
            )
        return keep

    def generate(
        self,
        stmt: exp.Expression,
        planned: Planned,
        query: bool = False,
        walked: Walked | None = None,
    ) -> str:
        """The statement's SQL with each view's body spliced in; the verifier learns the
        bodies it must find in Spark's plan. A `query`'s views project only the visible
        columns the statement can name, and read a table at its current version through
        its pin: what Spark's analysis of the statement costs is in proportion to both.
        `walked`: the statement's one walk, read if current."""
        current = valid(stmt, walked)
        if current is not None and current.reshaped_by_generation():
            current = None  # the words check reads the tree as generation leaves it
        outer = spark_sql(stmt, current)  # a current, unreshaped walk skips SELECT transforms
        words = None
        if query and planned.views:
            words = words_spark_may_resolve(stmt, outer, current)
        bodies = []
        for k, v in enumerate(planned.views):
            table = v.access.table
            derived = self.derived.get(table.full_name)
            node = v.ref.node
            picks = None
            if words is not None and derived is None and not node.args.get("sample"):
                picks = columns_to_project(v.access, words)  # (a sample's seed is drawn per
                # view text, and the verifier must see the whole view's draw)
            whole_picks = None if derived is not None else self.columns_at_version(v.access, node)
            if whole_picks is not None:  # a version before columns were added: its own view
                picks = whole_picks if picks is None else _within(picks, whole_picks)
            source = derived
            known = planned.identities  # mapping tables' too: an inlined lookup holds a version
            named = None
            if derived is None:
                ident = self.identity(planned, table)
                if (
                    query
                    and self.pin is not None
                    and not node.args.get("version")
                    and not node.args.get("sample")
                ):
                    source = self.pin(table, ident.table_id)
                    planned.pins[source] = table.location
            body = view_sql(self.ps, self.ident, v.access, node, source, picks, known)
            if source in planned.pins and self.pin_view is not None:
                named = self.pin_view(source, body)  # analysed once per process, read by name
                if named is not None:
                    planned.pins[named] = table.location
            if derived is not None:
                planned.expected.add_derived(table.location, v.access.visible_columns)
                planned.derived.add(table.full_name)
            else:
                reads = self.ps.statement_reads(self.ident, v.access, known)
                locations = [r.table.location for r in reads if not r.inlined]
                visible = v.access.visible_columns
                whole = (
                    body
                    if picks == whole_picks
                    else view_sql(self.ps, self.ident, v.access, node, source, whole_picks, known)
                )
                columns = visible if picks is None else tuple(visible[i] for i in picks)
                cut = None if picks == whole_picks else _positions(picks, whole_picks)
                planned.expected.add_view(table.location, whole, columns, locations, cut, owner=k)
                planned.policy_reads += reads
            bodies.append(named if named is not None else f"({body})")
        return splice(outer, planned.views, bodies)

    def refuse_masked_reads(self, planned: Planned) -> None:
        """No copying masked data: a write may not read a column masked for its user."""
        masked: list[str] = []
        ids: list[str] = []
        for i, v in enumerate(planned.views):
            for c in planned.columns.get(i, []):
                applied = v.access.masks.get(c.lower())
                if applied is not None:
                    masked.append(f"{v.access.table.full_name}.{c}")
                    ids.append(applied.mask.id)
        if masked:
            target = planned.target_name or ""
            raise AccessDenied(
                f"access denied: a write may not read masked column(s) {', '.join(masked)} "
                f"(user {self.user})",
                cmd=planned.cmd,
                tables=(target,),
                policies=tuple(dict.fromkeys([*ids, *self.decided.get(target, ())])),
            )

    def target(self, node: exp.Table, privilege: str, cmd: str) -> tuple[TableRef, TableAccess]:
        """The write target and the user's access to it; refused unless `privilege` holds."""
        if not isinstance(node, exp.Table):
            raise Refused(f"{cmd.upper()} target is not a table")
        targets, _ = self.reads(node, {id(node)})
        if not targets:
            c, s, t = qualify_name(table_parts(node), self.ns)
            raise denied_or_missing(self.user, privilege, f"{c}.{s}.{t}".lower())
        ref = targets[0]
        access = self.enforcer.table_access(self.ident, ref.info)
        ok, ids = self.enforcer.has_privilege(
            self.ident, privilege, ref.info.catalog, ref.info.schema, ref.info.name
        )
        self.note(access, ids)
        if not ok:
            raise denied_or_missing(self.user, privilege, ref.info.full_name)
        return ref, access


# A read's Table node keeps these when the rewrite replaces it (its name parts are dropped,
# which only the words check reads, and there only ever towards projecting more columns).
_MOVED_OR_NAMES = frozenset({"this", "db", "catalog", "alias", "pivots", "joins"})


def _drops_nodes(node: exp.Table) -> bool:
    """Whether replacing this read drops more than its name (time travel, a sample...)."""
    return any(v for k, v in node.args.items() if k not in _MOVED_OR_NAMES)


def delta_table(location: str) -> exp.Table:
    """`delta.`<location>``: a Delta table by path, as a tree (the location quoted once)."""
    return exp.Table(this=exp.to_identifier(location, quoted=True), db=exp.to_identifier("delta"))


def _within(picks: tuple[int, ...], allowed: tuple[int, ...]) -> tuple[int, ...]:
    """The picked positions a version has; at least one (a projection cannot be empty)."""
    kept = tuple(i for i in picks if i in allowed)
    return kept or allowed[:1]


def _positions(
    picks: tuple[int, ...] | None, whole: tuple[int, ...] | None
) -> tuple[int, ...] | None:
    """`picks` (positions among the visible columns) as positions in the whole view's
    projection, which `whole` narrowed to a version's columns (None: every visible one)."""
    if picks is None or whole is None:
        return picks
    return tuple(whole.index(i) for i in picks)
