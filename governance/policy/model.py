"""The policy set as plain data: what the YAML contract says, nothing about how it is decided.

Kept free of casbin, Spark and YAML so the loader, the validator, the enforcer and the
diff tool can all share one vocabulary (the casbin split: model apart from adapter and
enforcer).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from governance.identity import canonical_name
from governance.policy.masks import MASK_KINDS

PRIVILEGES: tuple[str, ...] = ("select", "modify", "create", "manage")
#: The right to set, change or remove a column tag (extension; `manage` does not imply it).
APPLY_TAG = "apply_tag"
ANY_TAG = "*"  # `tags: ["*"]` of an apply_tag grant: every tag
MASKS: tuple[str, ...] = tuple(MASK_KINDS)  # one table of masks: governance/policy/masks.py
EFFECTS: tuple[str, ...] = ("allow", "deny")
FILTER_KINDS: tuple[str, ...] = ("permissive", "restrictive")
#: What an aggregation policy does with a group below its minimum size (extension).
SMALL_GROUP_ACTIONS: tuple[str, ...] = ("suppress", "refuse")
Effect = Literal["allow", "deny"]
FilterKind = Literal["permissive", "restrictive"]
SmallGroup = Literal["suppress", "refuse"]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a rule was written, so every error and decision can point at a file and line."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}" if self.line else self.file


UNKNOWN_SOURCE = Source("<memory>")


@dataclass(frozen=True, slots=True)
class NamePattern:
    """`catalog.schema.table[.column]` where any part may be `*`; stored lower-case."""

    catalog: str
    schema: str
    table: str
    column: str | None = None

    @classmethod
    def parse(cls, text: str, *, allow_column: bool = False) -> NamePattern:
        parts = [p.strip().strip("`").lower() for p in str(text).split(".")]
        if len(parts) == 4 and allow_column:
            return cls(parts[0], parts[1], parts[2], parts[3])
        if len(parts) != 3 or any(not p for p in parts):
            expected = "catalog.schema.table[.column]" if allow_column else "catalog.schema.table"
            raise ValueError(f"'{text}' is not a name of the form {expected}")
        return cls(parts[0], parts[1], parts[2])

    def matches_table(self, catalog: str, schema: str, table: str) -> bool:
        return (
            _part_matches(self.catalog, catalog)
            and _part_matches(self.schema, schema)
            and _part_matches(self.table, table)
        )

    def matches_column(self, catalog: str, schema: str, table: str, column: str) -> bool:
        if self.column is None:
            return False
        return self.matches_table(catalog, schema, table) and _part_matches(self.column, column)

    @property
    def table_key(self) -> tuple[str, str, str]:
        return (self.catalog, self.schema, self.table)

    def __str__(self) -> str:
        base = f"{self.catalog}.{self.schema}.{self.table}"
        return f"{base}.{self.column}" if self.column is not None else base


def _part_matches(pattern: str, value: str) -> bool:
    return pattern == "*" or pattern == value.lower()


@dataclass(frozen=True, slots=True)
class Principal:
    """`user:NAME`, `group:NAME` or `*` (every user); names compare case-insensitively."""

    kind: Literal["user", "group", "any"]
    name: str

    @classmethod
    def parse(cls, text: str) -> Principal:
        text = str(text).strip()
        if text == "*":
            return ANY
        if text.startswith("user:"):
            return cls("user", _principal_name(text[5:], text, "user"))
        if text.startswith("group:"):
            return cls("group", _principal_name(text[6:], text, "group"))
        if ":" in text:
            raise ValueError(f"'{text}' is not a principal: use user:NAME, group:NAME, NAME or '*'")
        return cls("user", _principal_name(text, text, "user"))

    @property
    def key(self) -> str:
        """The casbin subject string: `user:alice`, `group:analysts` or `*`."""
        return "*" if self.kind == "any" else f"{self.kind}:{self.name}"

    def __str__(self) -> str:
        return self.key


def _principal_name(name: str, text: str, kind: str) -> str:
    """The canonical name (governance.identity): a look-alike is refused, never lower-cased
    onto an ASCII user; InvalidName is a ValueError."""
    name = name.strip()
    if not name:
        raise ValueError(f"'{text}' names no principal")
    return canonical_name(name, kind)


ANY = Principal("any", "*")


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    owners: tuple[Principal, ...] = ()
    description: str = ""
    schemas: tuple[str, ...] = ()  # lower-case `catalog.schema`
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    principals: tuple[Principal, ...]
    privileges: tuple[str, ...]
    on: NamePattern
    effect: Effect = "allow"
    columns: tuple[str, ...] | None = None  # lower-case; None means the whole table
    source: Source = UNKNOWN_SOURCE
    file_domain: str | None = None  # the `domain:` its file declares


@dataclass(frozen=True, slots=True)
class ColumnMatch:
    """`match_columns: {tag: region, as: r}`: the rule applies to columns tagged `tag`, and
    `as` names the matched column in its expression (governance.policy.tags)."""

    tag: str  # lower-case
    as_: str | None = None  # lower-case; required for row filters


@dataclass(frozen=True, slots=True)
class RowFilter:
    id: str
    on: NamePattern
    principals: tuple[Principal, ...]
    where: str
    kind: FilterKind = "permissive"
    source: Source = UNKNOWN_SOURCE
    file_domain: str | None = None
    match: ColumnMatch | None = None  # tag-driven (extension of the v1 format)


@dataclass(frozen=True, slots=True)
class ColumnMask:
    id: str
    on: NamePattern
    mask: str
    tags: tuple[str, ...] = ()  # lower-case
    columns: tuple[str, ...] = ()  # lower-case
    expression: str | None = None  # for mask: custom, with `{col}`
    principals: tuple[Principal, ...] = (ANY,)
    except_: tuple[Principal, ...] = ()
    priority: int = 0
    source: Source = UNKNOWN_SOURCE
    file_domain: str | None = None
    match: ColumnMatch | None = None  # tag-driven (extension of the v1 format)


@dataclass(frozen=True, slots=True)
class AggregationPolicy:
    """`aggregation_policies:` (extension): the tables matching `on` (and, with `tags`,
    only those with a column or table tag among them) are aggregate-only for `principals`
    minus `except`: a query may return only aggregates over groups of at least
    `min_group_size` of their rows (governance/rewrite/aggregation.py)."""

    id: str
    on: NamePattern
    min_group_size: int
    principals: tuple[Principal, ...] = (ANY,)
    except_: tuple[Principal, ...] = ()
    on_small_group: SmallGroup = "suppress"
    identifying_columns: tuple[str, ...] = ()  # lower-case; only ever counted
    tags: tuple[str, ...] = ()  # lower-case; empty: every table matching `on`
    source: Source = UNKNOWN_SOURCE
    file_domain: str | None = None

    def covers(
        self,
        ps: PolicySet,
        catalog: str,
        schema: str,
        table: str,
        columns: Iterable[str],
        column_tags: Mapping[str, frozenset[str]] | None = None,
    ) -> bool:
        """Whether the policy reaches this table (its `on`, and its `tags` if any): a table
        tag of the policy files, or a column tag of the files or of `column_tags` (lower-case
        column -> tags from the catalog and the Delta table, as masks read them)."""
        if not self.on.matches_table(catalog, schema, table):
            return False
        if not self.tags:
            return True
        wanted = set(self.tags)
        if ps.table_tags(catalog, schema, table) & wanted:
            return True
        extra = column_tags or {}
        return any(
            (ps.column_tags(catalog, schema, table, c) | extra.get(c.lower(), frozenset())) & wanted
            for c in columns
        )


@dataclass(frozen=True, slots=True)
class TagGrant:
    """`privileges: [apply_tag]` with `tags: [...]`: who may add or remove these tags on
    the columns of tables matching `on` (governance.policy.tag_rights)."""

    id: str
    principals: tuple[Principal, ...]
    on: NamePattern
    tags: tuple[str, ...]  # lower-case; ANY_TAG for every tag
    effect: Effect = "allow"
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True)
class TagAssignment:
    on: NamePattern  # table pattern, or column pattern when `on.column` is set
    tags: tuple[str, ...]  # lower-case
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True)
class PolicySet:
    """Every policy file of one directory, merged."""

    groups: dict[str, tuple[Principal, ...]] = field(default_factory=dict)  # lower-case group
    group_sources: dict[str, Source] = field(default_factory=dict)
    domains: dict[str, Domain] = field(default_factory=dict)
    tags: tuple[TagAssignment, ...] = ()
    grants: tuple[Grant, ...] = ()
    row_filters: tuple[RowFilter, ...] = ()
    column_masks: tuple[ColumnMask, ...] = ()
    tag_grants: tuple[TagGrant, ...] = ()  # apply_tag grants (extension)
    aggregation_policies: tuple[AggregationPolicy, ...] = ()  # extension
    governed_tags: dict[str, Source] = field(default_factory=dict)  # the tag vocabulary
    files: tuple[str, ...] = ()
    content_hash: str = ""  # sha256 over the files' bytes, for reload audit lines

    def column_tags(self, catalog: str, schema: str, table: str, column: str) -> set[str]:
        out: set[str] = set()
        for t in self.tags:
            if t.on.column is not None and t.on.matches_column(catalog, schema, table, column):
                out.update(t.tags)
        return out

    def table_tags(self, catalog: str, schema: str, table: str) -> set[str]:
        out: set[str] = set()
        for t in self.tags:
            if t.on.column is None and t.on.matches_table(catalog, schema, table):
                out.update(t.tags)
        return out

    def domain_of_schema(self, catalog: str, schema: str) -> str | None:
        key = f"{catalog}.{schema}".lower()
        for d in self.domains.values():
            if key in d.schemas:
                return d.name
        return None


def group_users(groups: Mapping[str, tuple[Principal, ...]], group: str) -> frozenset[str]:
    """Users in `group`, directly or through nested groups (a cycle is walked once).

    The one expansion of groups into users: the validator's audiences and the enforcer's
    `members_of` use it; casbin's role manager answers the other direction (a user's groups)
    and the equivalence tests hold the two together."""
    users: set[str] = set()
    seen: set[str] = set()
    stack = [group]
    while stack:
        g = stack.pop()
        if g in seen:
            continue
        seen.add(g)
        for m in groups.get(g, ()):
            if m.kind == "user":
                users.add(m.name)
            elif m.kind == "group":
                stack.append(m.name)
    return frozenset(users)


def content_hash(blobs: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in blobs:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return "sha256:" + h.hexdigest()
