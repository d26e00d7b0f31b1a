"""Effective access and policy changes as people read them: who reads a table and how, what
one person can read, and who gains or loses what between two git revisions of the policies.

The same decisions `lakegate policy explain`, `who-can-see` and `diff` print, filtered for
the caller as discovery is: a table's managers (its domain's owners, the admins) see every
reader, their row filter text and the deciding policies; anyone else sees only their own
access to tables they may read, without filter text or policy ids (a deny id such as
`analysts-no-ssn` names the column it hides). Used by the JSON routes here and the console.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Path, Query, Request

from api.deps import CallerDep, Service, authenticated_router, get_service
from api.errors import ApiError, responses
from api.models import TablePath
from governance.errors import LakegateError
from governance.identity import InvalidName, canonical_user
from governance.policy.analysis import OTHER_USER, Access, diff_policies, effective_access
from governance.policy.analysis import who_can_see as policy_who_can_see
from governance.session.policies_in_force import git_commit, git_policy_set, git_run

if TYPE_CHECKING:
    from api.caller import Caller
    from catalog.model import TableInfo

router = authenticated_router(tags=["Lakegate: access"])

# A git revision as people type it (`HEAD~1`, `main`, a commit); never an option.
REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./~^@{}-]{0,99}$")


def manages(caller: Caller, table: TableInfo) -> bool:
    return "manage" in caller.enforcer.table_access(caller.ident, table).privileges


def reader_view(user: str, acc: Access, *, full: bool) -> dict[str, Any]:
    """One user's access to one table; without filter text and policy ids unless `full`."""
    if full:
        return {"user": user, **acc.to_dict()}
    return {
        "user": user,
        "privileges": list(acc.privileges),
        "columns": list(acc.columns),
        "masks": [{"column": c, "mask": m} for c, m, _ in acc.masks],  # the kind, no id
        "row_filter_applies": bool(acc.row_filters),
        # aggregate-only: the size and action, not the policy ids
        **(
            {
                "aggregate_only": {
                    "min_group_size": acc.aggregate[1],
                    "on_small_group": acc.aggregate[2],
                }
            }
            if acc.aggregate is not None
            else {}
        ),
    }


def table_readers(svc: Service, caller: Caller, full_name: str) -> dict[str, Any]:
    """Who reads a table: every reader for its managers, the caller alone for anyone else."""
    table, access = svc.discovery.visible_table(caller, full_name)
    enf = caller.enforcer
    if "manage" in access.privileges:
        rows = [reader_view(u, a, full=True) for u, a in policy_who_can_see(enf, table)]
        return {"table": table.full_name, "scope": "managers", "readers": rows}
    own = effective_access(enf, caller.user, table, caller.principal.claims.groups)
    return {
        "table": table.full_name,
        "scope": "self",
        "readers": [reader_view(caller.user, own, full=False)],
    }


def person_access(svc: Service, caller: Caller, user: str) -> dict[str, Any]:
    """Every table a person can read: all of one's own; another person's only on tables the
    caller manages (stewards see their domains, admins everything); 403 otherwise."""
    try:
        target = canonical_user(user)
    except InvalidName as e:
        raise ApiError(400, f"invalid user name: {str(e)[:200]}") from None
    snap = svc.discovery.snapshot()
    tables = sorted(snap.tables.values(), key=lambda t: t.full_name)
    enf = caller.enforcer
    out = []
    if target == caller.user:
        for t in tables:
            if svc.discovery.can_see(caller, t):
                acc = effective_access(enf, target, t, caller.principal.claims.groups)
                out.append(
                    {"table": t.full_name, **reader_view(target, acc, full=manages(caller, t))}
                )
        return {"user": target, "scope": "self", "tables": out}
    managed = [t for t in tables if manages(caller, t)]
    if not managed:
        caller.deny(f"user {caller.user} may only see their own access")
        raise ApiError(403, "you may see only your own access (or that on tables you manage)")
    for t in managed:
        acc = effective_access(enf, target, t)
        if acc.can_select:
            out.append({"table": t.full_name, **reader_view(target, acc, full=True)})
    everything = len(managed) == len(tables)
    return {"user": target, "scope": "all" if everything else "domains", "tables": out}


# policy changes ------------------------------------------------------------------------------


def revision(svc: Service, ref: str) -> str:
    """The commit a revision names in the policy directory's repository (400 if none)."""
    if not REVISION.fullmatch(ref):
        raise ApiError(400, f"invalid revision '{ref[:100]}'")
    try:
        return git_commit(svc.lg.config.policies, ref)
    except LakegateError:
        raise ApiError(404, f"no revision '{ref}' of the policy directory") from None


def revisions(svc: Service, limit: int = 20) -> list[dict[str, str]]:
    """Recent commits that touched the policy directory, newest first (hash and date only:
    commit messages are policy text)."""
    try:
        raw = git_run(svc.lg.config.policies, "log", f"-n{limit}", "--format=%H %cI", "--", ".")
    except LakegateError:
        raise ApiError(
            409, "the policy directory is not in a git repository", "INVALID_STATE"
        ) from None
    return [
        {"commit": c, "date": d}
        for c, _, d in (line.partition(" ") for line in raw.decode().splitlines())
    ]


_FILTER_TEXT = re.compile(r"^(row filter \S+ (?:added|changed))")


def _own_change(caller: Caller, c: dict[str, Any], table: TableInfo) -> dict[str, Any] | None:
    """A change of the caller's own access, as they may see it, or None: no filter text,
    no hidden column names, no mapping tables."""
    kind = c["kind"]
    if kind in ("mapping", "error"):
        return None
    if kind == "columns" and c["detail"].endswith(" hidden"):
        return None
    if kind in ("columns", "mask"):
        visible = {
            v.lower() for v in caller.enforcer.table_access(caller.ident, table).visible_columns
        }
        named = [w.lower() for w in re.findall(r"[\w$]+", c["detail"])]
        if kind == "columns" and named[1] not in visible:
            return None
        if kind == "mask" and not any(w in visible for w in named):
            return None
    if kind == "row_filter":
        m = _FILTER_TEXT.match(c["detail"])
        return {**c, "detail": m.group(1) if m else c["detail"].split(":")[0]}
    return c


def policy_diff(svc: Service, caller: Caller, old: str, new: str) -> dict[str, Any]:
    """The effective-access change between two revisions, filtered for the caller."""
    history = revisions(svc)
    a, b = revision(svc, old), revision(svc, new)
    try:
        groups = svc.lg.config.identity.provider_groups()
        before = git_policy_set(svc.lg.config.policies, a, groups)
        after = git_policy_set(svc.lg.config.policies, b, groups)
    except Exception as e:  # a revision whose policies do not load: one line, fail closed
        raise ApiError(400, f"the policies of a revision do not load: {type(e).__name__}") from None
    snap = svc.discovery.snapshot()
    d = diff_policies(before, after, list(snap.tables.values()), sorted(groups or ()))
    out = []
    for change in d.to_json():
        table = snap.tables.get(change["table"])
        if table is None:
            continue
        if manages(caller, table):
            out.append(change)
        elif change["user"] == caller.user and svc.discovery.can_see(caller, table):
            own = _own_change(caller, change, table)
            if own is not None:
                out.append(own)
    everything = all(manages(caller, t) for t in snap.tables.values())
    return {
        "old": a,
        "new": b,
        "scope": "all" if everything else "visible",
        "other_user": OTHER_USER,
        "changes": out,
        "revisions": history,
    }


# routes ---------------------------------------------------------------------------------------


@router.get(
    "/access/tables/{full_name}",
    operation_id="getTableReaders",
    responses=responses(400, 404),
)
async def get_table_readers(request: Request, caller: CallerDep, full_name: TablePath) -> dict:
    """Who can read a table, which columns, masked how, under which row filters and which
    policies decide (`lakegate policy who-can-see`); non-managers get only their own row."""
    return table_readers(get_service(request), caller, full_name)


@router.get(
    "/access/users/{user}",
    operation_id="getUserAccess",
    responses=responses(400, 403),
)
async def get_user_access(
    request: Request,
    caller: CallerDep,
    user: Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._@+-]+$")],
) -> dict:
    """Everything a person can read (`lakegate policy explain` per table): your own, or
    another person's on the tables you manage."""
    return person_access(get_service(request), caller, user)


Revision = Annotated[str, Query(pattern=REVISION.pattern, description="a git revision")]


@router.get("/policy-diff", operation_id="getPolicyDiff", responses=responses(400, 404, 409))
async def get_policy_diff(
    request: Request,
    caller: CallerDep,
    old: Revision = "HEAD~1",
    new: Revision = "HEAD",
) -> dict:
    """Who gains and who loses what between two git revisions of the policy directory
    (`lakegate policy diff`), on the tables you manage, and your own changes elsewhere."""
    return policy_diff(get_service(request), caller, old, new)
