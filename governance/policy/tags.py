"""Tag-driven policies (ABAC): which columns carry which tags, and binding rules to them.

A row filter or column mask with `match_columns: {tag: region, as: r}` applies to every
table in its scope that has a column tagged `region`; `r` in its expression stands for that
column. A column's tags come from the policy YAML (`tags:`) and from the Delta table
itself, so a pipeline can tag what it writes:

- table property `lakegate.tags.<column>` = `'region,pii'` (set with
  `ALTER TABLE ... SET TBLPROPERTIES`), and
- column metadata `lakegate.tags` = `'region,pii'` (a StructField's metadata).

Delta tags are read with delta-rs from the newest table version (never a Spark job) and
cached per (log directory, the Delta table's own id, version): a statement costs one listing
of `_delta_log` (catalog/identity.py), and a table dropped and created again at the same
place, or replaced behind the catalog's back, never gets the old table's tags.
A table whose tags cannot be read is refused (fail closed): a tag-driven filter is never
skipped because its tag was unreadable. Time travel reads use today's tags.

The `as` name is bound on the sqlglot tree: every unqualified column of that name in the
expression (subqueries included) becomes the matched column, quoted; a real column with
the same name is shadowed inside that rule. A filter whose tag is on two columns of one
table applies to each, ANDed (every tagged value must pass).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from deltalake import DeltaTable
from sqlglot import exp
from yaml.nodes import MappingNode, Node

from catalog.catalog import normalise_location
from catalog.identity import IdentityUnreadable, delta_identity
from catalog.model import TableInfo
from governance.errors import Refused
from governance.identity import InvalidName, canonical_name
from governance.metrics import cache_lookup
from governance.policy.expressions import Issue, check_mask_expression, parse_expression
from governance.policy.model import ColumnMask, ColumnMatch, PolicySet, RowFilter, Source
from governance.policy.source import NodeReader
from governance.policy.tag_state import governed_state

TABLE_PROPERTY_PREFIX = "lakegate.tags."  # + column name; value: comma-separated tags
COLUMN_METADATA_KEY = "lakegate.tags"  # in a column's Delta metadata; same value format
MATCH_KEYS: tuple[str, ...] = ("tag", "as")
_BINDING = re.compile(r"^[a-z_][a-z0-9_]*$")


class TagsUnreadable(Refused):
    """A table's Delta tags could not be read, so tag-driven rules cannot be decided."""


# ---- YAML: `match_columns: {tag: region, as: r}` ---------------------------------------


def read_match_columns(
    reader: NodeReader, node: Node, rule: Source, what: str, *, need_as: bool
) -> ColumnMatch | None:
    """The rule's `match_columns`, or None after reporting why not (with file:line)."""
    saved = (reader.near_misses, reader.null_keys)  # the rule's own keys were read already
    try:
        match = _match(reader, node, rule, what, need_as)
    finally:
        reader.near_misses, reader.null_keys = saved
    if match is not None and isinstance(node, MappingNode):
        reader.loc(rule, "match_columns", node)
    return match


def _match(
    reader: NodeReader, node: Node, rule: Source, what: str, need_as: bool
) -> ColumnMatch | None:
    example = "match_columns: {tag: region, as: r}"
    fields = reader.mapping(node, f"match_columns of {what}", example)
    if fields is None:
        return None
    keys = reader.known_keys(fields, MATCH_KEYS, "match_columns")
    if "tag" not in keys:
        reader.missing(node, f"match_columns of {what}", "tag", "region")
        return None
    tag = reader.text(keys["tag"], f"tag of {what}", "region")
    if tag is None:
        return None
    try:
        tag = canonical_name(tag, "tag")
    except InvalidName as e:
        reader.report(keys["tag"], "bad-tag", str(e), "write the tag like: region")
        return None
    reader.loc(rule, "match_columns.tag", keys["tag"])
    as_ = None
    if "as" in keys:
        as_ = reader.text(keys["as"], f"'as' of {what}", "r")
        if as_ is None:
            return None
        if not _BINDING.match(as_.lower()):
            reader.report(
                keys["as"],
                "bad-binding",
                f"'as' of {what} must be a plain SQL name (ASCII letters, digits, _)",
                "write it like: as: r",
            )
            return None
        as_ = as_.lower()
        reader.loc(rule, "match_columns.as", keys["as"])
    elif need_as:
        reader.missing(node, f"match_columns of {what}", "as", "r")
        return None
    return ColumnMatch(tag, as_)


def binding_issues(text: str, match: ColumnMatch, kind: str) -> list[Issue]:
    """Why the `as` name is not used in the rule's expression (validation, file:line)."""
    if match.as_ is None:
        return []
    tree, issues = parse_expression(text, kind)
    if tree is None:
        return issues
    if any(_bound(c, match.as_) for c in tree.find_all(exp.Column)):
        return []
    return [
        (
            "binding-unused",
            f"'as: {match.as_}' of match_columns is not used in the expression",
            f"write {match.as_} where the tagged column's value goes, e.g. "
            + (f"{match.as_} = 'EMEA'" if kind == "filter" else f"right({match.as_}, 4)"),
        )
    ]


def tag_mask_issues(expression: str, match: ColumnMatch, groups: Iterable[str]) -> list[Issue]:
    """A custom mask's expression with `as`: the name must be used, and with it standing for
    `{col}` the expression must pass the custom-mask checks."""
    name = match.as_
    if name is None:
        return check_mask_expression(expression, groups)
    tree, issues = parse_expression(expression, "mask")
    if tree is None:
        return issues
    unused = binding_issues(expression, match, "mask")
    if unused:
        return unused

    def to_col(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and _bound(node, name):
            return exp.Placeholder(this=exp.to_identifier("col"), widget=True)
        return node

    return check_mask_expression(tree.transform(to_col).sql("spark"), groups)


# ---- binding on the sqlglot tree -------------------------------------------------------


def _bound(node: exp.Column, name: str) -> bool:
    return not node.table and node.name.lower() == name


def bind_expression(text: str, name: str, column: str, kind: str) -> exp.Expression | None:
    """`text` with every unqualified `name` (and a mask's `{col}`) as the quoted `column`;
    None when the text does not parse (the rewrite's checker refuses it, by rule name)."""
    tree, _ = parse_expression(text, kind)
    if tree is None:
        return None

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and _bound(node, name):
            return exp.column(column, quoted=True)
        if isinstance(node, exp.Placeholder) and node.name == "col":
            return exp.column(column, quoted=True)
        return node

    return tree.transform(swap)


def bind_filter(f: RowFilter, columns: list[str]) -> RowFilter | None:
    """The filter over this table's tagged columns (ANDed), or None if none carries it."""
    if f.match is None:
        return f
    if not columns:
        return None
    trees = [bind_expression(f.where, f.match.as_ or "", c, "filter") for c in columns]
    if any(t is None for t in trees):
        return f  # unparseable: the rewrite refuses it under the checker's rule
    where = trees[0] if len(trees) == 1 else exp.and_(*(exp.paren(t) for t in trees))
    return replace(f, where=where.sql("spark"))


def bind_mask(m: ColumnMask, column: str) -> ColumnMask:
    """A custom mask whose `as` name (and `{col}`) is this column."""
    if m.match is None or m.match.as_ is None or not m.expression:
        return m
    tree = bind_expression(m.expression, m.match.as_, column, "mask")
    return m if tree is None else replace(m, expression=tree.sql("spark"))


def matched_by_tag(
    table: TableInfo,
    tags: ColumnTags,
    filters: Iterable[RowFilter],
    masks: Iterable[tuple[str, ColumnMask]],
) -> tuple[tuple[str, str, str], ...]:
    """(rule id, column, tag) for every rule that applies through a column's tag, so review
    tools can say which column and tag a tag-driven rule hit."""
    out: list[tuple[str, str, str]] = []
    for f in filters:
        if f.match is not None:
            out += [(f.id, c, f.match.tag) for c in tags.tagged(table, f.match.tag)]
    for column, m in masks:
        have = tags.columns.get(column.lower(), frozenset())
        wanted = (m.match.tag,) if m.match is not None else m.tags
        out += [(m.id, column, t) for t in wanted if t in have][:1]
    return tuple(out)


# ---- a table's column tags -------------------------------------------------------------


@dataclass(frozen=True)
class ColumnTags:
    """Lower-case column -> tags, from YAML and the Delta table; `key` moves when the Delta
    table's tags may have (its version), so caches of decisions can be keyed by it."""

    key: tuple = ()
    columns: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def tagged(self, table: TableInfo, tag: str) -> list[str]:
        """Columns of `table` carrying `tag`, in table order, as the table spells them."""
        return [c.name for c in table.columns if tag in self.columns.get(c.name.lower(), ())]


NO_TAGS = ColumnTags()
#: (root, table id, version) -> tags; (root, table id) -> the newest version read and its tags
_cache: dict[tuple[str, str, int], dict[str, frozenset[str]]] = {}
_newest: dict[tuple[str, str], tuple[int, dict[str, frozenset[str]]]] = {}
MAX_SCANNED_COMMITS = 100  # beyond this many new commits, delta-rs reads the table afresh
_lock = threading.Lock()


def split_tags(value: str) -> frozenset[str]:
    """`'region, PII'` -> {region, pii}; a name outside the identifier rules is dropped (it
    could never equal a rule's tag, which must follow them)."""
    out = set()
    for part in str(value).split(","):
        try:
            out.add(canonical_name(part.strip(), "tag"))
        except InvalidName:
            continue
    return frozenset(out)


def _no_metadata(log: Path, since: int, version: int) -> bool:
    """Whether the commits after `since` up to `version` hold no metaData action, so the
    tags read at `since` still hold (an append costs a few small JSON reads, not a delta-rs
    open). Anything unexpected answers False: the table is then read afresh."""
    if version - since > MAX_SCANNED_COMMITS:
        return False
    try:
        for v in range(since + 1, version + 1):
            with open(log / f"{v:020d}.json", encoding="utf-8") as fh:
                for line in fh:
                    action = json.loads(line) if line.strip() else {}
                    if not isinstance(action, dict) or "metaData" in action:
                        return False
    except (OSError, ValueError):
        return False
    return True


def _read_delta(root: str, version: int) -> dict[str, frozenset[str]]:
    dt = DeltaTable(root, version=version)
    out: dict[str, set[str]] = {}
    for key, value in (dt.metadata().configuration or {}).items():
        if key.lower().startswith(TABLE_PROPERTY_PREFIX) and value:
            column = key[len(TABLE_PROPERTY_PREFIX) :].strip("`").lower()
            out.setdefault(column, set()).update(split_tags(value))
    for f in dt.schema().fields:
        value = (f.metadata or {}).get(COLUMN_METADATA_KEY)
        if isinstance(value, str) and value:
            out.setdefault(f.name.lower(), set()).update(split_tags(value))
    return {c: frozenset(t) for c, t in out.items() if t}


def delta_tags(table: TableInfo) -> tuple[tuple, dict[str, frozenset[str]]]:
    """(cache key, column -> tags) from the table's newest Delta version; TagsUnreadable if
    the log cannot be read. A table known only by name (no location), or whose location holds
    no Delta log (offline policy tests; Spark could not read it either), has none."""
    if not table.location:
        return (), {}
    root = normalise_location(table.location)
    if "://" in root:
        raise TagsUnreadable(
            f"tags of table {table.full_name} cannot be read from its location; "
            "tag-driven policies apply to it, so the statement is refused",
            tables=(table.full_name,),
        )
    log = Path(root) / "_delta_log"
    try:
        ident = delta_identity(root)
        if ident.table_id is None or ident.version is None:
            if log.exists():  # a log without a commit: not readable, so not decidable
                raise IdentityUnreadable("no commits")
            return (root, None), {}  # no Delta table there (yet): nothing to read, nor to tag
        version = ident.version
        # keyed by the table's own id: a table dropped and created again at this location
        # (versions restarting at 0), or replaced behind the catalog's back, is another table
        key = (root, ident.table_id, version)
        hit = _cache.get(key)
        cache_lookup("tags", hit is not None)
        if hit is None:
            last = _newest.get((root, ident.table_id))
            if last is not None and last[0] < version and _no_metadata(log, last[0], version):
                hit = last[1]
            else:
                hit = _read_delta(root, version)
            with _lock:
                if len(_cache) > 50_000:
                    _cache.clear()
                    _newest.clear()
                _cache[key] = hit
                if last is None or last[0] < version:
                    _newest[(root, ident.table_id)] = (version, hit)
    except Exception as e:  # any failure to read the log fails closed
        raise TagsUnreadable(
            f"tags of table {table.full_name} cannot be read (its Delta log is unreadable: "
            f"{type(e).__name__}); tag-driven policies apply to it, so the statement is refused",
            tables=(table.full_name,),
        ) from None
    return key, hit


def column_tags(ps: PolicySet, table: TableInfo) -> ColumnTags:
    """Every column's tags: the YAML `tags:` section, the Delta table's own and the governed
    state Lakegate recorded (governance.policy.tag_rights: a governed tag removed outside
    Lakegate stays in force)."""
    key, delta = delta_tags(table)
    try:
        governed = governed_state(table)
    except ValueError:
        raise TagsUnreadable(
            f"governed tags of table {table.full_name} cannot be read from the catalog; "
            "tag-driven policies apply to it, so the statement is refused",
            tables=(table.full_name,),
        ) from None
    parts = (table.catalog, table.schema, table.name)
    out: dict[str, frozenset[str]] = {}
    for c in table.columns:
        low = c.name.lower()
        tags = frozenset(ps.column_tags(*parts, low)) | delta.get(low, frozenset())
        tags |= governed.get(low, frozenset())
        if tags:
            out[low] = tags
    return ColumnTags(key, out)  # the state moves with the entry's updated_at, in every key
