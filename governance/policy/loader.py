"""Load a directory of YAML policy files into one PolicySet, or refuse it with every problem.

Policies are reviewed like code, so every object keeps the file, line and column it came from
(we compose YAML nodes instead of loading plain dicts), and every problem says where it is
and how to fix it. Loading fails closed: with any error nothing is returned, so a reloading
caller keeps its last good policy set instead of running a half-read one.
"""

from __future__ import annotations

import difflib
import gc
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from governance.errors import LakegateError
from governance.identity import InvalidName, canonical_group
from governance.policy.model import (
    ANY,
    MASKS,
    PRIVILEGES,
    ColumnMask,
    Domain,
    Grant,
    NamePattern,
    PolicySet,
    Principal,
    RowFilter,
    Source,
    TagAssignment,
    content_hash,
)

Severity = Literal["error", "warning"]

TOP_KEYS: tuple[str, ...] = (
    "groups",
    "domains",
    "tags",
    "grants",
    "row_filters",
    "column_masks",
    "domain",  # extension: the file belongs to this domain (federated ownership)
    "description",  # extension: free text about the file
)
DOMAIN_KEYS: tuple[str, ...] = ("owners", "description", "schemas")
GRANT_KEYS: tuple[str, ...] = ("id", "principals", "privileges", "on", "effect", "columns")
ROW_FILTER_KEYS: tuple[str, ...] = ("id", "on", "principals", "where", "kind")
COLUMN_MASK_KEYS: tuple[str, ...] = (
    "id",
    "on",
    "tags",
    "columns",
    "mask",
    "expression",
    "principals",
    "except",
    "priority",
)
EFFECTS: tuple[str, ...] = ("allow", "deny")
FILTER_KINDS: tuple[str, ...] = ("permissive", "restrictive")

# Names people reach for that difflib would not map (or would map wrongly, e.g. masks -> tags).
_KEY_ALIASES: dict[str, str] = {
    "masks": "column_masks",
    "column_mask": "column_masks",
    "columnmasks": "column_masks",
    "filters": "row_filters",
    "row_filter": "row_filters",
    "rowfilters": "row_filters",
    "grant": "grants",
    "group": "groups",
    "tag": "tags",
    "principal": "principals",
    "users": "principals",
    "privilege": "privileges",
    "on_table": "on",
    "table": "on",
    "column": "columns",
    "exempt": "except",
    "exceptions": "except",
    "condition": "where",
    "filter": "where",
    "type": "kind",
    "expr": "expression",
    "owner": "owners",
    "schema": "schemas",
    "name": "id",
}
_KEYS_BY_SECTION: dict[str, tuple[str, ...]] = {
    "grants": GRANT_KEYS,
    "row_filters": ROW_FILTER_KEYS,
    "column_masks": COLUMN_MASK_KEYS,
}

# Grants of domain owners are compiled with ids `domain:NAME`; rule ids must not collide.
RESERVED_ID_PREFIX = "domain:"
# The enforcer joins principals with '|' and casbin fields are comma-separated.
_BAD_NAME_CHARS = re.compile(r"[\s,|]")
_KIND_PREFIX = re.compile(r"^(user|group):", re.IGNORECASE)

# libyaml composes ~10x faster than pure Python (100k-line policy sets); same nodes and marks.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_INT = "tag:yaml.org,2002:int"
# Scalars whose raw text we accept as a name: `on`, `yes`, `no` are booleans in YAML 1.1 but
# a user called `no` is still a user; we read the text as written.
_SCALAR_NAMES = {
    _STR: "a string",
    _INT: "an integer",
    _NULL: "nothing",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:timestamp": "a date",
}
_TEXT_TAGS = frozenset(
    {
        _STR,
        _INT,
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    }
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the policies: where, what, and how to fix it."""

    file: str
    line: int
    column: int
    message: str
    hint: str = ""
    severity: Severity = "error"
    code: str = "invalid"

    @classmethod
    def at(
        cls,
        source: Source,
        code: str,
        message: str,
        hint: str = "",
        severity: Severity = "error",
    ) -> Problem:
        return cls(source.file, source.line or 1, source.column or 1, message, hint, severity, code)

    def __str__(self) -> str:
        text = (
            f"{self.file}:{self.line}:{self.column}: {self.severity}[{self.code}]: {self.message}"
        )
        return f"{text} (hint: {self.hint})" if self.hint else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
        }

    @property
    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.file, self.line, self.column, self.code, self.message)


class PolicyError(LakegateError):
    """The policy set was refused; `problems` holds every reason (one line each in str())."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = sorted(problems, key=lambda p: p.sort_key)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


# (rule source, field, list index or -1) -> where that value was written
Locations = dict[tuple[Source, str, int], Source]


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


# --------------------------------------------------------------------------- public API


def load_policy_dir(path: str | Path) -> PolicySet:
    """Read, merge and validate every policy file under `path`; raise PolicyError on any error."""
    return _checked(parse_policy_dir(path))


def load_policy_text(files: Mapping[str, str]) -> PolicySet:
    """Same as load_policy_dir over in-memory files (name -> YAML), e.g. from a git revision.

    Every given file is loaded; filter names with `is_policy_file` first if they may include
    policy tests.
    """
    return _checked(parse_policy_text(files))


def is_policy_file(relative: str | Path) -> bool:
    """Whether a path relative to the policy dir is a policy file (not a policy test, not hidden).

    `tests/` under the policy dir holds policy test cases, a different format.
    """
    parts = Path(relative).parts
    if not parts or Path(relative).suffix.lower() not in (".yaml", ".yml"):
        return False
    if any(p.startswith(".") for p in parts):
        return False
    return not (len(parts) > 1 and parts[0] == "tests")


def policy_files(path: str | Path) -> list[Path]:
    """The policy files of a directory, recursively, sorted by relative path."""
    root = Path(path)
    found = [p for p in root.rglob("*") if p.is_file() and is_policy_file(p.relative_to(root))]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


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


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A 'did you mean X?' hint, or the list of allowed words when nothing is close."""
    choices = list(choices)
    alias = _KEY_ALIASES.get(word.lower())
    if alias in choices:
        return f"did you mean '{alias}'?"
    close = difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "expected one of: " + ", ".join(choices)


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


def _checked(result: ParseResult) -> PolicySet:
    from governance.policy.validate import validate_parsed  # validate imports this module

    with gc_paused():
        problems = result.problems + validate_parsed(result)
    if any(p.severity == "error" for p in problems):
        raise PolicyError(problems)
    return result.policy_set


@dataclass
class _Acc:
    """Everything read so far, merged across files in path order."""

    groups: dict[str, list[Principal]] = field(default_factory=dict)
    group_sources: dict[str, Source] = field(default_factory=dict)
    domains: dict[str, Domain] = field(default_factory=dict)
    tags: list[TagAssignment] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)
    row_filters: list[RowFilter] = field(default_factory=list)
    column_masks: list[ColumnMask] = field(default_factory=list)
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
        grants=tuple(acc.grants),
        row_filters=tuple(acc.row_filters),
        column_masks=tuple(acc.column_masks),
        files=tuple(name for name, _ in blobs),
        content_hash=content_hash(blobs),
    )
    return ParseResult(ps, acc.problems, acc.locations, acc.meta)


class _FileParser:
    """Reads one file's node tree into the accumulator, reporting problems at exact nodes."""

    def __init__(self, name: str, acc: _Acc) -> None:
        self.name = name
        self.acc = acc
        self.meta = FileMeta(name)
        self.domain: str | None = None
        self.near_misses: set[str] = set()  # keys the last mapping's typos were close to
        self.null_keys: set[str] = set()  # keys of the last mapping written as `key: null`
        self.default_ids: set[str] = set()

    # ---- helpers

    def src(self, node: Node) -> Source:
        mark = node.start_mark
        return Source(self.name, mark.line + 1, mark.column + 1)

    def report(
        self,
        where: Node | Source,
        code: str,
        message: str,
        hint: str = "",
        severity: Severity = "error",
    ) -> None:
        source = where if isinstance(where, Source) else self.src(where)
        self.acc.problems.append(Problem.at(source, code, message, hint, severity))

    def loc(self, rule: Source, key: str, node: Node, index: int = -1) -> None:
        self.acc.locations[(rule, key, index)] = self.src(node)

    def is_null(self, node: Node | None) -> bool:
        return node is None or (isinstance(node, ScalarNode) and node.tag == _NULL)

    def wrong_type(self, node: Node, what: str, expected: str, example: str) -> None:
        got = {MappingNode: "a mapping", SequenceNode: "a list"}.get(type(node), "a value")
        if isinstance(node, ScalarNode):
            got = _SCALAR_NAMES.get(node.tag, f"a value tagged {node.tag}")
        self.report(
            node, "wrong-type", f"{what} must be {expected}, got {got}", f"write it like: {example}"
        )

    def mapping(self, node: Node, what: str, example: str) -> dict[str, tuple[Node, Node]] | None:
        """Check `node` is a mapping with scalar, unique keys; return key -> (key, value)."""
        if not isinstance(node, MappingNode):
            self.wrong_type(node, what, "a mapping", example)
            return None
        out: dict[str, tuple[Node, Node]] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                self.report(
                    key,
                    "unknown-key",
                    f"YAML merge keys ('<<') are not supported in {what}",
                    "write the keys out; use an anchor (&x / *x) on a whole value",
                )
                continue
            if not isinstance(key, ScalarNode) or key.tag not in _TEXT_TAGS:
                self.report(
                    key,
                    "wrong-type",
                    f"a key in {what} must be a plain name",
                    f"write it like: {example}",
                )
                continue
            text = str(key.value).strip()
            if text in out:
                first = self.src(out[text][0])
                self.report(
                    key,
                    "duplicate-key",
                    f"'{text}' appears twice in {what} (first at line {first.line})",
                    "YAML keeps only the last one; merge the two into one entry",
                )
                continue
            out[text] = (key, value)
        return out

    def known_keys(
        self,
        fields: dict[str, tuple[Node, Node]],
        allowed: tuple[str, ...],
        what: str,
        section: str | None = None,
    ) -> dict[str, Node]:
        """Report unknown keys (with a did-you-mean); return the known ones, nulls dropped."""
        out: dict[str, Node] = {}
        self.near_misses = set()
        self.null_keys = set()
        for text, (key, value) in fields.items():
            if text in allowed:
                if not self.is_null(value):
                    out[text] = value
                elif isinstance(value, ScalarNode) and value.value.lower() == "null":
                    self.null_keys.add(text)
                continue
            hint = did_you_mean(text, allowed)
            if hint.startswith("did you mean"):
                self.near_misses.add(hint.split("'")[1])
            else:
                owner = [s for s, keys in _KEYS_BY_SECTION.items() if s != section and text in keys]
                if owner:
                    hint = f"'{text}' belongs in {owner[0]}, not {section}; " + hint
            self.report(key, "unknown-key", f"unknown key '{text}' in {what}", hint)
        return out

    def text(self, node: Node, what: str, example: str) -> str | None:
        if isinstance(node, ScalarNode) and node.tag in _TEXT_TAGS:
            value = str(node.value).strip()
            if value:
                return value
            self.report(node, "empty-value", f"{what} is empty", f"write it like: {example}")
            return None
        self.wrong_type(node, what, "a string", example)
        return None

    def text_list(self, node: Node, what: str, example: str) -> list[tuple[str, Node]] | None:
        if not isinstance(node, SequenceNode):
            self.wrong_type(node, what, "a list", example)
            return None
        out: list[tuple[str, Node]] = []
        seen: set[str] = set()
        for item in node.value:
            value = self.text(item, f"an entry of {what}", example)
            if value is None:
                continue
            if value.lower() in seen:
                self.report(
                    item,
                    "duplicate-entry",
                    f"'{value}' is listed twice in {what}",
                    "remove the repeated entry",
                    "warning",
                )
                continue
            seen.add(value.lower())
            out.append((value, item))
        return out

    def principals(
        self,
        node: Node,
        what: str,
        rule: Source,
        key: str,
        *,
        allow_empty: bool = False,
    ) -> tuple[Principal, ...] | None:
        items = self.text_list(node, what, "[group:analysts, alice, '*']")
        if items is None:
            return None
        if not items and not allow_empty:
            self.report(
                node,
                "empty-list",
                f"{what} is empty, so the rule applies to nobody",
                "name at least one principal (user:NAME, group:NAME, NAME or '*')",
            )
            return None
        out: list[Principal] = []
        for value, item in items:
            principal = self.principal(value, item)
            if principal is None:
                continue
            self.loc(rule, key, item, len(out))
            out.append(principal)
        return tuple(out)

    def principal(self, value: str, node: Node) -> Principal | None:
        value = _KIND_PREFIX.sub(lambda m: m.group(0).lower(), value)  # Group:x -> group:x
        try:
            return Principal.parse(value)
        except ValueError as e:
            # Names outside governance.identity's set (look-alikes, '*' in a name, spaces,
            # commas, '|') are refused here, with the first offending character named.
            self.report(
                node,
                "bad-principal",
                str(e),
                "a principal is user:NAME, group:NAME, a bare NAME or '*' (quoted), "
                "one per list entry",
            )
            return None

    def pattern(self, node: Node, what: str, *, allow_column: bool = False) -> NamePattern | None:
        example = "main.sales.orders or main.sales.*"
        value = self.text(node, what, example)
        if value is None:
            return None
        return self.pattern_text(value, node, what, allow_column=allow_column)

    def pattern_text(
        self,
        value: str,
        node: Node,
        what: str,
        *,
        allow_column: bool = False,
    ) -> NamePattern | None:
        try:
            pattern = NamePattern.parse(value, allow_column=allow_column)
        except ValueError as e:
            hint = "each part is a name or '*', e.g. main.sales.*"
            if not allow_column and value.count(".") == 3:
                hint = "name the table here and the column under columns: [...]"
            self.report(node, "bad-name", f"{what}: {e}", hint)
            return None
        parts = [pattern.catalog, pattern.schema, pattern.table, pattern.column or ""]
        if any("*" in p and p != "*" for p in parts):
            self.report(
                node,
                "bad-name",
                f"{what}: '{value}' uses '*' inside a name; '*' must be a whole part",
                "write e.g. main.sales.* (prefix patterns like sales_* are not supported)",
            )
            return None
        return pattern

    def enum(self, node: Node, what: str, allowed: tuple[str, ...], code: str) -> str | None:
        value = self.text(node, what, allowed[0])
        if value is None:
            return None
        if value.lower() not in allowed:
            self.report(node, code, f"unknown {what} '{value}'", did_you_mean(value, allowed))
            return None
        return value.lower()

    def missing(self, node: Node, what: str, key: str, example: str) -> None:
        if key in self.near_misses:  # already reported as a misspelt key, with the fix
            return
        self.report(node, "missing-key", f"{what} has no '{key}'", f"add {key}: {example}")

    # ---- document

    def parse(self, data: bytes) -> None:
        self.acc.meta.append(self.meta)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.report(
                Source(self.name, 1, 1),
                "bad-encoding",
                f"the file is not UTF-8 (byte {e.start})",
                "save the file as UTF-8",
            )
            return
        try:
            root = yaml.compose(text, Loader=_LOADER)
        except yaml.MarkedYAMLError as e:
            self._yaml_error(e)
            return
        except yaml.YAMLError as e:  # pragma: no cover - every PyYAML error we know is marked
            self.report(Source(self.name, 1, 1), "yaml-syntax", f"invalid YAML: {e}")
            return
        if self.is_null(root):
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
            "grants": self.grants,
            "row_filters": self.row_filters,
            "column_masks": self.column_masks,
        }
        for key, parse in sections.items():
            if key in top:
                parse(top[key])

    def _yaml_error(self, e: yaml.MarkedYAMLError) -> None:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = " ".join(str(x) for x in (e.context, e.problem) if x)
        hint = "fix the YAML syntax (indentation, quotes, colons)"
        if "alias" in message:
            hint = 'quote the star: principals: ["*"] (a bare * starts a YAML alias)'
        elif "single document" in message:
            hint = "keep one YAML document per file (remove the '---' separator)"
            message = "more than one YAML document in the file"
        self.acc.problems.append(
            Problem(self.name, line, col, f"invalid YAML: {message}", hint, "error", "yaml-syntax")
        )

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

    def rules(self, node: Node, section: str) -> list[Node]:
        if not isinstance(node, SequenceNode):
            self.wrong_type(node, section, "a list of rules", f"{section}: [{{on: ..., ...}}]")
            return []
        return node.value

    def grants(self, node: Node) -> None:
        for item in self.rules(node, "grants"):
            self.grant(item)

    def row_filters(self, node: Node) -> None:
        for item in self.rules(node, "row_filters"):
            self.row_filter(item)

    def column_masks(self, node: Node) -> None:
        for item in self.rules(node, "column_masks"):
            self.column_mask(item)

    def rule_fields(self, node: Node, section: str, allowed: tuple[str, ...]) -> dict[str, Node]:
        example = "- {principals: [group:analysts], privileges: [select], on: main.sales.*}"
        fields = self.mapping(node, f"an entry of {section}", example)
        if fields is None:
            return {}
        return self.known_keys(fields, allowed, f"an entry of {section}", section)

    def rule_id(self, keys: dict[str, Node], rule: Source, what: str) -> str | None:
        node = keys["id"]
        value = self.text(node, f"id of {what}", "hide-pii")
        if value is None:
            return None
        if value.lower().startswith(RESERVED_ID_PREFIX):
            self.report(
                node,
                "reserved-id",
                f"id '{value}' starts with '{RESERVED_ID_PREFIX}', which names the grants "
                "domain owners get",
                "choose another id",
            )
            return None
        if _BAD_NAME_CHARS.search(value):
            self.report(
                node,
                "bad-id",
                f"id '{value}' contains spaces, commas or '|'",
                "use letters, digits and - _ . : /, e.g. hide-pii",
            )
            return None
        self.loc(rule, "id", node)
        return value

    def default_id(self, rule: Source) -> str:
        """`file:line`, or `file:line:col` for a second grant written on the same line."""
        gid = f"{self.name}:{rule.line}"
        if gid in self.default_ids:
            gid = f"{gid}:{rule.column}"
        self.default_ids.add(gid)
        return gid

    def rule_on(self, keys: dict[str, Node], rule: Source, what: str) -> NamePattern | None:
        node = keys["on"]
        pattern = self.pattern(node, f"'on' of {what}")
        if pattern is not None:
            self.loc(rule, "on", node)
        return pattern

    def grant(self, node: Node) -> None:
        keys = self.rule_fields(node, "grants", GRANT_KEYS)
        if not isinstance(node, MappingNode):
            return
        rule = self.src(node)
        what = "this grant"
        ok = True
        for key, example in (
            ("principals", "[group:analysts]"),
            ("privileges", "[select]"),
            ("on", "main.sales.*"),
        ):
            if key not in keys:
                self.missing(node, what, key, example)
                ok = False
        gid = self.rule_id(keys, rule, what) if "id" in keys else self.default_id(rule)
        principals = on = None
        if "principals" in keys:
            principals = self.principals(
                keys["principals"], f"principals of {what}", rule, "principals"
            )
        if "on" in keys:
            on = self.rule_on(keys, rule, what)
        privileges: list[str] = []
        if "privileges" in keys:
            items = self.text_list(keys["privileges"], f"privileges of {what}", "[select]")
            if items is not None and not items:
                self.report(
                    keys["privileges"],
                    "empty-list",
                    f"{what} grants no privilege",
                    "list at least one of: " + ", ".join(PRIVILEGES),
                )
                ok = False
            for text, item in items or []:
                if text.lower() not in PRIVILEGES:
                    self.report(
                        item,
                        "unknown-privilege",
                        f"unknown privilege '{text}'",
                        did_you_mean(text, PRIVILEGES),
                    )
                    continue
                privileges.append(text.lower())
        effect = "allow"
        if "effect" in keys:
            effect = self.enum(keys["effect"], "effect", EFFECTS, "unknown-effect") or "allow"
        columns: tuple[str, ...] | None = None
        if "columns" in keys:
            columns = self.columns(keys["columns"], f"columns of {what}", rule)
            if columns == ():
                self.report(
                    keys["columns"],
                    "empty-list",
                    f"'columns: []' in {what} names no column",
                    "remove 'columns' to cover the whole table, or list the columns",
                )
                ok = False
        if not ok or gid is None or principals is None or on is None or not privileges:
            return
        self.acc.grants.append(
            Grant(
                gid,
                principals,
                tuple(privileges),
                on,
                effect,  # type: ignore[arg-type]
                columns,
                rule,
                self.domain,
            )
        )

    def columns(self, node: Node, what: str, rule: Source) -> tuple[str, ...] | None:
        items = self.text_list(node, what, "[email, phone]")
        if items is None:
            return None
        out: list[str] = []
        for text, item in items:
            name = text.strip("`").lower()
            if "*" in name or "." in name:
                self.report(
                    item,
                    "bad-name",
                    f"'{text}' in {what} is not a column name",
                    "list plain column names; put the table in 'on'",
                )
                continue
            self.loc(rule, "columns", item, len(out))
            out.append(name)
        return tuple(out)

    def row_filter(self, node: Node) -> None:
        keys = self.rule_fields(node, "row_filters", ROW_FILTER_KEYS)
        if not isinstance(node, MappingNode):
            return
        rule = self.src(node)
        what = "this row filter"
        ok = True
        for key, example in (
            ("id", "emea-only"),
            ("on", "main.sales.orders"),
            ("principals", "[group:emea-analysts]"),
            ("where", "\"region = 'EMEA'\""),
        ):
            if key not in keys:
                self.missing(node, what, key, example)
                ok = False
        fid = self.rule_id(keys, rule, what) if "id" in keys else None
        on = self.rule_on(keys, rule, what) if "on" in keys else None
        principals = None
        if "principals" in keys:
            principals = self.principals(
                keys["principals"], f"principals of {what}", rule, "principals"
            )
        where = None
        if "where" in keys:
            where = self.text(keys["where"], f"'where' of {what}", "\"region = 'EMEA'\"")
            self.loc(rule, "where", keys["where"])
        kind = "permissive"
        if "kind" in keys:
            kind = self.enum(keys["kind"], "filter kind", FILTER_KINDS, "unknown-kind") or kind
        if not ok or fid is None or on is None or principals is None or where is None:
            return
        self.acc.row_filters.append(
            RowFilter(fid, on, principals, where, kind, rule, self.domain)  # type: ignore[arg-type]
        )

    def column_mask(self, node: Node) -> None:
        keys = self.rule_fields(node, "column_masks", COLUMN_MASK_KEYS)
        if not isinstance(node, MappingNode):
            return
        rule = self.src(node)
        what = "this column mask"
        ok = True
        for key, example in (("id", "hide-pii"), ("on", "main.*.*"), ("mask", "hash")):
            if key not in keys and not (key == "mask" and "mask" in self.null_keys):
                self.missing(node, what, key, example)
                ok = False
        mid = self.rule_id(keys, rule, what) if "id" in keys else None
        on = self.rule_on(keys, rule, what) if "on" in keys else None
        mask = None
        if "mask" in keys:
            mask = self.enum(keys["mask"], "mask", MASKS, "unknown-mask")
            self.loc(rule, "mask", keys["mask"])
        elif "mask" in self.null_keys:  # `mask: null` is YAML's null, and also a mask's name
            mask = "null"
        reported = len(self.acc.problems)
        tags: tuple[str, ...] = ()
        if "tags" in keys:
            items = self.text_list(keys["tags"], f"tags of {what}", "[pii]")
            for i, (_, item) in enumerate(items or []):
                self.loc(rule, "tags", item, i)
            tags = tuple(t.lower() for t, _ in items or [])
        columns: tuple[str, ...] = ()
        if "columns" in keys:
            columns = self.columns(keys["columns"], f"columns of {what}", rule) or ()
        if not tags and not columns:
            if ok and len(self.acc.problems) == reported:  # not already explained above
                self.report(
                    node,
                    "mask-selects-nothing",
                    f"{what} names no tags and no columns, so it masks nothing",
                    "add tags: [pii] and/or columns: [email]",
                )
            ok = False
        expression = None
        if "expression" in keys:
            expression = self.text(
                keys["expression"], f"'expression' of {what}", "\"concat('***', {col})\""
            )
            self.loc(rule, "expression", keys["expression"])
        principals: tuple[Principal, ...] | None = (ANY,)
        if "principals" in keys:
            principals = self.principals(
                keys["principals"], f"principals of {what}", rule, "principals"
            )
        except_: tuple[Principal, ...] | None = ()
        if "except" in keys:
            except_ = self.principals(
                keys["except"], f"'except' of {what}", rule, "except", allow_empty=True
            )
        priority = 0
        if "priority" in keys:
            pnode = keys["priority"]
            if isinstance(pnode, ScalarNode) and pnode.tag == _INT:
                priority = int(yaml.safe_load(pnode.value))
                self.loc(rule, "priority", pnode)
            else:
                self.wrong_type(pnode, f"priority of {what}", "an integer", "priority: 10")
                ok = False
        if not ok or None in (mid, on, mask, principals, except_):
            return
        self.acc.column_masks.append(
            ColumnMask(
                mid,
                on,
                mask,
                tags,
                columns,
                expression,  # type: ignore[arg-type]
                principals,
                except_,
                priority,
                rule,
                self.domain,  # type: ignore[arg-type]
            )
        )
