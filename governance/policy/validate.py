"""Set-level checks of a policy set: the mistakes a reviewer cannot see in one file.

The loader reports what is wrong with a single value (wrong type, unknown key); this module
reports what is wrong between rules and files (unknown groups, cycles, duplicate ids, masks
that collide, filters that are not one boolean Spark SQL expression, rules outside their
file's domain). Both run on every load, so `lakegate policy validate` in CI and hot reload in
a server refuse exactly the same policy sets.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types

from governance.policy.enforcer import mask_columns
from governance.policy.loader import (
    EFFECTS,
    FILTER_KINDS,
    FileMeta,
    Locations,
    ParseResult,
    PolicyError,
    Problem,
    Severity,
    did_you_mean,
    gc_paused,
    member_location_key,
    parse_policy_dir,
    parse_policy_text,
)
from governance.policy.model import (
    MASKS,
    PRIVILEGES,
    ColumnMask,
    Grant,
    NamePattern,
    PolicySet,
    Principal,
    RowFilter,
    Source,
    TagAssignment,
)

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

# Identity functions the layer resolves itself, with the number of arguments each takes.
IDENTITY_ARITY: dict[str, int] = {
    "current_user": 0,
    "session_user": 0,
    "user": 0,
    "is_member": 1,
    "is_account_group_member": 1,
}
# Functions that run arbitrary JVM code; never allowed inside a policy expression.
FORBIDDEN_FUNCTIONS: frozenset[str] = frozenset({"reflect", "java_method", "try_reflect"})
_READS_DATA = (exp.Query, exp.Subquery, exp.Table, exp.Values, exp.Lateral, exp.Join)

Rule = Grant | RowFilter | ColumnMask
Issue = tuple[str, str, str]  # (code, message, hint)


# --------------------------------------------------------------------------- public API


def validate_policy_dir(path: str | Path) -> list[Problem]:
    """Every problem (errors and warnings) of a policy directory, sorted by file and line."""
    result = parse_policy_dir(path)
    return _sorted(result.problems + validate_parsed(result))


def validate_policy_text(files: Mapping[str, str]) -> list[Problem]:
    """Every problem of in-memory policy files (name -> YAML text)."""
    result = parse_policy_text(files)
    return _sorted(result.problems + validate_parsed(result))


def validate_policy_set(ps: PolicySet) -> list[Problem]:
    """Set-level problems of a PolicySet built in code (no YAML positions beyond rule sources).

    Per-file facts a PolicySet does not keep (which file defined a group or a tag) are
    unknown here, so the federated-ownership checks on groups, tags and the domain registry
    only run through validate_policy_dir / the loader.
    """
    return _sorted(_Validator(ps, {}, _meta_from_rules(ps), full_meta=False).run())


def validate_parsed(result: ParseResult) -> list[Problem]:
    """Set-level problems of a parse result (the loader calls this before accepting a set)."""
    with gc_paused():
        return _Validator(result.policy_set, result.locations, result.meta, full_meta=True).run()


def format_problems(problems: Sequence[Problem], fmt: Literal["text", "json"] = "text") -> str:
    """Render problems for the CLI: `file:line:col: error[code]: message (hint: ...)` or JSON."""
    ordered = _sorted(problems)
    if fmt == "json":
        return json.dumps([p.to_dict() for p in ordered], indent=2)
    if fmt != "text":
        raise ValueError(f"unknown format '{fmt}': use text or json")
    return "\n".join(str(p) for p in ordered)


def check_filter_expression(where: str, groups: Iterable[str] = ()) -> list[Issue]:
    """Why `where` is not one boolean Spark SQL expression over the filtered table's row."""
    tree, issues = _parse_expression(where, "filter")
    if tree is None:
        return issues
    issues += _walk(tree, "filter", set(groups))
    if not issues:
        # arithmetic over columns of unknown type is typed UNKNOWN, but it is never boolean
        kind = "arithmetic" if isinstance(tree, _ARITHMETIC) else _result_type(tree)
        if kind is not None and kind not in _BOOLEAN_OK:
            issues.append(
                (
                    "filter-not-boolean",
                    f"the filter '{_short(where)}' is a {kind.lower()} expression, not a condition",
                    "a filter must be true or false per row, e.g. region = 'EMEA'",
                )
            )
    return issues


def check_mask_expression(expression: str, groups: Iterable[str] = ()) -> list[Issue]:
    """Why a custom mask `expression` is not one scalar Spark SQL expression of `{col}`."""
    if "{col}" not in expression:
        return [
            (
                "custom-mask-no-col",
                f"the expression '{_short(expression)}' does not use {{col}}",
                "write {col} where the masked column goes, e.g. concat('***', right({col}, 2))",
            )
        ]
    tree, issues = _parse_expression(expression, "mask")
    if tree is None:
        return issues
    issues += _walk(tree, "mask", set(groups))
    placeholders = [p for p in tree.find_all(exp.Placeholder) if p.name == "col"]
    if not placeholders and not issues:
        issues.append(
            (
                "custom-mask-no-col",
                f"the expression '{_short(expression)}' uses {{col}} only inside a string",
                "write {col} unquoted where the column's value goes",
            )
        )
    return issues


# --------------------------------------------------------------------------- expressions

_BOOLEAN_OK = {"BOOLEAN", "UNKNOWN", "NULL"}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg, exp.DPipe,
               exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot)


def _short(text: str, limit: int = 60) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def _what(kind: str) -> str:
    return "the filter" if kind == "filter" else "the expression"


def _parse_description(error: dict[str, object], fallback: str) -> str:
    """sqlglot's parse error in words a policy author understands."""
    description = str(error.get("description") or fallback)
    missing = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>", description)
    if missing:
        return f"the {missing.group(1).upper()} is incomplete (something is missing after it)"
    return description


def _parse_expression(text: str, kind: str) -> tuple[exp.Expression | None, list[Issue]]:
    what = _what(kind)
    try:
        statements = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        where = f" at column {first['col']}" if first.get("col") else ""
        description = _parse_description(first, str(e).splitlines()[0])
        return None, [
            (
                f"{kind}-syntax",
                f"{what} '{_short(text)}' is not valid Spark SQL: {description}{where}",
                "write one Spark SQL expression, e.g. region = 'EMEA'",
            )
        ]
    except SqlglotError as e:
        return None, [
            (
                f"{kind}-syntax",
                f"{what} '{_short(text)}' is not valid Spark SQL: {str(e).splitlines()[0]}",
                "check quotes and parentheses",
            )
        ]
    if len(statements) != 1:
        return None, [
            (
                "not-one-expression",
                f"{what} '{_short(text)}' holds {len(statements)} statements, not one expression",
                "write a single expression without ';'",
            )
        ]
    tree = statements[0]
    if isinstance(tree, exp.Query):
        return None, [
            (
                f"{kind}-reads-table",
                f"{what} '{_short(text)}' is a query; a {kind} may not read any table",
                "use only the columns of the table the rule is on",
            )
        ]
    if not isinstance(tree, exp.Condition) or isinstance(tree, exp.Star):
        return None, [
            (
                "not-one-expression",
                f"{what} '{_short(text)}' is not one expression "
                f"(sqlglot reads it as {type(tree).__name__})",
                "remove trailing words (an alias?) or statement keywords",
            )
        ]
    return tree, []


def _walk(tree: exp.Expression, kind: str, groups: set[str]) -> list[Issue]:
    """Constructs that have no place in a per-row policy expression, and identity misuse."""
    issues: list[Issue] = []
    what = _what(kind)
    for node in tree.walk():
        if isinstance(node, _READS_DATA):
            issues.append(
                (
                    f"{kind}-reads-table",
                    f"{what} reads another table: {_short(node.sql('spark'))}",
                    f"a {kind} may use only the row's own columns; no subqueries",
                )
            )
            break
        if isinstance(node, exp.AggFunc | exp.Window):
            issues.append(
                (
                    "aggregate-in-expression",
                    f"{what} uses an aggregate or window function: {_short(node.sql('spark'))}",
                    "a policy expression is evaluated per row; remove the aggregate",
                )
            )
        elif isinstance(node, exp.Star) and not isinstance(node.parent, exp.AggFunc):
            issues.append(("not-one-expression", f"{what} uses '*'", "name the column"))
        elif isinstance(node, exp.Placeholder) and not (kind == "mask" and node.name == "col"):
            label = "{" + node.name + "}" if node.name else "?"
            issues.append(
                (
                    "bad-placeholder",
                    f"{what} uses the placeholder {label}",
                    "only custom masks take a placeholder, and only {col}",
                )
            )
        elif isinstance(node, exp.CurrentUser) and node.args.get("this") is not None:
            issues.append(_arity("current_user", 0, 1))
        elif isinstance(node, exp.Anonymous):
            issues += _check_call(node, what, groups)
    return issues


def _check_call(node: exp.Anonymous, what: str, groups: set[str]) -> list[Issue]:
    name = str(node.this).lower()
    args = node.expressions
    if name in FORBIDDEN_FUNCTIONS:
        return [
            (
                "forbidden-function",
                f"{what} calls {name}(), which runs arbitrary JVM code",
                "policy expressions may not call reflect/java_method",
            )
        ]
    if name not in IDENTITY_ARITY:
        return []
    if len(args) != IDENTITY_ARITY[name]:
        return [_arity(name, IDENTITY_ARITY[name], len(args))]
    if IDENTITY_ARITY[name] == 0:
        return []
    arg = args[0]
    if not (isinstance(arg, exp.Literal) and arg.is_string):
        return [
            (
                "identity-arg",
                f"{name}() needs a group name as a string literal",
                f"write {name}('analysts')",
            )
        ]
    group = arg.this.lower()
    if group not in groups:
        return [
            (
                "unknown-group",
                f"{name}('{arg.this}') names a group no policy file defines",
                _group_hint(group, groups),
            )
        ]
    return []


def _arity(name: str, expected: int, got: int) -> Issue:
    example = f"{name}()" if expected == 0 else f"{name}('analysts')"
    plural = "argument" if expected == 1 else "arguments"
    return ("identity-arity", f"{name}() takes {expected} {plural}, got {got}", f"write {example}")


def _result_type(tree: exp.Expression) -> str | None:
    try:
        typed = annotate_types(tree.copy(), dialect="spark")
    except Exception:  # typing is a best-effort extra check; the parse already succeeded
        return None
    dtype = typed.type
    return None if dtype is None else dtype.this.name


def _group_hint(group: str, groups: Iterable[str]) -> str:
    known = sorted(groups)
    if not known:
        return f"define it under groups: ({group}: [members])"
    hint = did_you_mean(group, known)
    if hint.startswith("did you mean"):
        return f"{hint} Otherwise define it under groups:"
    return f"define '{group}' under groups: (no group is named like it)"


# --------------------------------------------------------------------------- set checks


def _sorted(problems: Iterable[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: p.sort_key)


def _meta_from_rules(ps: PolicySet) -> list[FileMeta]:
    metas: dict[str, FileMeta] = {}
    for rule in (*ps.grants, *ps.row_filters, *ps.column_masks):
        if rule.file_domain is not None and rule.source.file not in metas:
            metas[rule.source.file] = FileMeta(rule.source.file, rule.file_domain, rule.source)
    return list(metas.values())


def _meet(a: NamePattern, b: NamePattern) -> NamePattern | None:
    """The table pattern both match, or None when no table matches both."""
    parts: list[str] = []
    for x, y in ((a.catalog, b.catalog), (a.schema, b.schema), (a.table, b.table)):
        if x == "*":
            parts.append(y)
        elif y == "*" or x == y:
            parts.append(x)
        else:
            return None
    return NamePattern(*parts)


def _table_pairs(masks: Sequence[ColumnMask]) -> Iterator[tuple[ColumnMask, ColumnMask]]:
    """Equal-priority mask pairs whose tables can meet, without comparing every pair.

    Masks on one concrete table share a bucket; only wildcard masks are compared widely.
    """
    by_priority: dict[int, list[ColumnMask]] = defaultdict(list)
    for m in masks:
        by_priority[m.priority].append(m)
    for group in by_priority.values():
        concrete: dict[tuple[str, str, str], list[ColumnMask]] = defaultdict(list)
        wild: list[ColumnMask] = []
        for m in group:
            (wild if "*" in m.on.table_key else concrete[m.on.table_key]).append(m)
        for bucket in concrete.values():
            yield from combinations(bucket, 2)
        for i, w in enumerate(wild):
            for other in wild[i + 1 :]:
                if _meet(w.on, other.on) is not None:
                    yield (w, other)
            for key, bucket in concrete.items():
                if w.on.matches_table(*key):
                    for m in bucket:
                        yield (w, m)


@dataclass(frozen=True)
class _Audience:
    """Users a mask reaches: everyone except `users`, or exactly `users`."""

    everyone: bool
    users: frozenset[str]

    def meet(self, other: _Audience) -> str | None:
        """A user both reach (as text for a message), or None when provably nobody."""
        if self.everyone and other.everyone:
            return "any user not exempted by either"
        if self.everyone or other.everyone:
            finite, cofinite = (other, self) if self.everyone else (self, other)
            common = finite.users - cofinite.users
        else:
            common = self.users & other.users
        return f"user '{min(common)}'" if common else None


@dataclass(frozen=True)
class _Atom:
    """A (table pattern, column) a mask can hit, and why."""

    table: NamePattern
    column: str  # a name or '*'
    why: str


class _Validator:
    def __init__(
        self,
        ps: PolicySet,
        locations: Locations,
        meta: list[FileMeta],
        *,
        full_meta: bool,
    ) -> None:
        self.ps = ps
        self.locations = locations
        self.meta = meta
        self.full_meta = full_meta
        self.problems: list[Problem] = []
        self.groups = set(ps.groups)
        self._members: dict[str, frozenset[str]] = {}

    def run(self) -> list[Problem]:
        self.check_groups()
        self.check_principals()
        self.check_enums()
        self.check_ids()
        self.check_expressions()
        self.check_domains()
        self.check_mask_overlap()
        self.check_mask_reads_denied()
        self.check_tags_known()
        return self.problems

    # ---- helpers

    def where(self, rule: Source, key: str, index: int = -1) -> Source:
        return self.locations.get((rule, key, index)) or self.locations.get((rule, key, -1), rule)

    def report(
        self,
        source: Source,
        code: str,
        message: str,
        hint: str = "",
        severity: Severity = "error",
    ) -> None:
        self.problems.append(Problem.at(source, code, message, hint, severity))

    def members(self, group: str) -> frozenset[str]:
        """Users in `group`, directly or through nesting (cycles are reported elsewhere)."""
        if group not in self._members:
            users: set[str] = set()
            seen: set[str] = set()
            stack = [group]
            while stack:
                g = stack.pop()
                if g in seen:
                    continue
                seen.add(g)
                for m in self.ps.groups.get(g, ()):
                    if m.kind == "user":
                        users.add(m.name)
                    elif m.kind == "group":
                        stack.append(m.name)
            self._members[group] = frozenset(users)
        return self._members[group]

    def expand(self, principals: Iterable[Principal]) -> tuple[bool, set[str]]:
        everyone, users = False, set()
        for p in principals:
            if p.kind == "any":
                everyone = True
            elif p.kind == "user":
                users.add(p.name)
            else:
                users |= self.members(p.name)
        return everyone, users

    def audience(self, mask: ColumnMask) -> _Audience:
        everyone, users = self.expand(mask.principals)
        exempt_all, exempt = self.expand(mask.except_)
        if exempt_all:
            return _Audience(False, frozenset())
        if everyone:
            return _Audience(True, frozenset(exempt))
        return _Audience(False, frozenset(users - exempt))

    # ---- groups and principals

    def check_groups(self) -> None:
        for group, members in self.ps.groups.items():
            for m in members:
                if m.kind == "group" and m.name not in self.groups:
                    where = self.locations.get(
                        member_location_key(group, m)
                    ) or self.ps.group_sources.get(group, Source("<groups>"))
                    self.report(
                        where,
                        "unknown-group",
                        f"group '{group}' contains group:{m.name}, which is not defined",
                        _group_hint(m.name, self.groups),
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
        def check(rule_source: Source, key: str, principals: Iterable[Principal], what: str):
            for i, p in enumerate(principals):
                if p.kind == "group" and p.name not in self.groups:
                    self.report(
                        self.where(rule_source, key, i),
                        "unknown-group",
                        f"{what} names group:{p.name}, which is not defined",
                        _group_hint(p.name, self.groups),
                    )

        for g in self.ps.grants:
            check(g.source, "principals", g.principals, f"grant '{g.id}'")
        for f in self.ps.row_filters:
            check(f.source, "principals", f.principals, f"row filter '{f.id}'")
        for m in self.ps.column_masks:
            check(m.source, "principals", m.principals, f"column mask '{m.id}'")
            check(m.source, "except", m.except_, f"the except list of column mask '{m.id}'")
        for d in self.ps.domains.values():
            check(d.source, "owners", d.owners, f"domain '{d.name}' owners")

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
        for rule in (*self.ps.grants, *self.ps.row_filters, *self.ps.column_masks):
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
            for code, message, hint in check_filter_expression(f.where, self.groups):
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
                for code, message, hint in check_mask_expression(m.expression, self.groups):
                    self.report(at, code, f"column mask '{m.id}': {message}", hint)
            elif m.expression is not None:
                self.report(
                    self.where(m.source, "expression"),
                    "expression-not-custom",
                    f"column mask '{m.id}' has an expression but mask '{m.mask}' ignores it",
                    "set mask: custom to use the expression, or remove it",
                )

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
        for rule in (*self.ps.grants, *self.ps.row_filters, *self.ps.column_masks):
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

    def check_mask_overlap(self) -> None:
        """Two equal-priority masks must never both reach one column for one user.

        Conservative: tables, columns and users are compared as patterns and sets, so a pair
        is reported unless some part is provably disjoint.
        """
        masks = [m for m in self.ps.column_masks if m.mask in MASKS]
        order = {id(m): i for i, m in enumerate(masks)}
        by_tag: dict[str, list[TagAssignment]] = defaultdict(list)
        for t in self.ps.tags:
            for tag in t.tags:
                by_tag[tag].append(t)
        atoms = {id(m): self._atoms(m, by_tag) for m in masks}
        audiences = {id(m): self.audience(m) for m in masks}
        pairs = sorted(
            (tuple(sorted(pair, key=lambda m: order[id(m)])) for pair in _table_pairs(masks)),
            key=lambda pair: (order[id(pair[1])], order[id(pair[0])]),
        )
        for a, b in pairs:
            if a.id == b.id:  # reported as duplicate-id
                continue
            hit = self._common_column(a, b, atoms[id(a)], atoms[id(b)])
            if hit is None:
                continue
            who = audiences[id(a)].meet(audiences[id(b)])
            if who is None:
                continue
            self.report(
                self.where(b.source, "id"),
                "mask-overlap",
                f"column masks '{a.id}' ({a.source}) and '{b.id}' both have "
                f"priority {a.priority} and can both mask {hit} for {who}",
                "give one a higher priority (higher wins), or make their "
                "tables, columns or principals disjoint",
            )

    def _atoms(self, m: ColumnMask, by_tag: Mapping[str, list[TagAssignment]]) -> list[_Atom]:
        out = [_Atom(m.on, c, f"column '{c}'") for c in m.columns]
        seen: set[int] = set()
        for tag in m.tags:
            for t in by_tag.get(tag, ()):
                if id(t) in seen:
                    continue
                seen.add(id(t))
                table = _meet(m.on, NamePattern(t.on.catalog, t.on.schema, t.on.table))
                if table is None:
                    continue
                if t.on.column is None:
                    out.append(_Atom(table, "*", f"table tag '{tag}' ({t.source})"))
                else:
                    out.append(_Atom(table, t.on.column, f"tag '{tag}' ({t.source})"))
        return out

    def _common_column(
        self,
        a: ColumnMask,
        b: ColumnMask,
        atoms_a: list[_Atom],
        atoms_b: list[_Atom],
    ) -> str | None:
        table = _meet(a.on, b.on)
        shared = sorted(set(a.tags) & set(b.tags))
        if shared:
            return f"any column tagged '{shared[0]}' on {table}"
        for x in atoms_a:
            for y in atoms_b:
                t = _meet(x.table, y.table)
                if t is None:
                    continue
                if x.column == y.column or "*" in (x.column, y.column):
                    col = y.column if x.column == "*" else x.column
                    target = f"column {t}.{col}" if col != "*" else f"columns of {t}"
                    return f"{target} (via {x.why} and {y.why})"
        return None

    def check_mask_reads_denied(self) -> None:
        """A warning where some user gets both a column deny and a custom mask reading that
        column: such a mask would show the denied values, so at run time every statement by
        that user reading the masked column is refused (only explicit denies are known here)."""
        denies = [g for g in self.ps.grants
                  if g.effect == "deny" and "select" in g.privileges and g.columns]
        for m in self.ps.column_masks:
            read = mask_columns(m, "{col}")
            if not read:
                continue
            audience = self.audience(m)
            for g in denies:
                shared = sorted(read.intersection(g.columns or ()))
                table = _meet(m.on, g.on)
                if not shared or table is None:
                    continue
                everyone, users = self.expand(g.principals)
                denied = _Audience(everyone, frozenset() if everyone else frozenset(users))
                who = audience.meet(denied)
                if who is None:
                    continue
                self.report(
                    self.where(m.source, "expression"),
                    "mask-reads-denied-column",
                    f"column mask '{m.id}' reads column {shared[0]} of {table}, which deny "
                    f"'{g.id}' hides from {who}; statements by that user reading the masked "
                    "column are refused",
                    "mask with a built-in mask or without the denied column, or exempt those "
                    "users from the mask (except:)",
                    "warning",
                )

    def check_tags_known(self) -> None:
        assigned = {tag for t in self.ps.tags for tag in t.tags}
        for m in self.ps.column_masks:
            for i, tag in enumerate(m.tags):
                if tag not in assigned:
                    self.report(
                        self.where(m.source, "tags", i),
                        "unknown-tag",
                        f"column mask '{m.id}' uses tag '{tag}', which no policy file assigns",
                        _tag_hint(tag, assigned),
                        "warning",
                    )


def _kind(rule: Rule) -> str:
    if isinstance(rule, Grant):
        return "grant"
    return "row filter" if isinstance(rule, RowFilter) else "column mask"


def _domain_hint(name: str, domains: Mapping[str, object]) -> str:
    if not domains:
        return f"define it under domains: ({name}: {{owners: [...], schemas: [...]}})"
    return did_you_mean(name, sorted(domains))


def _outside_hint(schemas: Sequence[str]) -> str:
    owned = ", ".join(schemas) or "(none)"
    return f"this domain owns {owned}; move the rule to a central file or the owning domain"


def _tag_hint(tag: str, assigned: set[str]) -> str:
    hint = did_you_mean(tag, sorted(assigned)) if assigned else ""
    base = "fine if the catalog assigns it; otherwise tag columns under tags:"
    return f"{hint} {base}" if hint.startswith("did you mean") else base
