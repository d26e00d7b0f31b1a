"""Reading policy YAML with locations: which files, their node trees, and typed values.

Policies are reviewed like code, so every value keeps the file, line and column it came
from (we compose YAML nodes instead of loading plain dicts) and every problem is reported
at the exact node. This module knows YAML and the contract's keys, not what a rule means:
building rules is governance.policy.build.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from governance.policy.model import NamePattern, Principal, Source
from governance.policy.problems import Problem, Severity, did_you_mean

TOP_KEYS: tuple[str, ...] = (
    "groups",
    "domains",
    "tags",
    "grants",
    "row_filters",
    "column_masks",
    "domain",  # extension: the file belongs to this domain (federated ownership)
    "description",  # extension: free text about the file
    "governed_tags",  # extension: the tag vocabulary (governance.policy.tag_rights)
    "aggregation_policies",  # extension: aggregate-only tables (governance/rewrite/aggregation.py)
)
DOMAIN_KEYS: tuple[str, ...] = ("owners", "description", "schemas")
GRANT_KEYS: tuple[str, ...] = (
    "id",
    "principals",
    "privileges",
    "on",
    "effect",
    "columns",
    "tags",  # extension: the tags an apply_tag grant covers
)
ROW_FILTER_KEYS: tuple[str, ...] = ("id", "on", "principals", "where", "kind", "match_columns")
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
    "match_columns",  # extension: tag-driven masks (governance.policy.tags)
)
AGGREGATION_POLICY_KEYS: tuple[str, ...] = (
    "id",
    "on",
    "tags",
    "principals",
    "except",
    "min_group_size",
    "on_small_group",
    "identifying_columns",
)
_KEYS_BY_SECTION: dict[str, tuple[str, ...]] = {
    "aggregation_policies": AGGREGATION_POLICY_KEYS,
    "grants": GRANT_KEYS,
    "row_filters": ROW_FILTER_KEYS,
    "column_masks": COLUMN_MASK_KEYS,
}

_KIND_PREFIX = re.compile(r"^(user|group):", re.IGNORECASE)

# libyaml composes ~10x faster than pure Python (100k-line policy sets); same nodes and marks.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
INT_TAG = "tag:yaml.org,2002:int"
# Scalars whose raw text we accept as a name: `on`, `yes`, `no` are booleans in YAML 1.1 but
# a user called `no` is still a user; we read the text as written.
_SCALAR_NAMES = {
    _STR: "a string",
    INT_TAG: "an integer",
    _NULL: "nothing",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:timestamp": "a date",
}
_TEXT_TAGS = frozenset(
    {
        _STR,
        INT_TAG,
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    }
)


# (rule source, field, list index or -1) -> where that value was written
Locations = dict[tuple[Source, str, int], Source]


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


class NodeReader:
    """Reads typed values out of one file's YAML nodes, reporting problems at exact nodes."""

    def __init__(self, name: str, problems: list[Problem], locations: Locations) -> None:
        self.name = name
        self.problems = problems
        self.locations = locations
        self.near_misses: set[str] = set()  # keys the last mapping's typos were close to
        self.null_keys: set[str] = set()  # keys of the last mapping written as `key: null`

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
        self.problems.append(Problem.at(source, code, message, hint, severity))

    def loc(self, rule: Source, key: str, node: Node, index: int = -1) -> None:
        self.locations[(rule, key, index)] = self.src(node)

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

    def compose(self, data: bytes) -> Node | None:
        """The file's root node, or None (with the problem reported) when it is not YAML."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.report(
                Source(self.name, 1, 1),
                "bad-encoding",
                f"the file is not UTF-8 (byte {e.start})",
                "save the file as UTF-8",
            )
            return None
        try:
            root = yaml.compose(text, Loader=_LOADER)
        except yaml.MarkedYAMLError as e:
            self._yaml_error(e)
            return None
        except yaml.YAMLError as e:  # pragma: no cover - every PyYAML error we know is marked
            self.report(Source(self.name, 1, 1), "yaml-syntax", f"invalid YAML: {e}")
            return None
        return root

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
        self.problems.append(
            Problem(self.name, line, col, f"invalid YAML: {message}", hint, "error", "yaml-syntax")
        )

    # ---- sections
