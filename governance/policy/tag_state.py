"""A table's governed tag state: the column tags Lakegate applied (a steward's ALTER, a
write's propagation), kept in the catalog entry where a Delta writer cannot lower it
(governance.policy.tag_rights says who may move it; governance.policy.tags unions it
into a column's tags)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from catalog.model import TableInfo

#: The catalog property (Lakegate's own, never Delta's) holding a table's governed tags.
GOVERNED_PROPERTY = "lakegate.governed_tags"

TagState = Mapping[str, frozenset[str]]  # lower-case column -> tags


def governed_state(table: TableInfo) -> dict[str, frozenset[str]]:
    """The tags Lakegate applied to the table's columns (empty when it never did). A state
    that does not parse raises ValueError: the caller fails closed."""
    raw = (table.properties or {}).get(GOVERNED_PROPERTY)
    if not raw:
        return {}
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError(f"{GOVERNED_PROPERTY} of {table.full_name} is not a JSON object")
    out: dict[str, frozenset[str]] = {}
    for column, tags in data.items():
        if not isinstance(column, str) or not isinstance(tags, list):
            raise ValueError(f"{GOVERNED_PROPERTY} of {table.full_name} is malformed")
        if tags:
            out[column.lower()] = frozenset(str(t) for t in tags)
    return out


def with_governed_state(
    properties: Mapping[str, str], updates: Iterable[tuple[str, Iterable[str]]], *, merge: bool
) -> dict[str, str]:
    """The catalog properties with the governed state of some columns replaced (`merge`
    False: a steward's ALTER sets them) or extended (`merge` True: tags propagated by a
    write only add)."""
    state: dict[str, set[str]] = {}
    raw = properties.get(GOVERNED_PROPERTY)
    if raw:
        state = {c: set(t) for c, t in json.loads(raw).items()}
    for column, tags in updates:
        low = column.lower()
        state[low] = (state.get(low, set()) | set(tags)) if merge else set(tags)
    out = dict(properties)
    kept = {c: sorted(t) for c, t in sorted(state.items()) if t}
    if kept:
        out[GOVERNED_PROPERTY] = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    else:
        out.pop(GOVERNED_PROPERTY, None)
    return out
