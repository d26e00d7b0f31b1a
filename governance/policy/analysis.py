"""What policies mean for people: effective access, who can see a table, and the change in
effective access between two policy sets (for reviews). No Spark: tables come from the
catalog when there is one, otherwise from the names the policies themselves mention."""

from __future__ import annotations

import subprocess
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catalog.model import ColumnInfo, TableInfo
from governance.policy.enforcer import AmbiguousMask, PolicyEnforcer, TableAccess
from governance.policy.expressions import mapping_tables, parse_expression
from governance.policy.loader import load_policy_dir, load_policy_text
from governance.policy.model import ANY_TAG, PRIVILEGES, PolicySet
from governance.policy.tag_state import governed_state
from governance.policy.tags import TagsUnreadable, matched_by_tag

OTHER_USER = "<any other user>"  # stands for every user the policies do not name
NOBODY = "zz-nobody-zz"  # a user no policy names: what anyone gets without a named right
ALL_COLUMNS = "(other columns)"  # a table known only by name still has columns to decide on


@dataclass(frozen=True)
class Access:
    """One user's effective rights on one table, in plain data (comparable, printable)."""

    privileges: tuple[str, ...]
    columns: tuple[str, ...]
    masks: tuple[tuple[str, str, str], ...]  # (column, mask, policy id)
    row_filters: tuple[tuple[str, str, str], ...]  # (id, kind, where)
    decided_by: tuple[str, ...] = ()
    error: str | None = None
    # (policy id, mapping table) for each filter/custom mask that reads a mapping table
    mapping_tables: tuple[tuple[str, str], ...] = ()
    tag_matches: tuple[tuple[str, str, str], ...] = ()  # (rule id, column, tag)
    # (column, tags) the table's governed state holds: applied or propagated via Lakegate
    governed_tags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # aggregate-only for this user: (policy ids, min_group_size, on_small_group,
    # identifying columns); None: rows as the other rights say
    aggregate: tuple[tuple[str, ...], int, str, tuple[str, ...]] | None = None

    @property
    def can_select(self) -> bool:
        return "select" in self.privileges

    def to_dict(self) -> dict[str, Any]:
        return {
            "privileges": list(self.privileges),
            "columns": list(self.columns),
            "masks": [{"column": c, "mask": m, "policy": p} for c, m, p in self.masks],
            "row_filters": [{"id": i, "kind": k, "where": w} for i, k, w in self.row_filters],
            "decided_by": list(self.decided_by),
            "mapping_tables": [{"policy": p, "table": t} for p, t in self.mapping_tables],
            **({"error": self.error} if self.error else {}),
            **(
                {
                    "tag_matches": [
                        {"policy": p, "column": c, "tag": t} for p, c, t in self.tag_matches
                    ]
                }
                if self.tag_matches
                else {}
            ),
            **(
                {"governed_tags": [{"column": c, "tags": list(t)} for c, t in self.governed_tags]}
                if self.governed_tags
                else {}
            ),
            **({"aggregate_only": self._aggregate_dict()} if self.aggregate else {}),
        }

    def _aggregate_dict(self) -> dict[str, Any]:
        assert self.aggregate is not None
        ids, size, action, identifying = self.aggregate
        return {
            "policies": list(ids),
            "min_group_size": size,
            "on_small_group": action,
            "identifying_columns": list(identifying),
        }


def effective_access(
    enforcer: PolicyEnforcer, user: str, table: TableInfo, groups: frozenset[str] = frozenset()
) -> Access:
    """`groups`: the identity provider's groups of the user, where known (a signed-in
    caller's own access); a name alone has only its YAML groups."""
    ident = enforcer.identity(user, groups)
    try:
        a = enforcer.table_access(ident, table)
    except (AmbiguousMask, TagsUnreadable) as e:
        return Access((), (), (), (), error=str(e))
    privileges = tuple(p for p in PRIVILEGES if p in a.privileges)
    if not a.can_select:
        return Access(privileges, (), (), (), a.grant_ids)
    return Access(
        privileges=privileges,
        columns=a.visible_columns,
        masks=tuple((m.column, m.mask.mask, m.mask.id) for m in a.masks.values()),
        row_filters=tuple((f.id, f.kind, f.where) for f in a.row_filters),
        decided_by=a.policy_ids,
        mapping_tables=_mapping_tables(a),
        tag_matches=matched_by_tag(
            table, a.tags, a.row_filters, [(m.column, m.mask) for m in a.masks.values()]
        ),
        governed_tags=_governed(table),
        aggregate=(
            None
            if a.aggregate is None
            else (
                a.aggregate.ids,
                a.aggregate.min_group_size,
                a.aggregate.on_small_group,
                tuple(sorted(a.aggregate.identifying_columns)),
            )
        ),
    )


def _governed(table: TableInfo) -> tuple[tuple[str, tuple[str, ...]], ...]:
    try:
        state = governed_state(table)
    except ValueError:
        return ()
    return tuple((c, tuple(sorted(t))) for c, t in sorted(state.items()))


def _mapping_tables(a: TableAccess) -> tuple[tuple[str, str], ...]:
    """Which mapping tables the decision depends on, per filter and custom mask."""
    texts = [(f.id, f.where, "filter") for f in a.row_filters]
    texts += [
        (m.mask.id, m.mask.expression or "", "mask")
        for m in a.masks.values()
        if m.mask.mask == "custom"
    ]
    out: dict[tuple[str, str], None] = {}
    for pid, text, kind in texts:
        tree, _ = parse_expression(text, kind)
        for name in mapping_tables(tree) if tree is not None else ():
            out[(pid, name)] = None
    return tuple(out)


def named_users(ps: PolicySet) -> set[str]:
    """Every user a policy names, directly or as a group member."""
    users: set[str] = set()
    principals = [p for members in ps.groups.values() for p in members]
    for g in (*ps.grants, *ps.tag_grants):
        principals += g.principals
    for f in ps.row_filters:
        principals += f.principals
    for m in ps.column_masks:
        principals += [*m.principals, *m.except_]
    for a in ps.aggregation_policies:
        principals += [*a.principals, *a.except_]
    for d in ps.domains.values():
        principals += d.owners
    users.update(p.name for p in principals if p.kind == "user")
    return users


def tables_from_policies(ps: PolicySet) -> list[TableInfo]:
    """Concrete tables the policies name, with the columns they mention (no catalog)."""
    cols: dict[tuple[str, str, str], list[str]] = {}

    def add(key: tuple[str, str, str], columns: list[str]) -> None:
        if "*" in key:
            return
        known = cols.setdefault(key, [])
        known.extend(c for c in columns if c != "*" and c not in known)

    for g in ps.grants:
        add(g.on.table_key, list(g.columns or ()))
    for f in ps.row_filters:
        add(f.on.table_key, [])
    for m in ps.column_masks:
        add(m.on.table_key, list(m.columns))
    for t in ps.tags:
        add(t.on.table_key, [t.on.column] if t.on.column else [])
    for a in ps.aggregation_policies:
        add(a.on.table_key, list(a.identifying_columns))
    return [
        TableInfo(
            c,
            s,
            t,
            "",
            tuple(ColumnInfo(n, "string", position=i) for i, n in enumerate([*names, ALL_COLUMNS])),
        )
        for (c, s, t), names in sorted(cols.items())
    ]


def load_policies(
    ref: str, *, policy_dir: str = "policies", provider_groups: Collection[str] | None = None
) -> PolicySet:
    """A directory, or a git revision (`main`, `HEAD~1`) of the policy directory."""
    path = Path(ref)
    if path.is_dir():
        return load_policy_dir(path, provider_groups)
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
    )
    if top.returncode != 0:
        raise ValueError(f"{ref} is neither a directory nor a git revision (not in git)")
    root = Path(top.stdout.strip())
    rel = Path(policy_dir).resolve().relative_to(root).as_posix()
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, "--", rel],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )
    if listing.returncode != 0:
        raise ValueError(
            f"{ref} is neither a directory nor a git revision: "
            f"{listing.stderr.strip().splitlines()[0] if listing.stderr else ''}"
        )
    files: dict[str, str] = {}
    for name in listing.stdout.splitlines():
        if not name.endswith((".yaml", ".yml")):
            continue
        relative = Path(name).relative_to(rel).as_posix()
        if relative.startswith("tests/"):
            continue
        blob = subprocess.run(
            ["git", "show", f"{ref}:{name}"], capture_output=True, text=True, cwd=root, check=True
        )
        files[f"{Path(rel).name}/{relative}"] = blob.stdout
    return load_policy_text(files, provider_groups)


@dataclass
class Change:
    user: str
    table: str
    kind: str  # privilege | columns | mask | row_filter | mapping | tag_right
    detail: str
    widens: bool
    flagged: bool = False  # widens access to a tagged column


@dataclass
class Diff:
    changes: list[Change] = field(default_factory=list)

    @property
    def flagged(self) -> list[Change]:
        return [c for c in self.changes if c.flagged]

    def to_json(self) -> list[dict[str, Any]]:
        return [c.__dict__ for c in self.changes]

    def to_markdown(self) -> str:
        if not self.changes:
            return "### Effective access: no change\n"
        lines = ["### Effective access changes", ""]
        if self.flagged:
            lines += [
                f"> :warning: **{len(self.flagged)} change(s) widen access to tagged "
                "columns** (marked :warning: below)",
                "",
            ]
        lines += ["| user | table | change | |", "|---|---|---|---|"]
        for c in self.changes:
            mark = ":warning:" if c.flagged else ("wider" if c.widens else "narrower")
            lines.append(f"| {c.user} | {c.table} | {c.detail} | {mark} |")
        users = sorted({c.user for c in self.changes})
        tables = sorted({c.table for c in self.changes})
        lines += [
            "",
            f"Users affected: {', '.join(users)}",
            f"Tables affected: {', '.join(tables)}",
        ]
        return "\n".join(lines) + "\n"


def diff_policies(
    old: PolicySet,
    new: PolicySet,
    tables: list[TableInfo] | None = None,
    provider_groups: Collection[str] = (),
) -> Diff:
    """The change in effective access per named user, any other user, and (provider users
    are not enumerable) a member of each group an identity source can send: `group:NAME`,
    someone whose token says only that group."""
    old_e, new_e = PolicyEnforcer(old), PolicyEnforcer(new)
    if tables is None:
        merged: dict[str, TableInfo] = {}
        for t in [*tables_from_policies(old), *tables_from_policies(new)]:
            have = merged.get(t.full_name)
            if have is None:
                merged[t.full_name] = t
            else:
                names = [c.name for c in have.columns]
                extra = [c for c in t.columns if c.name not in names]
                merged[t.full_name] = TableInfo(
                    t.catalog,
                    t.schema,
                    t.name,
                    "",
                    tuple(
                        ColumnInfo(c.name, c.type_text, position=i)
                        for i, c in enumerate([*have.columns, *extra])
                    ),
                )
        tables = list(merged.values())
    who: list[tuple[str, str, frozenset[str]]] = [
        (u, u, frozenset()) for u in sorted(named_users(old) | named_users(new))
    ]
    who.append((OTHER_USER, NOBODY, frozenset()))
    who += [(f"group:{g}", NOBODY, frozenset({g})) for g in sorted(set(provider_groups))]
    out = Diff()
    for t in tables:
        for u, uid, groups in who:
            a = effective_access(old_e, uid, t, groups)
            b = effective_access(new_e, uid, t, groups)
            if a != b:
                out.changes += _changes(u, t, a, b, new)
            out.changes += _tag_right_changes(u, t, old_e, new_e, uid, groups)
    return out


def _tag_right_changes(
    user: str,
    t: TableInfo,
    old: PolicyEnforcer,
    new: PolicyEnforcer,
    uid: str,
    groups: frozenset[str] = frozenset(),
) -> list[Change]:
    """Who gains or loses APPLY_TAG on a tag of this table (`*`: every tag). Gaining it is
    flagged: whoever may move a tag may lift the masks and filters it drives."""
    tags = {ANY_TAG}
    for ps in (old.policy_set, new.policy_set):
        tags |= {tag for g in ps.tag_grants for tag in g.tags} | set(ps.governed_tags)
    out: list[Change] = []
    a_ident, b_ident = old.identity(uid, groups), new.identity(uid, groups)
    for tag in sorted(tags):
        had = old.tag_right(a_ident, t, tag)[0]
        has = new.tag_right(b_ident, t, tag)[0]
        if had != has:
            what = "every tag" if tag == ANY_TAG else f"tag {tag}"
            verb = "gains" if has else "loses"
            out.append(
                Change(user, t.full_name, "tag_right", f"{verb} APPLY_TAG on {what}", has, has)
            )
    return out


def _changes(user: str, t: TableInfo, a: Access, b: Access, ps: PolicySet) -> list[Change]:
    name = t.full_name
    out: list[Change] = []
    for p in PRIVILEGES:
        if (p in a.privileges) != (p in b.privileges):
            gained = p in b.privileges
            out.append(
                Change(
                    user, name, "privilege", f"{'gains' if gained else 'loses'} {p.upper()}", gained
                )
            )

    def tagged(col: str) -> bool:
        return bool(ps.column_tags(t.catalog, t.schema, t.name, col.lower()))

    for col in sorted(set(b.columns) - set(a.columns)):
        clear = col not in {m[0] for m in b.masks}
        out.append(
            Change(
                user,
                name,
                "columns",
                f"column {col} newly visible" + ("" if clear else " (masked)"),
                True,
                clear and tagged(col),
            )
        )
    for col in sorted(set(a.columns) - set(b.columns)):
        out.append(Change(user, name, "columns", f"column {col} hidden", False))
    old_m = {c: (m, p) for c, m, p in a.masks}
    new_m = {c: (m, p) for c, m, p in b.masks}
    for col in sorted(set(old_m) | set(new_m)):
        if col not in b.columns:
            continue
        before, after = old_m.get(col), new_m.get(col)
        if before == after:
            continue
        if after is None:
            out.append(
                Change(
                    user, name, "mask", f"mask {before[0]} removed from {col}", True, tagged(col)
                )
            )
        elif before is None:
            out.append(Change(user, name, "mask", f"mask {after[0]} added on {col}", False))
        else:
            out.append(
                Change(
                    user,
                    name,
                    "mask",
                    f"mask on {col} changed {before[0]} -> {after[0]}",
                    True,
                    tagged(col),
                )
            )
    old_f = {i: (k, w) for i, k, w in a.row_filters}
    new_f = {i: (k, w) for i, k, w in b.row_filters}
    if b.can_select:
        for fid in sorted(set(old_f) | set(new_f)):
            before, after = old_f.get(fid), new_f.get(fid)
            if before == after:
                continue
            if after is None:
                out.append(Change(user, name, "row_filter", f"row filter {fid} removed", True))
            elif before is None:
                out.append(
                    Change(user, name, "row_filter", f"row filter {fid} added: {after[1]}", False)
                )
            else:
                out.append(
                    Change(
                        user,
                        name,
                        "row_filter",
                        f"row filter {fid} changed: {before[1]} -> {after[1]}",
                        True,
                    )
                )
    if b.can_select:
        for pid, table in sorted(set(a.mapping_tables) ^ set(b.mapping_tables)):
            reads = (pid, table) in b.mapping_tables
            what = "now reads" if reads else "no longer reads"
            # the rows a mapping table grants live outside the policy files: review it
            out.append(Change(user, name, "mapping", f"{pid} {what} mapping table {table}", reads))
    if a.error != b.error:
        out.append(Change(user, name, "error", b.error or f"resolved: {a.error}", False))
    return out


def who_can_see(
    enforcer: PolicyEnforcer, table: TableInfo, column: str | None = None
) -> list[tuple[str, Access]]:
    users = [*sorted(named_users(enforcer.policy_set)), OTHER_USER]
    out = []
    for u in users:
        acc = effective_access(enforcer, NOBODY if u == OTHER_USER else u, table)
        if _sees(acc, column):
            out.append((u, acc))
    return out


def groups_who_can_see(
    enforcer: PolicyEnforcer,
    table: TableInfo,
    column: str | None = None,
    provider_groups: Mapping[str, str] | None = None,
) -> list[tuple[str, str, Access]]:
    """(group, where it comes from: "yaml" or "provider", access) for each group whose
    member can read: what someone whose token says only that group gets. Provider users
    are not enumerable offline, so groups are what a review can list."""
    sources = dict.fromkeys(enforcer.policy_set.groups, "yaml")
    for g in provider_groups or {}:
        sources.setdefault(g, "provider")
    out = []
    for g in sorted(sources):
        acc = effective_access(enforcer, NOBODY, table, frozenset({g}))
        if _sees(acc, column):
            out.append((g, sources[g], acc))
    return out


def _sees(acc: Access, column: str | None) -> bool:
    if not acc.can_select:
        return False
    return column is None or column.lower() in {c.lower() for c in acc.columns}
