"""Building grants, row filters and column masks from their YAML entries.

The rule half of the model builder (governance.policy.build reads groups, domains and tags
and drives both): every rule is checked for its own keys and values here and kept only when
complete, with where each value was written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from governance.identity import InvalidName, canonical_name
from governance.policy.model import (
    ANY,
    ANY_TAG,
    APPLY_TAG,
    EFFECTS,
    FILTER_KINDS,
    MASKS,
    PRIVILEGES,
    SMALL_GROUP_ACTIONS,
    AggregationPolicy,
    ColumnMask,
    ColumnMatch,
    Grant,
    NamePattern,
    Principal,
    RowFilter,
    Source,
    TagGrant,
)
from governance.policy.problems import Problem, did_you_mean
from governance.policy.source import (
    AGGREGATION_POLICY_KEYS,
    COLUMN_MASK_KEYS,
    GRANT_KEYS,
    INT_TAG,
    ROW_FILTER_KEYS,
    Locations,
    NodeReader,
)
from governance.policy.tags import read_match_columns

# Grants of domain owners are compiled with ids `domain:NAME`; rule ids must not collide.
RESERVED_ID_PREFIX = "domain:"
# The enforcer joins principals with '|' and casbin fields are comma-separated.
_BAD_NAME_CHARS = re.compile(r"[\s,|]")


@dataclass
class RuleLists:
    """The rules read so far, across files in path order."""

    grants: list[Grant] = field(default_factory=list)
    row_filters: list[RowFilter] = field(default_factory=list)
    column_masks: list[ColumnMask] = field(default_factory=list)
    tag_grants: list[TagGrant] = field(default_factory=list)
    aggregation_policies: list[AggregationPolicy] = field(default_factory=list)


class RuleReader(NodeReader):
    """Reads the rule sections of one file into `rules`."""

    def __init__(
        self, name: str, problems: list[Problem], locations: Locations, rules: RuleLists
    ) -> None:
        super().__init__(name, problems, locations)
        self.rules_out = rules
        self.domain: str | None = None  # the `domain:` the file declares
        self.default_ids: set[str] = set()

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

    def aggregation_policies(self, node: Node) -> None:
        for item in self.rules(node, "aggregation_policies"):
            self.aggregation_policy(item)

    def aggregation_policy(self, node: Node) -> None:
        """One `aggregation_policies:` entry (extension): id, on and min_group_size are
        required; a size below 2 protects nothing and is an error."""
        keys = self.rule_fields(node, "aggregation_policies", AGGREGATION_POLICY_KEYS)
        if not isinstance(node, MappingNode):
            return
        rule = self.src(node)
        what = "this aggregation policy"
        ok = True
        for key, example in (("id", "salaries-k5"), ("on", "main.hr.*"), ("min_group_size", "5")):
            if key not in keys:
                self.missing(node, what, key, example)
                ok = False
        pid = self.rule_id(keys, rule, what) if "id" in keys else None
        on = self.rule_on(keys, rule, what) if "on" in keys else None
        size = None
        if "min_group_size" in keys:
            snode = keys["min_group_size"]
            if isinstance(snode, ScalarNode) and snode.tag == INT_TAG:
                size = int(yaml.safe_load(snode.value))
                self.loc(rule, "min_group_size", snode)
                if size < 2:
                    self.report(
                        snode,
                        "bad-min-group-size",
                        f"min_group_size of {what} is {size}: a group of one row is that row",
                        "use 2 or more, e.g. min_group_size: 5",
                    )
                    size = None
            else:
                self.wrong_type(
                    snode, f"min_group_size of {what}", "an integer", "min_group_size: 5"
                )
        action = "suppress"
        if "on_small_group" in keys:
            found = self.enum(
                keys["on_small_group"], "on_small_group", SMALL_GROUP_ACTIONS, "unknown-action"
            )
            ok = ok and found is not None
            action = found or action
        principals, except_ = self.who(keys, what, rule)
        identifying: tuple[str, ...] = ()
        if "identifying_columns" in keys:
            found_cols = self.columns(
                keys["identifying_columns"], f"identifying_columns of {what}", rule
            )
            ok = ok and found_cols is not None
            identifying = found_cols or ()
        tags: tuple[str, ...] = ()
        if "tags" in keys:
            items = self.text_list(keys["tags"], f"tags of {what}", "[pii]")
            ok = ok and items is not None
            tags = tuple(t.lower() for t, _ in items or [])
        if not ok or None in (pid, on, size, principals, except_):
            return
        self.rules_out.aggregation_policies.append(
            AggregationPolicy(
                pid,  # type: ignore[arg-type]
                on,  # type: ignore[arg-type]
                size,  # type: ignore[arg-type]
                principals,  # type: ignore[arg-type]
                except_,  # type: ignore[arg-type]
                action,  # type: ignore[arg-type]
                identifying,
                tags,
                rule,
                self.domain,
            )
        )

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

    def who(
        self, keys: dict[str, Node], what: str, rule: Source
    ) -> tuple[tuple[Principal, ...] | None, tuple[Principal, ...] | None]:
        """A mask's or an aggregation policy's `principals` (default everyone) and `except`
        (default nobody); None where the field is malformed (reported)."""
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
        return principals, except_

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
                if text.lower() not in (*PRIVILEGES, APPLY_TAG):
                    self.report(
                        item,
                        "unknown-privilege",
                        f"unknown privilege '{text}'",
                        did_you_mean(text, (*PRIVILEGES, APPLY_TAG)),
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
        tags = self.grant_tags(keys, privileges, columns, what, rule)
        if tags is None:
            ok = False
        if not ok or gid is None or principals is None or on is None or not privileges:
            return
        if APPLY_TAG in privileges:
            self.rules_out.tag_grants.append(
                TagGrant(gid, principals, on, tags or (ANY_TAG,), effect, rule)  # type: ignore[arg-type]
            )
            privileges = [p for p in privileges if p != APPLY_TAG]
            if not privileges:
                return
        self.rules_out.grants.append(
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

    def grant_tags(
        self,
        keys: dict[str, Node],
        privileges: list[str],
        columns: tuple[str, ...] | None,
        what: str,
        rule: Source,
    ) -> tuple[str, ...] | None:
        """The tags of an apply_tag grant (`()`: every tag); None after reporting why not.
        `tags` belongs to apply_tag alone, and apply_tag covers whole tables."""
        if APPLY_TAG not in privileges:
            if "tags" in keys:
                self.report(
                    keys["tags"],
                    "tags-without-apply-tag",
                    f"'tags' in {what} only scopes the apply_tag privilege",
                    "add apply_tag to privileges, or remove 'tags'",
                )
                return None
            return ()
        if columns is not None:
            self.report(
                keys["columns"],
                "apply-tag-columns",
                f"apply_tag in {what} covers every column of its tables; 'columns' is refused",
                "put apply_tag in a grant of its own, without 'columns'",
            )
            return None
        if "tags" not in keys:
            return ()
        items = self.text_list(keys["tags"], f"tags of {what}", "[pii]")
        if items is None:
            return None
        out: list[str] = []
        for text, item in items:
            if text.strip() == ANY_TAG:
                out.append(ANY_TAG)
                continue
            try:
                out.append(canonical_name(text.strip(), "tag"))
            except InvalidName as e:
                self.report(item, "bad-tag", str(e), "write the tag like: pii")
                return None
            self.loc(rule, "tags", item, len(out) - 1)
        if not out:
            self.report(
                keys["tags"],
                "empty-list",
                f"'tags: []' in {what} names no tag",
                'list the tags, or ["*"] for every tag',
            )
            return None
        return tuple(dict.fromkeys(out))

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
        match = None
        if "match_columns" in keys:
            match = read_match_columns(self, keys["match_columns"], rule, what, need_as=True)
            ok = ok and match is not None
        if not ok or fid is None or on is None or principals is None or where is None:
            return
        self.rules_out.row_filters.append(
            RowFilter(
                fid,
                on,
                principals,
                where,
                kind,  # type: ignore[arg-type]
                rule,
                self.domain,
                match,
            )
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
        reported = len(self.problems)
        tags: tuple[str, ...] = ()
        if "tags" in keys:
            items = self.text_list(keys["tags"], f"tags of {what}", "[pii]")
            for i, (_, item) in enumerate(items or []):
                self.loc(rule, "tags", item, i)
            tags = tuple(t.lower() for t, _ in items or [])
        columns: tuple[str, ...] = ()
        if "columns" in keys:
            columns = self.columns(keys["columns"], f"columns of {what}", rule) or ()
        match = self.mask_match(keys, rule, what)
        if match is False:
            ok = False
        elif match is None and not tags and not columns:
            if ok and len(self.problems) == reported:  # not already explained above
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
        principals, except_ = self.who(keys, what, rule)
        priority = 0
        if "priority" in keys:
            pnode = keys["priority"]
            if isinstance(pnode, ScalarNode) and pnode.tag == INT_TAG:
                priority = int(yaml.safe_load(pnode.value))
                self.loc(rule, "priority", pnode)
            else:
                self.wrong_type(pnode, f"priority of {what}", "an integer", "priority: 10")
                ok = False
        if not ok or None in (mid, on, mask, principals, except_):
            return
        self.rules_out.column_masks.append(
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
                match if isinstance(match, ColumnMatch) else None,
            )
        )

    def mask_match(
        self, keys: dict[str, Node], rule: Source, what: str
    ) -> ColumnMatch | bool | None:
        """A mask's `match_columns` (None: absent; False: reported). It selects the columns
        alone (with `tags:` or `columns:` the mask's reach would be ambiguous), and its `as`
        names the column in a custom expression only."""
        if "match_columns" not in keys:
            return None
        node = keys["match_columns"]
        match = read_match_columns(self, node, rule, what, need_as=False)
        if match is None:
            return False
        mixed = [k for k in ("tags", "columns") if k in keys]
        if mixed:
            self.report(
                node,
                "ambiguous-match",
                f"{what} has match_columns and {mixed[0]}: which columns it masks is ambiguous",
                f"keep match_columns and remove {mixed[0]}, or write a second mask",
            )
            return False
        mask = keys.get("mask")
        if match.as_ is not None and not (isinstance(mask, ScalarNode) and mask.value == "custom"):
            self.report(
                node,
                "binding-not-custom",
                f"'as' of match_columns in {what} names the column in a custom expression, "
                "but the mask is not custom",
                "remove 'as' (the built-in mask applies to each tagged column), or use "
                "mask: custom",
            )
            return False
        return match
