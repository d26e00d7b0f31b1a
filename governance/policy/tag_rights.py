"""Governed tags: assigning a tag is a right of its own, and a table keeps its governed tags.

Tags drive masks and row filters (governance.policy.tags), so whoever may move a tag may
unmask a column for everyone. As with Databricks' ASSIGN on a governed tag and Snowflake's
APPLY TAG, `manage` on a table is not enough: every tag added to or removed from a column
through Lakegate needs an `apply_tag` grant covering that tag on that table (deny beats
allow), and when the policies declare `governed_tags`, only those tags may be assigned.

What Lakegate applied is the table's *governed state*, kept in the catalog entry (the
table's catalog property `lakegate.governed_tags`, JSON column -> tags), not in Delta: a
change written to the Delta table directly (a pipeline, anyone with storage access) cannot
lower it. A column's tags are the union of the YAML's, the Delta table's and the governed
state, so a governed tag removed outside Lakegate stays in force (fail closed) until a
holder of the right removes it through Lakegate; tags found in Delta but not in the state
are reported by `lakegate doctor` and `lakegate policy validate` as set outside Lakegate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deltalake import DeltaTable

from catalog.catalog import normalise_location
from catalog.model import TableInfo
from governance.errors import Refused
from governance.policy.model import ANY_TAG, PolicySet, Source, TagGrant
from governance.policy.problems import Problem
from governance.policy.tag_state import TagState, governed_state
from governance.policy.tags import (
    COLUMN_METADATA_KEY,
    TABLE_PROPERTY_PREFIX,
    TagsUnreadable,
    delta_tags,
    split_tags,
)

# ---- the right -------------------------------------------------------------------------


def _covers(g: TagGrant, keys: Iterable[str], table: TableInfo, tag: str) -> bool:
    return (
        any(p.key in keys for p in g.principals)
        and g.on.matches_table(table.catalog, table.schema, table.name)
        and (ANY_TAG in g.tags or tag in g.tags)
    )


def may_apply_tag(
    ps: PolicySet, keys: tuple[str, ...], table: TableInfo, tag: str
) -> tuple[bool, tuple[str, ...]]:
    """Whether a user (their principal keys: `user:x`, `*`, groups) may add or remove `tag`
    on `table`'s columns, and the ids of the deciding apply_tag grants."""
    allow: list[str] = []
    for g in ps.tag_grants:
        if _covers(g, keys, table, tag):
            if g.effect == "deny":
                return False, (g.id,)
            allow.append(g.id)
    return bool(allow), tuple(dict.fromkeys(allow))


@dataclass(frozen=True)
class TagChange:
    """One column's tags before and after a statement, and its governed state before."""

    column: str
    before: frozenset[str]
    after: frozenset[str]
    governed: frozenset[str] = frozenset()

    @property
    def added(self) -> frozenset[str]:
        """Tags the statement adds, or adopts into the governed state (a tag a pipeline set
        outside Lakegate becomes governed when a holder of the right sets it)."""
        return (self.after - self.before) | (self.after - self.governed)

    @property
    def removed(self) -> frozenset[str]:
        return self.before - self.after


def tag_changes(table: TableInfo, properties: Iterable[tuple[str, str]]) -> list[TagChange]:
    """How setting these table properties moves column tags: per column named by a
    `lakegate.tags.<column>` key, its tags before (the Delta table's and the governed
    state) and after (the Delta table's with the new values). Read from the Delta log now,
    not from a cache: a statement that moves a tag is decided on the tags as they are."""
    new = {k.lower(): v for k, v in properties if k.lower().startswith(TABLE_PROPERTY_PREFIX)}
    if not new:
        return []
    before, metadata = _delta_sources(table)
    config = {**before, **new}
    try:
        state = governed_state(table)
    except ValueError:
        raise Refused(
            f"governed tags of table {table.full_name} cannot be read from the catalog",
            tables=(table.full_name,),
        ) from None
    columns = sorted({k[len(TABLE_PROPERTY_PREFIX) :] for k in new})
    out: list[TagChange] = []
    for column in columns:
        delta_before = _column_from(before, metadata, column)
        after = _column_from(config, metadata, column)
        governed = state.get(column, frozenset())
        out.append(TagChange(column, delta_before | governed, after, governed))
    return out


def _column_from(
    config: Mapping[str, str], metadata: Mapping[str, frozenset[str]], column: str
) -> frozenset[str]:
    tags = set(metadata.get(column, frozenset()))
    for key, value in config.items():
        if key.lower() == TABLE_PROPERTY_PREFIX + column and value:
            tags |= split_tags(value)
    return frozenset(tags)


def _delta_sources(table: TableInfo) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """(lower-case tag property keys -> value, column -> column-metadata tags) of the
    table's newest Delta version; a table that cannot be read refuses the statement."""
    try:
        dt = DeltaTable(normalise_location(table.location))
        config = {
            k.lower(): v
            for k, v in (dt.metadata().configuration or {}).items()
            if k.lower().startswith(TABLE_PROPERTY_PREFIX)
        }
        metadata = {
            f.name.lower(): split_tags(v)
            for f in dt.schema().fields
            if isinstance(v := (f.metadata or {}).get(COLUMN_METADATA_KEY), str) and v
        }
    except Exception as e:  # any failure to read the log fails closed
        raise Refused(
            f"tags of table {table.full_name} cannot be read (its Delta log is unreadable: "
            f"{type(e).__name__}), so its tags cannot be changed",
            tables=(table.full_name,),
        ) from None
    return config, metadata


def ungoverned(delta: TagState, state: TagState) -> list[tuple[str, str, str]]:
    """(column, tag, what) for every difference between the Delta table's tags and the
    governed state: `added outside Lakegate` (in force, not governed) or `removed outside
    Lakegate` (still in force: the governed state keeps it)."""
    out: list[tuple[str, str, str]] = []
    for column in sorted(set(delta) | set(state)):
        d, g = delta.get(column, frozenset()), state.get(column, frozenset())
        out += [(column, t, "added outside Lakegate") for t in sorted(d - g)]
        out += [(column, t, "removed outside Lakegate (kept)") for t in sorted(g - d)]
    return out


def ungoverned_tags(table: TableInfo) -> list[tuple[str, str, str]]:
    """`ungoverned` for a catalog table: its Delta tags (newest version) against its
    governed state; for `lakegate doctor` and `lakegate policy validate`."""
    _, delta = delta_tags(table)
    return ungoverned(delta, governed_state(table))


def tag_state_problems(tables: Iterable[TableInfo]) -> list[Problem]:
    """Warnings for tags changed outside Lakegate, per catalog table (`policy validate`
    with a lakegate.yaml, `doctor`): added ones are in force but ungoverned, removed ones
    are kept by the governed state."""
    out: list[Problem] = []
    for table in tables:
        where = Source(f"catalog:{table.full_name}")
        try:
            changes = ungoverned_tags(table)
        except (TagsUnreadable, ValueError):
            out.append(
                Problem.at(
                    where,
                    "tags-unreadable",
                    f"tags of table {table.full_name} cannot be read; statements over it are "
                    "refused while tag-driven rules apply to it",
                    "repair the Delta log or the catalog entry",
                    "warning",
                )
            )
            continue
        for column, tag, what in changes:
            hint = (
                "a holder of APPLY_TAG adopts it by setting it through Lakegate"
                if what.startswith("added")
                else "the governed state still applies it; a holder of APPLY_TAG may remove "
                "it through Lakegate"
            )
            out.append(
                Problem.at(
                    where,
                    "tag-outside-lakegate",
                    f"tag {tag} on column {column} of {table.full_name} was {what}",
                    hint,
                    "warning",
                )
            )
    return out
