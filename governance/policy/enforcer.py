"""Decisions: what one user may do on one table, answered from an index over casbin's lines.

casbin's `enforce()` scans every line per request, which is far too slow at 100k lines.
Here a user's groups are resolved once through casbin's role manager, and rules are looked
up by (subject, table pattern) in dicts built from the casbin model's policy lines. A table
lookup tries the 8 exact/`*` combinations of its three name parts per subject, so the cost
grows with the user's groups, not with the number of lines.

An enforcer is immutable once built; a reload builds a new one and swaps it in.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import product

import casbin
from sqlglot import exp

from catalog.model import TableInfo
from governance.metrics import cache_lookup
from governance.policy.compile import (
    FilterLine,
    GrantLine,
    MaskLine,
    build_enforcer,
    split_object,
)
from governance.policy.expressions import parse_expression
from governance.policy.masks import MASK_KINDS
from governance.policy.model import (
    PRIVILEGES,
    AggregationPolicy,
    ColumnMask,
    PolicySet,
    Principal,
    RowFilter,
    group_users,
)
from governance.policy.tag_rights import may_apply_tag
from governance.policy.tag_state import governed_state
from governance.policy.tags import (
    NO_TAGS,
    ColumnTags,
    TagsUnreadable,
    bind_filter,
    bind_mask,
    column_tags,
)

#: identities remembered per enforcer (users x provider group sets); then forgotten at once
MAX_IDENTITIES = 65_536
_ALL = "\x00all"  # marks a table-level rule in the column slot of the index


@dataclass(frozen=True, slots=True)
class Identity:
    """A user and every principal key that stands for them: `user:x`, `*`, all their groups."""

    user: str
    groups: frozenset[str]  # group names, lower-case, nesting resolved
    keys: tuple[str, ...] = ()  # casbin subjects: `user:x`, `*`, `group:g` ...

    @classmethod
    def of(cls, user: str, groups: frozenset[str]) -> Identity:
        keys = (f"user:{user}", "*", *(f"group:{g}" for g in sorted(groups)))
        return cls(user, groups, keys)

    def is_member(self, group: str) -> bool:
        return group.lower() in self.groups


@dataclass(frozen=True, slots=True)
class AppliedMask:
    column: str  # as the table spells it
    mask: ColumnMask


@dataclass(frozen=True, slots=True)
class AggregateOnly:
    """The aggregation policies one user is under on one table, combined: the largest
    minimum group size, `refuse` if any of them says so, every identifying column."""

    policies: tuple[AggregationPolicy, ...]
    min_group_size: int
    on_small_group: str  # suppress | refuse
    identifying_columns: frozenset[str]  # lower-case

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.policies)

    @classmethod
    def of(cls, policies: tuple[AggregationPolicy, ...]) -> AggregateOnly:
        return cls(
            policies,
            max(p.min_group_size for p in policies),
            "refuse" if any(p.on_small_group == "refuse" for p in policies) else "suppress",
            frozenset(c for p in policies for c in p.identifying_columns),
        )


@dataclass(frozen=True)
class TableAccess:
    """The effective rights of one identity on one table; what the rewriter needs."""

    table: TableInfo
    privileges: frozenset[str]
    visible_columns: tuple[str, ...]  # in table order, as the table spells them
    hidden_columns: tuple[str, ...]
    row_filters: tuple[RowFilter, ...]
    masks: dict[str, AppliedMask] = field(default_factory=dict)  # lower-case column -> mask
    grant_ids: tuple[str, ...] = ()  # the grants that decided select
    hidden_by: dict[str, tuple[str, ...]] = field(default_factory=dict)  # column -> deny ids
    # lower-case masked column -> (mask id, hidden column its custom expression reads)
    mask_reads_hidden: dict[str, tuple[str, str]] = field(default_factory=dict)
    tags: ColumnTags = NO_TAGS  # the column tags tag-driven rules were decided on
    aggregate: AggregateOnly | None = None  # aggregate-only for this user (extension)

    @property
    def can_select(self) -> bool:
        return "select" in self.privileges

    @functools.cached_property
    def policy_ids(self) -> tuple[str, ...]:
        """Computed once per access: the enforcer caches accesses, and every statement
        reading the table asks again (for its audit line)."""
        ids = list(self.grant_ids)
        ids += [f.id for f in self.row_filters]
        ids += [m.mask.id for m in self.masks.values()]
        ids += list(self.aggregate.ids) if self.aggregate is not None else []
        return tuple(dict.fromkeys(ids))


_MASK_COLUMNS: dict[tuple[str, str], frozenset[str]] = {}


def mask_columns(mask: ColumnMask) -> frozenset[str]:
    """Lower-case columns a custom mask's expression names (its `{col}` is not one); an
    expression that does not parse reads nothing here (the rewriter refuses it anyway)."""
    if mask.mask != "custom" or not mask.expression:
        return frozenset()
    key = (mask.id, mask.expression)
    hit = _MASK_COLUMNS.get(key)
    if hit is None:
        tree, _ = parse_expression(mask.expression, "mask")
        hit = (
            frozenset()
            if tree is None
            else frozenset(c.name.lower() for c in tree.find_all(exp.Column))
        )
        _MASK_COLUMNS[key] = hit
    return hit


class AmbiguousMask(Exception):
    """Two masks of equal priority hit one column for this user (validation should catch it),
    or two masks reach it through different tags and neither hides more than the other."""


def _top(masks: Iterable[ColumnMask], where: str) -> ColumnMask:
    """The mask of highest priority; two of equal priority are ambiguous."""
    masks = list(masks)
    top = max(m.priority for m in masks)
    best = [m for m in masks if m.priority == top]
    if len(best) > 1:
        names = ", ".join(sorted(m.id for m in best))
        raise AmbiguousMask(f"masks {names} have equal priority on column {where}")
    return best[0]


def strongest(masks: list[ColumnMask], where: str) -> ColumnMask:
    """Masks reaching one column through different tags, a tag the policies did not put on
    it among them (a Delta tag, a steward's or a write's): the one hiding the most applies
    (governance.policy.masks strength: nothing shown > a digest > a part of the value), whatever
    its priority, so a tag a copy carries never weakens another; priority decides between
    masks of one output. Two showing different parts, or a custom mask (its strength is
    unknown) against any but a mask showing nothing, cannot be ordered: ambiguous."""
    strength = {id(m): MASK_KINDS[m.mask].strength if m.mask in MASK_KINDS else 0 for m in masks}
    level = max(strength.values())
    best = [m for m in masks if strength[id(m)] == level]
    outputs = {(m.mask, m.expression) for m in best}
    custom = any(m.mask == "custom" for m in masks)
    if level == 3 or (not custom and level == 2) or len(outputs) == 1:
        return max(best, key=lambda m: m.priority)
    names = ", ".join(sorted(m.id for m in masks))
    raise AmbiguousMask(
        f"masks {names} reach column {where} through different tags and neither hides "
        "more than the other"
    )


@dataclass(frozen=True, slots=True)
class _GrantRule:
    effect: str
    id: str


class PolicyEnforcer:
    """Answers decisions for one immutable PolicySet."""

    def __init__(self, ps: PolicySet) -> None:
        self.policy_set = ps
        self.casbin: casbin.Enforcer = build_enforcer(ps)
        self._filters = {f.id: f for f in ps.row_filters}
        self._filter_order = {f.id: i for i, f in enumerate(ps.row_filters)}
        self._masks = {m.id: m for m in ps.column_masks}
        # rules that need a table's column tags (governance.policy.tags)
        self._tag_driven = {f.id for f in ps.row_filters if f.match is not None}
        self._tag_driven |= {m.id for m in ps.column_masks if m.match is not None}
        # (subject, privilege) -> (cat, schema, table) -> column|_ALL -> rules
        self._grants: dict[tuple[str, str], dict[tuple[str, str, str], dict[str, list[_GrantRule]]]]
        self._grants = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
        # subject -> (cat, schema, table) -> filter/mask ids
        self._filter_idx: dict[str, dict[tuple[str, str, str], list[str]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._mask_idx: dict[str, dict[tuple[str, str, str], list[str]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._build_index()
        self._identities: dict[object, Identity] = {}
        self._access_cache: dict[tuple, TableAccess] = {}
        self._lock = threading.Lock()

    def _build_index(self) -> None:
        """Index casbin's own lines (read by the field names compile.py gives them)."""
        model = self.casbin.get_model().model["p"]
        for grant in map(GrantLine._make, model["p"].policy):
            table, column = split_object(grant.obj)
            rule = _GrantRule(grant.eft, grant.id)
            self._grants[(grant.sub, grant.act)][table][column or _ALL].append(rule)
        for line in map(FilterLine._make, model["p2"].policy):
            self._filter_idx[line.sub][split_object(line.obj)[0]].append(line.id)
        for line in map(MaskLine._make, model["p3"].policy):
            self._mask_idx[line.sub][split_object(line.obj)[0]].append(line.id)
        # freeze the defaultdicts so lookups of absent keys do not grow them
        self._grants = {k: {t: dict(c) for t, c in v.items()} for k, v in self._grants.items()}
        self._filter_idx = {k: dict(v) for k, v in self._filter_idx.items()}
        self._mask_idx = {k: dict(v) for k, v in self._mask_idx.items()}

    # identity -------------------------------------------------------------------------

    def identity(self, user: str, provided: frozenset[str] = frozenset()) -> Identity:
        """Groups come from casbin's role manager, resolved once per user, provider groups
        and enforcer. `provided`: the groups the identity provider (a token's claim, SCIM,
        LDAP) puts the user in for this request; the YAML's nesting applies to them as to
        any group (`analysts: [group:kc-analysts]`), and the YAML `groups:` add to them."""
        user = user.lower()
        key = (user, provided) if provided else user
        ident = self._identities.get(key)
        if ident is None:
            roles = self.casbin.get_implicit_roles_for_user(f"user:{user}")
            roles += self.casbin.get_implicit_roles_for_user("*")
            for group in provided:
                roles.append(f"group:{group}")
                roles += self.casbin.get_implicit_roles_for_user(f"group:{group}")
            groups = frozenset(r[6:] for r in roles if r.startswith("group:"))
            ident = Identity.of(user, groups)
            with self._lock:
                if len(self._identities) >= MAX_IDENTITIES:
                    self._identities.clear()
                self._identities[key] = ident
        return ident

    def row_filter(self, rule_id: str) -> RowFilter | None:
        """The row filter with this id (ids are unique across rule kinds), or None."""
        return self._filters.get(rule_id)

    # privileges -----------------------------------------------------------------------

    def _rules(
        self, ident: Identity, privilege: str, key: tuple[str, str, str]
    ) -> list[tuple[str, list[_GrantRule]]]:
        """(column or _ALL, rules) for every rule whose pattern covers `key`."""
        out: list[tuple[str, list[_GrantRule]]] = []
        variants = list(product(*[(p, "*") if p != "*" else ("*",) for p in key]))
        for sub in ident.keys:
            for priv in {privilege, "manage"}:
                by_table = self._grants.get((sub, priv))
                if not by_table:
                    continue
                for v in variants:
                    cols = by_table.get(v)
                    if cols:
                        out.extend(cols.items())
        return out

    def has_privilege(
        self, ident: Identity, privilege: str, catalog: str, schema: str, table: str = "*"
    ) -> tuple[bool, tuple[str, ...]]:
        """Table-level decision (deny beats allow; manage implies every privilege).

        `table="*"` asks for the whole schema (CREATE TABLE in it), which only a rule with a
        `*` table part covers. Returns the decision and the ids of the deciding grants.
        """
        key = (catalog.lower(), schema.lower(), table.lower())
        allow: list[str] = []
        for column, rules in self._rules(ident, privilege, key):
            if column != _ALL:
                continue
            for r in rules:
                if r.effect == "deny":
                    return False, (r.id,)
                allow.append(r.id)
        return bool(allow), tuple(dict.fromkeys(allow))

    def privileges(self, ident: Identity, table: TableInfo) -> frozenset[str]:
        out = set()
        for priv in PRIVILEGES:
            if self.has_privilege(ident, priv, table.catalog, table.schema, table.name)[0]:
                out.add(priv)
        return frozenset(out)

    # table access ---------------------------------------------------------------------

    def table_access(self, ident: Identity, table: TableInfo) -> TableAccess:
        """Cached per user, table version and Delta tag version: the enforcer is immutable
        once built."""
        tags = self._column_tags(ident, table)
        cache_key = (ident.keys, table.full_name, table.updated_at, table.location, tags.key)
        hit = self._access_cache.get(cache_key)
        cache_lookup("access", hit is not None)
        if hit is not None:
            return hit
        access = self._table_access(ident, table, tags)
        if len(self._access_cache) > 100_000:
            self._access_cache.clear()
        self._access_cache[cache_key] = access
        return access

    def _column_tags(self, ident: Identity, table: TableInfo) -> ColumnTags:
        """The table's column tags, read only when a tag-driven rule may apply to this user
        here (TagsUnreadable, a refusal, if they cannot be read)."""
        if self._tagged_aggregation(ident, table):  # its `tags:` read the same tags
            return column_tags(self.policy_set, table)
        if not self._tag_driven:  # no tag-driven rule at all: the common, free case
            return NO_TAGS
        key = (table.catalog.lower(), table.schema.lower(), table.name.lower())
        ids = self._lookup(self._filter_idx, ident, key) + self._lookup(self._mask_idx, ident, key)
        if not any(i in self._tag_driven for i in ids):
            return NO_TAGS
        return column_tags(self.policy_set, table)

    def _tagged_aggregation(self, ident: Identity, table: TableInfo) -> bool:
        """Whether an aggregation policy with `tags:` may reach this user on this table."""
        keys = set(ident.keys)
        return any(
            p.tags
            and p.on.matches_table(table.catalog, table.schema, table.name)
            and any(k.key in keys for k in p.principals)
            and not any(k.key in keys for k in p.except_)
            for p in self.policy_set.aggregation_policies
        )

    def _table_access(self, ident: Identity, table: TableInfo, tags: ColumnTags) -> TableAccess:
        key = (table.catalog.lower(), table.schema.lower(), table.name.lower())
        allow_all = False
        deny_all = False
        allow_cols: set[str] = set()
        deny_cols: dict[str, list[str]] = {}
        deny_all_ids: list[str] = []
        ids: list[str] = []
        for column, rules in self._rules(ident, "select", key):
            for r in rules:
                if column == _ALL:
                    if r.effect == "deny":
                        deny_all = True
                        deny_all_ids.append(r.id)
                    else:
                        allow_all = True
                elif r.effect == "deny":
                    deny_cols.setdefault(column, []).append(r.id)
                else:
                    allow_cols.add(column)
                ids.append(r.id)
        visible: list[str] = []
        hidden: list[str] = []
        hidden_by: dict[str, tuple[str, ...]] = {}
        for c in table.columns:
            low = c.name.lower()
            ok = not deny_all and (allow_all or low in allow_cols) and low not in deny_cols
            (visible if ok else hidden).append(c.name)
            if not ok:
                denied = deny_all_ids + deny_cols.get(low, [])
                hidden_by[low] = tuple(dict.fromkeys(denied))
        privileges = set(self.privileges(ident, table))
        if visible:
            privileges.add("select")
        else:
            privileges.discard("select")
        filters = tuple(
            bound
            for f in self._applicable_filters(ident, key)
            if (bound := bind_filter(f, tags.tagged(table, f.match.tag) if f.match else []))
        )
        masks = self._applicable_masks(ident, table, key, visible, tags)
        hidden_low = {h.lower() for h in hidden}
        leaks: dict[str, tuple[str, str]] = {}
        for low, applied in masks.items():
            read = sorted(mask_columns(applied.mask) & hidden_low)
            if read:
                leaks[low] = (applied.mask.id, read[0])
        return TableAccess(
            table=table,
            privileges=frozenset(privileges),
            visible_columns=tuple(visible),
            hidden_columns=tuple(hidden),
            row_filters=filters,
            masks=masks,
            grant_ids=tuple(dict.fromkeys(ids)),
            hidden_by=hidden_by,
            mask_reads_hidden=leaks,
            tags=tags,
            aggregate=self.aggregate_only(ident, table, tags if tags is not NO_TAGS else None),
        )

    def aggregate_only(
        self, ident: Identity, table: TableInfo, tags: ColumnTags | None = None
    ) -> AggregateOnly | None:
        """The aggregation policies that make `table` aggregate-only for this user (a
        principal matches and no `except` does), combined; None: none does. A policy's
        `tags:` match the column tags masks read (YAML, the Delta table's, the governed
        state: `column_tags`, read here unless given; TagsUnreadable if they cannot be)."""
        keys = set(ident.keys)
        found = []
        for p in self.policy_set.aggregation_policies:
            if not any(k.key in keys for k in p.principals) or any(
                k.key in keys for k in p.except_
            ):
                continue
            if p.tags and tags is None:
                if not p.on.matches_table(table.catalog, table.schema, table.name):
                    continue
                tags = column_tags(self.policy_set, table)
            cols = tags.columns if tags is not None else {}
            if p.covers(
                self.policy_set,
                table.catalog,
                table.schema,
                table.name,
                (c.name for c in table.columns),
                cols,
            ):
                found.append(p)
        return AggregateOnly.of(tuple(found)) if found else None

    def _lookup(
        self,
        index: dict[str, dict[tuple[str, str, str], list[str]]],
        ident: Identity,
        key: tuple[str, str, str],
    ) -> list[str]:
        variants = list(product(*[(p, "*") for p in key]))
        out: list[str] = []
        for sub in ident.keys:
            by_table = index.get(sub)
            if not by_table:
                continue
            for v in variants:
                out.extend(by_table.get(v, ()))
        return list(dict.fromkeys(out))

    def _applicable_filters(
        self, ident: Identity, key: tuple[str, str, str]
    ) -> tuple[RowFilter, ...]:
        ids = self._lookup(self._filter_idx, ident, key)
        # policy order, so the generated SQL is stable
        return tuple(self._filters[i] for i in sorted(ids, key=self._filter_order.__getitem__))

    def _applicable_masks(
        self,
        ident: Identity,
        table: TableInfo,
        key: tuple[str, str, str],
        visible: list[str],
        tags: ColumnTags,
    ) -> dict[str, AppliedMask]:
        ids = self._lookup(self._mask_idx, ident, key)
        if not ids:
            return {}
        ident_keys = set(ident.keys)
        masks = [
            self._masks[i]
            for i in ids
            if not any(p.key in ident_keys for p in self._masks[i].except_)
        ]
        out: dict[str, AppliedMask] = {}
        # v1 `tags:` masks read the YAML tags and the governed state (tags a steward applied
        # or a write propagated through Lakegate); match_columns the Delta's too
        governed = _governed(table) if any(m.tags for m in masks) else {}
        for col in visible:
            low = col.lower()
            yaml_tags: set[str] | tuple[()] = ()
            if any(m.tags for m in masks):
                yaml_tags = self.policy_set.column_tags(*key, low) | governed.get(low, set())
            col_tags = tags.columns.get(low, frozenset())
            routes: dict[str, list[ColumnMask]] = {}  # how a mask reaches the column
            for m in masks:
                reached = {"": low in m.columns}
                for tag in m.tags:
                    reached[tag] = tag in yaml_tags
                if m.match is not None:
                    t = m.match.tag
                    reached[t] = reached.get(t, False) or t in col_tags
                for route, hit in reached.items():
                    if hit:
                        routes.setdefault(route, []).append(m)
            if not routes:
                continue
            where = f"{table.full_name}.{col}"
            authored = self.policy_set.column_tags(*key, low)
            if all(r == "" or r in authored for r in routes):  # v1: the policy's own tags
                best = _top({id(m): m for ms in routes.values() for m in ms}.values(), where)
            else:
                best = strongest([_top(ms, where) for ms in routes.values()], where)
            out[low] = AppliedMask(col, bind_mask(best, col))
        return out

    def tag_right(
        self, ident: Identity, table: TableInfo, tag: str
    ) -> tuple[bool, tuple[str, ...]]:
        """Whether `ident` may add or remove `tag` on the table's columns (apply_tag)."""
        return may_apply_tag(self.policy_set, ident.keys, table, tag)

    def members_of(self, principal: Principal) -> set[str]:
        """Users a principal stands for (for discovery and diff tools)."""
        if principal.kind == "user":
            return {principal.name}
        if principal.kind == "any":
            return {"*"}
        return set(group_users(self.policy_set.groups, principal.name))


def _governed(table: TableInfo) -> dict[str, frozenset[str]]:
    """The table's governed tag state; one that cannot be read refuses the statement."""
    try:
        return governed_state(table)
    except ValueError:
        raise TagsUnreadable(
            f"governed tags of table {table.full_name} cannot be read from the catalog; "
            "tag-driven policies apply to it, so the statement is refused",
            tables=(table.full_name,),
        ) from None
