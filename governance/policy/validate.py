"""Set-level checks of a policy set: the mistakes a reviewer cannot see in one file.

The builder reports what is wrong with a single value (wrong type, unknown key); this module
reports what is wrong between rules and files (unknown groups, cycles, duplicate ids, masks
that collide, filters that are not one boolean Spark SQL expression, rules outside their
file's domain). Both run on every load, so `lakegate policy validate` in CI and hot reload in
a server refuse exactly the same policy sets.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

from governance.policy.build import (
    FileMeta,
    ParseResult,
    gc_paused,
    member_location_key,
    parse_policy_dir,
    parse_policy_text,
)
from governance.policy.expressions import (
    check_filter_expression,
    check_mask_expression,
    mapping_issues,
)
from governance.policy.mask_checks import MaskChecks
from governance.policy.model import (
    ANY_TAG,
    EFFECTS,
    FILTER_KINDS,
    MASKS,
    PRIVILEGES,
    AggregationPolicy,
    ColumnMask,
    Grant,
    NamePattern,
    PolicySet,
    Principal,
    RowFilter,
    Source,
)
from governance.policy.problems import (
    PolicyError,
    Problem,
    did_you_mean,
    format_problems,
    group_hint,
    sorted_problems,
)
from governance.policy.tags import binding_issues, tag_mask_issues

__all__ = [
    "PolicyError",
    "Problem",
    "check_filter_expression",
    "check_mask_expression",
    "format_problems",
    "validate_parsed",
    "validate_policy_dir",
    "validate_policy_set",
    "validate_policy_text",
]

Rule = Grant | RowFilter | ColumnMask | AggregationPolicy


# --------------------------------------------------------------------------- public API


def validate_policy_dir(
    path: str | Path,
    tables: Collection[str] | None = None,
    provider_groups: Collection[str] | None = None,
) -> list[Problem]:
    """Every problem (errors and warnings) of a policy directory, sorted by file and line;
    `tables`: the catalog's full table names, when one is at hand (mapping tables);
    `provider_groups`: the groups the configured identity sources can send, with an
    `identity:` section (IdentityConfig.provider_groups)."""
    result = parse_policy_dir(path)
    return sorted_problems(result.problems + validate_parsed(result, tables, provider_groups))


def validate_policy_text(files: Mapping[str, str]) -> list[Problem]:
    """Every problem of in-memory policy files (name -> YAML text)."""
    result = parse_policy_text(files)
    return sorted_problems(result.problems + validate_parsed(result))


def validate_policy_set(ps: PolicySet) -> list[Problem]:
    """Set-level problems of a PolicySet built in code (no YAML positions beyond rule sources).

    Per-file facts a PolicySet does not keep (which file defined a group or a tag) are
    unknown here, so the federated-ownership checks on groups, tags and the domain registry
    only run through validate_policy_dir / the loader.
    """
    return sorted_problems(_Validator(ps, {}, _meta_from_rules(ps), full_meta=False).run())


def validate_parsed(
    result: ParseResult,
    tables: Collection[str] | None = None,
    provider_groups: Collection[str] | None = None,
) -> list[Problem]:
    """Set-level problems of a parse result (the loader calls this before accepting a set).

    With `provider_groups` (an `identity:` section is configured), a group an identity
    source can send needs no `groups:` entry; a group neither defined nor sent is a warning
    where naming it can only narrow access (a grant's principals, a mask's except list, a
    domain's owners) and stays an error where it decides who is restricted (a filter's or
    mask's principals, a nested membership, is_member()): there a misspelt group would
    leave its members unrestricted."""
    with gc_paused():
        checks = _Validator(result.policy_set, result.locations, result.meta, full_meta=True)
        checks.tables = tables
        if provider_groups is not None:
            checks.provider_groups = frozenset(provider_groups)
        return checks.run()


def _meta_from_rules(ps: PolicySet) -> list[FileMeta]:
    metas: dict[str, FileMeta] = {}
    for rule in (*ps.grants, *ps.row_filters, *ps.column_masks):
        if rule.file_domain is not None and rule.source.file not in metas:
            metas[rule.source.file] = FileMeta(rule.source.file, rule.file_domain, rule.source)
    return list(metas.values())


class _Validator(MaskChecks):
    """Every set-level check, in the order problems are found."""

    tables: Collection[str] | None = None  # the catalog's table names, when one is at hand
    provider_groups: frozenset[str] | None = None  # with an identity: section

    @property
    def known(self) -> set[str]:
        """Groups a policy may name: those `groups:` defines and those a source sends."""
        return self.groups | (self.provider_groups or frozenset())

    def unknown_group(self, where: Source, what: str, name: str, *, narrows: bool) -> None:
        """A group named by `what` that nothing defines: today's error without identity
        sources; with them, a warning when naming it can only narrow access."""
        if self.provider_groups is None:
            self.report(
                where,
                "unknown-group",
                f"{what} names group:{name}, which is not defined",
                group_hint(name, self.groups),
            )
            return
        close = did_you_mean(name, sorted(self.known)) if self.known else ""
        self.report(
            where,
            "unknown-group",
            f"group '{name}' is named by {what} but no identity source sends it and "
            "groups: does not define it",
            (close + " Otherwise " if close.startswith("did you mean") else "")
            + "list it under the identity source's known_groups if the provider sends it, "
            "or define it under groups:",
            "warning" if narrows else "error",
        )

    def run(self) -> list[Problem]:
        self.check_groups()
        self.check_principals()
        self.check_enums()
        self.check_ids()
        self.check_expressions()
        self.check_mapping_tables()
        self.check_domains()
        self.check_mask_overlap()
        self.check_mask_reads_denied()
        self.check_tags_known()
        self.check_governed_tags()
        return self.problems

    # ---- groups and principals

    def check_groups(self) -> None:
        for group, members in self.ps.groups.items():
            for m in members:
                if m.kind == "group" and m.name not in self.known:
                    where = self.locations.get(
                        member_location_key(group, m)
                    ) or self.ps.group_sources.get(group, Source("<groups>"))
                    if self.provider_groups is not None:
                        self.unknown_group(where, f"group '{group}'", m.name, narrows=False)
                        continue
                    self.report(
                        where,
                        "unknown-group",
                        f"group '{group}' contains group:{m.name}, which is not defined",
                        group_hint(m.name, self.groups),
                    )
        reported: set[frozenset[str]] = set()
        for start in sorted(self.ps.groups):
            for cycle in self._cycles_from(start):
                key = frozenset(cycle)
                if key in reported:
                    continue
                reported.add(key)
                first = min(cycle[:-1], key=lambda g: self._group_src(g).line)
                self.report(
                    self._group_src(first),
                    "group-cycle",
                    "group cycle: " + " -> ".join(cycle),
                    "remove one of these memberships; groups may nest but not loop",
                )

    def _group_src(self, group: str) -> Source:
        return self.ps.group_sources.get(group, Source("<groups>"))

    def _cycles_from(self, start: str) -> list[list[str]]:
        cycles: list[list[str]] = []
        path: list[str] = []
        on_path: set[str] = set()
        done: set[str] = set()

        def visit(g: str) -> None:
            path.append(g)
            on_path.add(g)
            for m in self.ps.groups.get(g, ()):
                if m.kind != "group" or m.name not in self.ps.groups:
                    continue
                if m.name == start:
                    cycles.append([*path, start])
                elif m.name not in on_path and m.name not in done:
                    visit(m.name)
            path.pop()
            on_path.discard(g)
            done.add(g)

        visit(start)
        return cycles

    def check_principals(self) -> None:
        def check(
            rule_source: Source,
            key: str,
            principals: Iterable[Principal],
            what: str,
            narrows: bool,
        ) -> None:
            for i, p in enumerate(principals):
                if p.kind == "group" and p.name not in self.known:
                    where = self.where(rule_source, key, i)
                    self.unknown_group(where, what, p.name, narrows=narrows)

        for g in self.ps.grants:  # a deny grant to nobody narrows nothing: an error
            check(g.source, "principals", g.principals, f"grant '{g.id}'", g.effect == "allow")
        for f in self.ps.row_filters:
            check(f.source, "principals", f.principals, f"row filter '{f.id}'", False)
        for m in self.ps.column_masks:
            check(m.source, "principals", m.principals, f"column mask '{m.id}'", False)
            what = f"the except list of column mask '{m.id}'"
            check(m.source, "except", m.except_, what, True)
        for a in self.ps.aggregation_policies:  # the principals are constrained: narrows
            check(a.source, "principals", a.principals, f"aggregation policy '{a.id}'", True)
            what = f"the except list of aggregation policy '{a.id}'"
            check(a.source, "except", a.except_, what, False)
        for d in self.ps.domains.values():
            check(d.source, "owners", d.owners, f"domain '{d.name}' owners", True)

    def check_governed_tags(self) -> None:
        """apply_tag grants: their groups exist; with `governed_tags` declared, every tag a
        grant covers must be governed (an error: the right would be to an unknown tag) and
        every tag a rule or the `tags:` section names should be (a warning)."""
        governed = self.ps.governed_tags
        for g in self.ps.tag_grants:
            for i, p in enumerate(g.principals):
                if p.kind == "group" and p.name not in self.known:
                    where = self.where(g.source, "principals", i)
                    self.unknown_group(where, f"grant '{g.id}'", p.name, narrows=True)
            for i, tag in enumerate(g.tags):
                if governed and tag != ANY_TAG and tag not in governed:
                    self.report(
                        self.where(g.source, "tags", i),
                        "tag-not-governed",
                        f"grant '{g.id}' gives apply_tag on tag '{tag}', which governed_tags "
                        "does not declare",
                        f"declare it under governed_tags, e.g. governed_tags: {{{tag}: {{}}}}",
                    )
        if not governed:
            return
        named = [
            (m.source, m.match.tag, f"column mask '{m.id}'")
            for m in self.ps.column_masks
            if m.match
        ]
        named += [
            (f.source, f.match.tag, f"row filter '{f.id}'") for f in self.ps.row_filters if f.match
        ]
        named += [
            (m.source, t, f"column mask '{m.id}'") for m in self.ps.column_masks for t in m.tags
        ]
        named += [(a.source, t, f"the tags of '{a.on}'") for a in self.ps.tags for t in a.tags]
        for source, tag, what in named:
            if tag not in governed:
                self.report(
                    source,
                    "tag-not-governed",
                    f"{what} uses tag '{tag}', which governed_tags does not declare",
                    "declare it under governed_tags; only governed tags can be assigned",
                    "warning",
                )

    def check_enums(self) -> None:
        """Values the loader already screens; here for sets built in code."""
        for g in self.ps.grants:
            for p in g.privileges:
                if p not in PRIVILEGES:
                    self.report(
                        g.source,
                        "unknown-privilege",
                        f"grant '{g.id}' has unknown privilege '{p}'",
                        did_you_mean(p, PRIVILEGES),
                    )
            if g.effect not in EFFECTS:
                self.report(
                    g.source,
                    "unknown-effect",
                    f"unknown effect '{g.effect}'",
                    did_you_mean(g.effect, EFFECTS),
                )
        for f in self.ps.row_filters:
            if f.kind not in FILTER_KINDS:
                self.report(
                    f.source,
                    "unknown-kind",
                    f"unknown filter kind '{f.kind}'",
                    did_you_mean(f.kind, FILTER_KINDS),
                )
        for m in self.ps.column_masks:
            if m.mask not in MASKS:
                self.report(
                    m.source,
                    "unknown-mask",
                    f"unknown mask '{m.mask}'",
                    did_you_mean(m.mask, MASKS),
                )

    def check_ids(self) -> None:
        """Grants, row filters and masks share one id space, so `explain` can name any rule."""
        first: dict[str, Rule] = {}
        rules = (*self.ps.grants, *self.ps.row_filters, *self.ps.column_masks)
        for rule in (*rules, *self.ps.aggregation_policies):
            if rule.id in first:
                other = first[rule.id]
                self.report(
                    self.where(rule.source, "id"),
                    "duplicate-id",
                    f"id '{rule.id}' is already used by the {_kind(other)} at {other.source}",
                    "ids are unique across grants, row_filters and column_masks; rename one",
                )
            else:
                first[rule.id] = rule

    # ---- expressions

    def check_expressions(self) -> None:
        for f in self.ps.row_filters:
            at = self.where(f.source, "where")
            issues = check_filter_expression(f.where, self.known)
            if f.match is not None and not issues:
                issues = binding_issues(f.where, f.match, "filter")
            for code, message, hint in issues:
                self.report(at, code, f"row filter '{f.id}': {message}", hint)
        for m in self.ps.column_masks:
            if m.mask == "custom":
                if not m.expression:
                    self.report(
                        self.where(m.source, "mask"),
                        "custom-mask-no-expression",
                        f"column mask '{m.id}' is custom but has no expression",
                        "add expression: \"concat('***', right({col}, 4))\"",
                    )
                    continue
                at = self.where(m.source, "expression")
                issues = (
                    check_mask_expression(m.expression, self.known)
                    if m.match is None
                    else tag_mask_issues(m.expression, m.match, self.known)
                )
                for code, message, hint in issues:
                    self.report(at, code, f"column mask '{m.id}': {message}", hint)
            elif m.expression is not None:
                self.report(
                    self.where(m.source, "expression"),
                    "expression-not-custom",
                    f"column mask '{m.id}' has an expression but mask '{m.mask}' ignores it",
                    "set mask: custom to use the expression, or remove it",
                )

    def check_mapping_tables(self) -> None:
        """Mapping tables a filter or custom mask reads: in the catalog, and no cycles."""
        rules: list[tuple[RowFilter | ColumnMask, str, str]] = [
            (f, "where", f.where) for f in self.ps.row_filters
        ]
        rules += [(m, "expression", m.expression or "") for m in self.ps.column_masks]
        rules = [r for r in rules if r[2] and (r[1] == "where" or r[0].mask == "custom")]
        kinds = [(r.on, text, "filter" if key == "where" else "mask") for r, key, text in rules]
        for i, code, message, hint, severity in mapping_issues(kinds, self.tables):
            rule, key, _ = rules[i]
            what = "row filter" if key == "where" else "column mask"
            at = self.where(rule.source, key)
            self.report(at, code, f"{what} '{rule.id}': {message}", hint, severity)  # type: ignore[arg-type]

    # ---- domains (federated ownership)

    def check_domains(self) -> None:
        owner: dict[str, str] = {}
        for d in self.ps.domains.values():
            for i, schema in enumerate(d.schemas):
                if schema in owner and owner[schema] != d.name:
                    self.report(
                        self.where(d.source, "schemas", i),
                        "schema-in-two-domains",
                        f"schema {schema} is listed by domain '{d.name}' but already "
                        f"belongs to domain '{owner[schema]}'",
                        "a table belongs to exactly one domain; remove it from one",
                    )
                owner.setdefault(schema, d.name)
        file_domain: dict[str, str] = {}
        for meta in self.meta:
            if meta.domain is None:
                continue
            if meta.domain not in self.ps.domains:
                self.report(
                    meta.domain_source or Source(meta.file),
                    "unknown-domain",
                    f"file declares domain '{meta.domain}', which is not defined under domains:",
                    _domain_hint(meta.domain, self.ps.domains),
                )
                continue
            file_domain[meta.file] = meta.domain
            if self.full_meta:
                self._check_domain_file(meta)
        rules = (*self.ps.grants, *self.ps.row_filters, *self.ps.column_masks)
        for rule in (*rules, *self.ps.aggregation_policies):
            domain = rule.file_domain
            if domain is None or domain not in self.ps.domains:
                continue
            problem = self._outside(rule.on, domain)
            if problem:
                self.report(
                    self.where(rule.source, "on"),
                    "outside-domain",
                    f"{_kind(rule)} '{rule.id}' is on {rule.on}, {problem}",
                    _outside_hint(self.ps.domains[domain].schemas),
                )

    def _outside(self, on: NamePattern, domain: str) -> str | None:
        schemas = self.ps.domains[domain].schemas
        if on.catalog == "*" or on.schema == "*":
            return (
                f"but this file belongs to domain '{domain}' and a wildcard catalog or "
                "schema reaches beyond it"
            )
        if f"{on.catalog}.{on.schema}" not in schemas:
            other = self.ps.domain_of_schema(on.catalog, on.schema)
            owned = f"owned by domain '{other}'" if other else "owned by no domain"
            return (
                f"{owned}, but this file belongs to domain '{domain}' and may only "
                "govern its own schemas"
            )
        return None

    def _check_domain_file(self, meta: FileMeta) -> None:
        """A domain file may not widen access elsewhere by other routes than rules."""
        assert meta.domain is not None
        for name, source in meta.domains:
            self.report(
                source,
                "domain-file-defines-domains",
                f"domain '{name}' is defined in a file of domain '{meta.domain}'",
                "keep the domains: registry in a central file (one without domain:)",
            )
        defined_in: dict[str, set[str]] = {}
        for m in self.meta:
            for group, _ in m.groups:
                defined_in.setdefault(group, set()).add(m.file)
        for group, source in meta.groups:
            others = sorted(defined_in[group] - {meta.file})
            if others:
                self.report(
                    source,
                    "domain-file-extends-group",
                    f"group '{group}' is also defined in {others[0]}; a domain file "
                    "may not add members to a group other files define",
                    "define the membership in the central file, or use a group only "
                    "this domain defines",
                )
        for tag in meta.tags:
            problem = self._outside(tag.on, meta.domain)
            if problem:
                self.report(
                    tag.source,
                    "outside-domain",
                    f"tags on {tag.on}: {problem}",
                    _outside_hint(self.ps.domains[meta.domain].schemas),
                )

    # ---- masks


def _kind(rule: Rule) -> str:
    if isinstance(rule, Grant):
        return "grant"
    if isinstance(rule, AggregationPolicy):
        return "aggregation policy"
    return "row filter" if isinstance(rule, RowFilter) else "column mask"


def _domain_hint(name: str, domains: Mapping[str, object]) -> str:
    if not domains:
        return f"define it under domains: ({name}: {{owners: [...], schemas: [...]}})"
    return did_you_mean(name, sorted(domains))


def _outside_hint(schemas: Sequence[str]) -> str:
    owned = ", ".join(schemas) or "(none)"
    return f"this domain owns {owned}; move the rule to a central file or the owning domain"
