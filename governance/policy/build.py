"""Building the policy model: one PolicySet from every policy file's YAML nodes.

Reads each file through governance.policy.source and turns sections into rules of
governance.policy.model, merged across files in path order. Structural problems (a value of
the wrong kind, a missing key) are reported here; what is wrong between rules and files is
governance.policy.validate's. Never raises: a caller decides what problems mean.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from yaml.nodes import Node, SequenceNode

from governance.identity import InvalidName, canonical_group, canonical_name
from governance.policy.model import (
    Domain,
    PolicySet,
    Principal,
    Source,
    TagAssignment,
    content_hash,
)
from governance.policy.problems import Problem
from governance.policy.rules import RuleLists, RuleReader
from governance.policy.source import DOMAIN_KEYS, TOP_KEYS, Locations, policy_files


@dataclass
class FileMeta:
    """Per-file facts the merged PolicySet forgets but federated ownership checks need."""

    file: str
    domain: str | None = None
    domain_source: Source | None = None
    groups: list[tuple[str, Source]] = field(default_factory=list)
    domains: list[tuple[str, Source]] = field(default_factory=list)
    tags: list[TagAssignment] = field(default_factory=list)


@dataclass
class ParseResult:
    """What the YAML said, before set-level validation; `problems` are structural ones."""

    policy_set: PolicySet
    problems: list[Problem]
    locations: Locations
    meta: list[FileMeta]


def parse_policy_dir(path: str | Path) -> ParseResult:
    """Read a policy directory (or one file) without set-level validation; never raises."""
    root = Path(path)
    label = root.resolve().name or str(root)
    if root.is_file():
        targets = [(root.name, root)]
    elif root.is_dir():
        targets = [(f"{label}/{p.relative_to(root).as_posix()}", p) for p in policy_files(root)]
    else:
        problem = Problem(
            str(path),
            1,
            1,
            f"policy directory '{path}' does not exist",
            "pass the directory that holds the policy YAML files",
            "error",
            "no-policy-dir",
        )
        return ParseResult(PolicySet(), [problem], {}, [])
    blobs: list[tuple[str, bytes]] = []
    read_problems: list[Problem] = []
    for name, p in targets:
        try:
            blobs.append((name, p.read_bytes()))
        except OSError as e:
            read_problems.append(
                Problem(
                    name,
                    1,
                    1,
                    f"cannot read the file: {e.strerror or e}",
                    "check the file's permissions",
                    "error",
                    "unreadable",
                )
            )
    result = _parse_blobs(blobs)
    result.problems.extend(read_problems)
    if not targets:
        result.problems.append(
            Problem(
                label,
                1,
                1,
                f"no *.yaml or *.yml policy files under '{path}'",
                "with no policies every table is denied; add policy files",
                "warning",
                "no-policy-files",
            )
        )
    return result


def parse_policy_text(files: Mapping[str, str]) -> ParseResult:
    """Read in-memory policy files without set-level validation; never raises."""
    return _parse_blobs([(name, text.encode("utf-8")) for name, text in files.items()])


def member_location_key(group: str, member: Principal) -> tuple[Source, str, int]:
    """Where `member` was first listed under `group` (a Locations key)."""
    return (Source("<groups>"), f"{group}|{member.key}", -1)


# --------------------------------------------------------------------------- internals


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building a set: a 100k-line policy set allocates millions of
    short-lived acyclic objects, and repeated full collections over them triple load time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Acc:
    """Everything read so far, merged across files in path order."""

    groups: dict[str, list[Principal]] = field(default_factory=dict)
    group_sources: dict[str, Source] = field(default_factory=dict)
    domains: dict[str, Domain] = field(default_factory=dict)
    tags: list[TagAssignment] = field(default_factory=list)
    governed_tags: dict[str, Source] = field(default_factory=dict)
    rules: RuleLists = field(default_factory=RuleLists)
    problems: list[Problem] = field(default_factory=list)
    locations: Locations = field(default_factory=dict)
    meta: list[FileMeta] = field(default_factory=list)


def _parse_blobs(blobs: list[tuple[str, bytes]]) -> ParseResult:
    blobs = sorted(blobs, key=lambda b: b[0])
    acc = _Acc()
    with gc_paused():
        for name, data in blobs:
            _FileParser(name, acc).parse(data)
    ps = PolicySet(
        groups={g: tuple(m) for g, m in acc.groups.items()},
        group_sources=dict(acc.group_sources),
        domains=dict(acc.domains),
        tags=tuple(acc.tags),
        grants=tuple(acc.rules.grants),
        tag_grants=tuple(acc.rules.tag_grants),
        governed_tags=dict(acc.governed_tags),
        row_filters=tuple(acc.rules.row_filters),
        column_masks=tuple(acc.rules.column_masks),
        aggregation_policies=tuple(acc.rules.aggregation_policies),
        files=tuple(name for name, _ in blobs),
        content_hash=content_hash(blobs),
    )
    return ParseResult(ps, acc.problems, acc.locations, acc.meta)


class _FileParser(RuleReader):
    """Reads one file's node tree into the accumulator."""

    def __init__(self, name: str, acc: _Acc) -> None:
        super().__init__(name, acc.problems, acc.locations, acc.rules)
        self.acc = acc
        self.meta = FileMeta(name)

    # ---- document

    def parse(self, data: bytes) -> None:
        self.acc.meta.append(self.meta)
        root = self.compose(data)
        if root is None or self.is_null(root):
            return
        fields = self.mapping(root, "a policy file", "grants: [...]")
        if fields is None:
            return
        top = self.known_keys(fields, TOP_KEYS, "a policy file")
        if "domain" in top:
            self.domain = self.text(top["domain"], "domain", "sales")
            if self.domain is not None:
                self.domain = self.domain.lower()
                self.meta.domain = self.domain
                self.meta.domain_source = self.src(top["domain"])
        if "description" in top:
            self.text(top["description"], "description", "Sales policies")
        sections = {
            "groups": self.groups,
            "domains": self.domains,
            "tags": self.tags,
            "governed_tags": self.governed_tags,
            "grants": self.grants,
            "row_filters": self.row_filters,
            "column_masks": self.column_masks,
            "aggregation_policies": self.aggregation_policies,
        }
        for key, parse in sections.items():
            if key in top:
                parse(top[key])

    # ---- sections

    def groups(self, node: Node) -> None:
        fields = self.mapping(node, "groups", "groups: {analysts: [alice, group:emea]}")
        if fields is None:
            return
        for name, (key, value) in fields.items():
            try:
                group = canonical_group(name)
            except InvalidName as e:
                self.report(
                    key,
                    "bad-name",
                    str(e),
                    "write the bare name, e.g. analysts: [...] (not group:analysts)",
                )
                continue
            members: list[Principal] = []
            if not self.is_null(value):
                items = self.text_list(value, f"group '{group}'", "[alice, group:emea-analysts]")
                for text, item in items or []:
                    member = self.principal(text, item)
                    if member is None:
                        continue
                    if member.kind == "any":
                        self.report(
                            item,
                            "bad-principal",
                            f"group '{group}' cannot contain '*'",
                            "grant to '*' directly instead of through a group",
                        )
                        continue
                    members.append(member)
                    member_key = member_location_key(group, member)
                    self.acc.locations.setdefault(member_key, self.src(item))
            source = self.src(key)
            self.meta.groups.append((group, source))
            merged = self.acc.groups.setdefault(group, [])
            merged.extend(m for m in members if m not in merged)
            self.acc.group_sources.setdefault(group, source)

    def domains(self, node: Node) -> None:
        example = "domains: {sales: {owners: [group:sales-owners], schemas: [main.sales]}}"
        fields = self.mapping(node, "domains", example)
        if fields is None:
            return
        for name, (key, value) in fields.items():
            domain = name.lower()
            source = self.src(key)
            self.meta.domains.append((domain, source))
            if domain in self.acc.domains:
                first = self.acc.domains[domain].source
                self.report(
                    key,
                    "duplicate-domain",
                    f"domain '{domain}' is already defined at {first}",
                    "define each domain once; list all its schemas there",
                )
                continue
            body = self.mapping(value, f"domain '{domain}'", example)
            if body is None:
                continue
            keys = self.known_keys(body, DOMAIN_KEYS, f"domain '{domain}'")
            owners: tuple[Principal, ...] = ()
            if "owners" in keys:
                owners = (
                    self.principals(
                        keys["owners"],
                        f"owners of domain '{domain}'",
                        source,
                        "owners",
                        allow_empty=True,
                    )
                    or ()
                )
            description = ""
            if "description" in keys:
                description = self.text(keys["description"], "description", "Orders") or ""
            schemas: list[str] = []
            if "schemas" in keys:
                items = (
                    self.text_list(keys["schemas"], f"schemas of domain '{domain}'", "[main.sales]")
                    or []
                )
                for text, item in items:
                    parts = [p.strip().strip("`").lower() for p in text.split(".")]
                    if len(parts) != 2 or not all(parts) or any("*" in p for p in parts):
                        self.report(
                            item,
                            "bad-name",
                            f"'{text}' is not a schema name of the form catalog.schema",
                            "list whole schemas without wildcards, e.g. main.sales",
                        )
                        continue
                    self.loc(source, "schemas", item, len(schemas))
                    schemas.append(".".join(parts))
            self.acc.domains[domain] = Domain(domain, owners, description, tuple(schemas), source)

    def governed_tags(self, node: Node) -> None:
        """`governed_tags: {pii: {description: ...}}` (or a list of names): the tags that
        may be assigned through Lakegate (governance.policy.tag_rights)."""
        example = "governed_tags: {pii: {description: Personal data}}"
        if isinstance(node, SequenceNode):
            items = self.text_list(node, "governed_tags", "[pii, region]") or []
            entries = [(text, item, None) for text, item in items]
        else:
            fields = self.mapping(node, "governed_tags", example)
            if fields is None:
                return
            entries = [(name, key, value) for name, (key, value) in fields.items()]
        for name, key, value in entries:
            try:
                tag = canonical_name(name.strip(), "tag")
            except InvalidName as e:
                self.report(key, "bad-tag", str(e), "write the tag like: pii")
                continue
            if value is not None and not self.is_null(value):
                body = self.mapping(value, f"governed tag '{tag}'", example)
                if body is not None:
                    keys = self.known_keys(body, ("description",), f"governed tag '{tag}'")
                    if "description" in keys:
                        self.text(keys["description"], "description", "Personal data")
            if tag in self.acc.governed_tags:
                self.report(
                    key,
                    "duplicate-tag",
                    f"governed tag '{tag}' is already declared at {self.acc.governed_tags[tag]}",
                    "declare each governed tag once",
                )
                continue
            self.acc.governed_tags[tag] = self.src(key)

    def tags(self, node: Node) -> None:
        fields = self.mapping(node, "tags", "tags: {main.sales.customers.email: [pii]}")
        if fields is None:
            return
        for name, (key, value) in fields.items():
            pattern = self.pattern_text(name, key, "tag target", allow_column=True)
            items = self.text_list(value, f"tags of '{name}'", "[pii]")
            if pattern is None or items is None:
                continue
            tags = tuple(t.lower() for t, _ in items)
            assignment = TagAssignment(pattern, tags, self.src(key))
            self.acc.tags.append(assignment)
            self.meta.tags.append(assignment)
