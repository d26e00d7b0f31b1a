"""Compile a PolicySet into casbin: the model text plus an adapter that feeds its lines.

Lines (casbin's `p`, `p2`, `p3`, `g` sections):
- `g, user:alice, group:analysts` and `g, group:emea, group:analysts`: membership, nested.
- `p, SUB, OBJ, PRIV, EFFECT, ID`: grants; OBJ is `cat.schema.table` or
  `cat.schema.table.column` for column-level grants (any part may be `*`).
- `p2, SUB, OBJ, KIND, ID`: row filters (the expression stays in the PolicySet, found by ID).
- `p3, SUB, OBJ, ID, RANK, EXCEPT`: column masks (RANK is the mask's priority; casbin
  gives a field named `priority` a meaning of its own); EXCEPT is `|`-joined principals.
Domain owners get `p, OWNER, cat.schema.*, manage, allow, domain:NAME`.
"""

from __future__ import annotations

from collections.abc import Iterator

import casbin
from casbin.persist import Adapter

from governance.policy.model import PolicySet

MODEL_TEXT = """
[request_definition]
r = sub, obj, act

[policy_definition]
p = sub, obj, act, eft, id
p2 = sub, obj, kind, id
p3 = sub, obj, id, rank, except

[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = (g(r.sub, p.sub) || r.sub == p.sub || p.sub == "*") && nameMatch(r.obj, p.obj) \
&& (r.act == p.act || p.act == "manage")
"""


def name_match(request: str, pattern: str) -> bool:
    """Three- or four-part names; a `*` part matches any value; a table pattern covers its
    columns. A `*` in the request (a whole schema, say) is only covered by a `*` pattern part."""
    req = request.split(".")
    pat = pattern.split(".")
    if len(pat) > len(req):
        return False
    return all(p == "*" or p == r for p, r in zip(pat, req, strict=False))


def domain_owner_grant_id(domain: str) -> str:
    return f"domain:{domain}"


def policy_lines(ps: PolicySet) -> Iterator[tuple[str, list[str]]]:
    """Every casbin line of the set as (ptype, fields)."""
    for group, members in ps.groups.items():
        for m in members:
            yield "g", [m.key, f"group:{group}"]
    for g in ps.grants:
        objs = [str(g.on)] if g.columns is None else [f"{g.on}.{c}" for c in g.columns]
        for sub in g.principals:
            for obj in objs:
                for priv in g.privileges:
                    yield "p", [sub.key, obj, priv, g.effect, g.id]
    for d in ps.domains.values():
        for owner in d.owners:
            for schema in d.schemas:
                rid = domain_owner_grant_id(d.name)
                yield "p", [owner.key, f"{schema}.*", "manage", "allow", rid]
    for f in ps.row_filters:
        for sub in f.principals:
            yield "p2", [sub.key, str(f.on), f.kind, f.id]
    for m in ps.column_masks:
        exc = "|".join(p.key for p in m.except_)
        for sub in m.principals:
            yield "p3", [sub.key, str(m.on), m.id, str(m.priority), exc]


class PolicySetAdapter(Adapter):
    """Feeds casbin straight from the PolicySet, skipping casbin's text parsing (100k lines)."""

    def __init__(self, ps: PolicySet) -> None:
        self._ps = ps

    def load_policy(self, model: casbin.Model) -> None:
        sections = model.model
        for ptype, fields in policy_lines(self._ps):
            sections[ptype[0]][ptype].policy.append(fields)

    def save_policy(self, model: casbin.Model) -> bool:
        raise NotImplementedError("policies are read-only here: they live in git as YAML")


def build_enforcer(ps: PolicySet) -> casbin.Enforcer:
    model = casbin.Enforcer.new_model(text=MODEL_TEXT)
    enforcer = casbin.Enforcer(model, PolicySetAdapter(ps))
    enforcer.add_function("nameMatch", name_match)
    return enforcer
