"""Compile a PolicySet into casbin: the model text plus an adapter that feeds its lines.

Lines (casbin's `p`, `p2`, `p3`, `g` sections), each field named once by the line types
below (the model's `[policy_definition]` and the enforcer's index both read these names):
- `g, user:alice, group:analysts` and `g, group:emea, group:analysts`: membership, nested.
- `p, SUB, OBJ, ACT, EFT, ID`: grants; OBJ is `cat.schema.table` or
  `cat.schema.table.column` for column-level grants (any part may be `*`).
- `p2, SUB, OBJ, KIND, ID`: row filters (the expression stays in the PolicySet, found by ID).
- `p3, SUB, OBJ, ID, RANK, EXEMPT`: column masks (RANK is the mask's priority; casbin
  gives a field named `priority` a meaning of its own); EXEMPT is `|`-joined principals.
Domain owners get `p, OWNER, cat.schema.*, manage, allow, domain:NAME`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import casbin
from casbin.persist import Adapter

from governance.policy.model import NamePattern, PolicySet


class GrantLine(NamedTuple):
    """A `p` line: SUB may ACT (or is denied it, by EFT) on OBJ, decided by grant ID."""

    sub: str
    obj: str
    act: str
    eft: str
    id: str


class FilterLine(NamedTuple):
    """A `p2` line: row filter ID (of KIND) applies to SUB reading table OBJ."""

    sub: str
    obj: str
    kind: str
    id: str


class MaskLine(NamedTuple):
    """A `p3` line: mask ID (priority RANK) applies to SUB on table OBJ unless EXEMPT."""

    sub: str
    obj: str
    id: str
    rank: str
    exempt: str


Line = GrantLine | FilterLine | MaskLine
LINE_TYPES: dict[str, type[Line]] = {"p": GrantLine, "p2": FilterLine, "p3": MaskLine}
EXEMPT_SEPARATOR = "|"

MODEL_TEXT = (
    """
[request_definition]
r = sub, obj, act

[policy_definition]
"""
    + "".join(f"{ptype} = {', '.join(line._fields)}\n" for ptype, line in LINE_TYPES.items())
    + """
[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = (g(r.sub, p.sub) || r.sub == p.sub || p.sub == "*") && nameMatch(r.obj, p.obj) \
&& (r.act == p.act || p.act == "manage")
"""
)


def name_match(request: str, pattern: str) -> bool:
    """Three- or four-part names; a `*` part matches any value; a table pattern covers its
    columns. A `*` in the request (a whole schema, say) is only covered by a `*` pattern part."""
    req = request.split(".")
    pat = pattern.split(".")
    if len(pat) > len(req):
        return False
    return all(p == "*" or p == r for p, r in zip(pat, req, strict=False))


def object_name(on: NamePattern, column: str | None = None) -> str:
    """OBJ of a line: the table pattern, or `table.column` for a column-level grant."""
    return str(on) if column is None else f"{on}.{column}"


def split_object(obj: str) -> tuple[tuple[str, str, str], str | None]:
    """OBJ back into the table key and the column (None for a table-level line)."""
    parts = obj.split(".")
    return (parts[0], parts[1], parts[2]), (parts[3] if len(parts) == 4 else None)


def domain_owner_grant_id(domain: str) -> str:
    return f"domain:{domain}"


def policy_lines(ps: PolicySet) -> Iterator[tuple[str, Line | tuple[str, str]]]:
    """Every casbin line of the set as (ptype, fields)."""
    for group, members in ps.groups.items():
        for m in members:
            yield "g", (m.key, f"group:{group}")
    for g in ps.grants:
        objs = (
            [object_name(g.on)] if g.columns is None else [object_name(g.on, c) for c in g.columns]
        )
        for sub in g.principals:
            for obj in objs:
                for priv in g.privileges:
                    yield "p", GrantLine(sub.key, obj, priv, g.effect, g.id)
    for d in ps.domains.values():
        for owner in d.owners:
            for schema in d.schemas:
                rid = domain_owner_grant_id(d.name)
                yield "p", GrantLine(owner.key, f"{schema}.*", "manage", "allow", rid)
    for f in ps.row_filters:
        for sub in f.principals:
            yield "p2", FilterLine(sub.key, object_name(f.on), f.kind, f.id)
    for m in ps.column_masks:
        exempt = EXEMPT_SEPARATOR.join(p.key for p in m.except_)
        for sub in m.principals:
            yield "p3", MaskLine(sub.key, object_name(m.on), m.id, str(m.priority), exempt)


class PolicySetAdapter(Adapter):
    """Feeds casbin straight from the PolicySet, skipping casbin's text parsing (100k lines)."""

    def __init__(self, ps: PolicySet) -> None:
        self._ps = ps

    def load_policy(self, model: casbin.Model) -> None:
        sections = model.model
        for ptype, fields in policy_lines(self._ps):
            sections[ptype[0]][ptype].policy.append(list(fields))

    def save_policy(self, model: casbin.Model) -> bool:
        raise NotImplementedError("policies are read-only here: they live in git as YAML")


def build_enforcer(ps: PolicySet) -> casbin.Enforcer:
    model = casbin.Enforcer.new_model(text=MODEL_TEXT)
    enforcer = casbin.Enforcer(model, PolicySetAdapter(ps))
    enforcer.add_function("nameMatch", name_match)
    return enforcer
