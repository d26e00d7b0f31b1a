"""What a policy expression (a row filter's `where`, a custom mask's `expression`) may be.

One checker for `lakegate policy validate` and for the rewrite: a policy set that passes
validation never makes a table unreadable at run time, and an expression validation would
refuse is refused at plan time under the same rule name (all rules but a custom mask's use
of `{col}`, which the rewrite has already replaced by the column). Which functions no governed SQL
may call is governance.sql.constructs' (shared with statements); what else a per-row policy
expression may not contain is decided here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types

from catalog.names import InvalidName, check_name
from governance.errors import Refused
from governance.policy.problems import group_hint
from governance.sql.constructs import (
    DENIED_FUNCTIONS,
    IDENTITY_MEMBER,
    IDENTITY_USER,
    METADATA_COLUMNS,
    function_name,
    is_unknown_function,
)
from governance.sql.parse import describe_parse_error
from governance.sql.resolve import FILE_FORMATS

# Identity functions the layer resolves itself, with the number of arguments each takes.
IDENTITY_ARITY: dict[str, int] = {
    **dict.fromkeys(IDENTITY_USER, 0),
    **dict.fromkeys(IDENTITY_MEMBER, 1),
}
_READS_DATA = (exp.Query, exp.Subquery, exp.Table, exp.Values, exp.Lateral, exp.Join)
_PARAMETERS = (exp.Placeholder, exp.Parameter, exp.SessionParameter)

Issue = tuple[str, str, str]  # (code, message, hint)


@dataclass(frozen=True, slots=True)
class ExpressionRules:
    """What a policy expression may reach beyond its own row.

    `subqueries` is the switch for mapping tables (issue 15): a filter or mask may read
    catalog tables, named by three-part names, in `IN (SELECT ...)`, `EXISTS (...)` and
    scalar subqueries; the rewrite reads them with the policy's rights. Every other rule
    still holds inside them (no UDF, no forbidden function, no `_metadata`, no path, no
    table function). Off: a policy expression reads no table.
    """

    subqueries: bool = True


RULES = ExpressionRules()
NO_SUBQUERIES = ExpressionRules(subqueries=False)
# The subquery shapes a policy may use: the Subquery node of a scalar subquery or of
# EXISTS, or the query of `x IN (SELECT ...)` (sqlglot parses both as a Subquery/Query
# child of In/Exists).
_SUBQUERY_HOLDERS = (exp.Subquery, exp.In, exp.Exists)


def checked_expression(
    key: str, text: str, kind: str, groups: Iterable[str], rules: ExpressionRules = RULES
) -> exp.Expression:
    """The parsed policy expression the rewrite applies, or Refused naming the first rule it
    breaks (the rule `lakegate policy validate` reports). The message names the policy and
    the rule only: the expression's text is not the caller's to see."""
    tree, issues = parse_expression(text, kind)
    if tree is not None:
        issues = _walk(tree, kind, set(groups), rules)
        if kind == "filter" and not issues:
            issues = _not_boolean(tree, text)
    if tree is None or issues:
        raise Refused(
            f"policy {key} cannot be applied: it breaks rule {issues[0][0]} "
            "(run lakegate policy validate)"
        )
    return tree


def check_filter_expression(where: str, groups: Iterable[str] = ()) -> list[Issue]:
    """Why `where` is not one boolean Spark SQL expression over the filtered table's row."""
    tree, issues = parse_expression(where, "filter")
    if tree is None:
        return issues
    issues += _walk(tree, "filter", set(groups), RULES)
    return issues or _not_boolean(tree, where)


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
    tree, issues = parse_expression(expression, "mask")
    if tree is None:
        return issues
    issues += _walk(tree, "mask", set(groups), RULES)
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
_ARITHMETIC = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.Neg,
    exp.DPipe,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.BitwiseNot,
)


def _not_boolean(tree: exp.Expression, where: str) -> list[Issue]:
    # arithmetic over columns of unknown type is typed UNKNOWN, but it is never boolean
    kind = "arithmetic" if isinstance(tree, _ARITHMETIC) else _result_type(tree)
    if kind is None or kind in _BOOLEAN_OK:
        return []
    return [
        (
            "filter-not-boolean",
            f"the filter '{_short(where)}' is a {kind.lower()} expression, not a condition",
            "a filter must be true or false per row, e.g. region = 'EMEA'",
        )
    ]


def _short(text: str, limit: int = 60) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def _what(kind: str) -> str:
    return "the filter" if kind == "filter" else "the expression"


def parse_expression(text: str, kind: str) -> tuple[exp.Expression | None, list[Issue]]:
    """One policy expression's tree (a mask's `{col}` is a placeholder node), or why not."""
    what = _what(kind)
    try:
        statements = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except SqlglotError as e:
        hint = "write one Spark SQL expression, e.g. region = 'EMEA'"
        if not isinstance(e, ParseError):
            hint = "check quotes and parentheses"
        return None, [
            (
                f"{kind}-syntax",
                f"{what} '{_short(text)}' is not valid Spark SQL: {describe_parse_error(e)}",
                hint,
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


def _walk(tree: exp.Expression, kind: str, groups: set[str], rules: ExpressionRules) -> list[Issue]:
    """Constructs that have no place in a per-row policy expression, and identity misuse."""
    issues: list[Issue] = []
    what = _what(kind)
    if rules.subqueries:
        issues += _check_subqueries(tree, kind)
        if issues:
            return issues
    for node in tree.walk():
        if isinstance(node, _READS_DATA) and not rules.subqueries:
            issues.append(
                (
                    f"{kind}-reads-table",
                    f"{what} reads another table: {_short(node.sql('spark'))}",
                    f"a {kind} may use only the row's own columns; no subqueries",
                )
            )
            break
        per_row = not (rules.subqueries and node.find_ancestor(exp.Query) is not None)
        if isinstance(node, exp.AggFunc | exp.Window) and per_row:
            issues.append(
                (
                    "aggregate-in-expression",
                    f"{what} uses an aggregate or window function: {_short(node.sql('spark'))}",
                    "a policy expression is evaluated per row; remove the aggregate",
                )
            )
        elif isinstance(node, exp.Star) and not isinstance(node.parent, exp.AggFunc) and per_row:
            issues.append(("not-one-expression", f"{what} uses '*'", "name the column"))
        elif isinstance(node, _PARAMETERS) and not (kind == "mask" and node.name == "col"):
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
        elif isinstance(node, exp.Column):
            issues += _check_column(node, what)
        elif function_name(node):
            issues += _check_call(node, what, groups)
    return issues


def _check_subqueries(tree: exp.Expression, kind: str) -> list[Issue]:
    """Tables only in the allowed subquery shapes, each a three-part catalog name."""
    what = _what(kind)
    for node in tree.walk():
        if isinstance(node, exp.Query) and not _allowed_subquery(node):
            return [
                (
                    f"{kind}-subquery-shape",
                    f"{what} uses a query outside IN (SELECT ...), EXISTS (...) or a scalar "
                    f"subquery: {_short(node.sql('spark'))}",
                    "read a mapping table as x IN (SELECT col FROM cat.schema.table WHERE ...)",
                )
            ]
        if isinstance(node, exp.With | exp.Lateral | exp.Values):
            return [
                (
                    f"{kind}-subquery-shape",
                    f"{what} uses {type(node).__name__.upper()} in a subquery",
                    "a policy subquery reads catalog tables with SELECT ... FROM ... WHERE",
                )
            ]
        if isinstance(node, exp.Table):
            issue = _check_table(node, kind)
            if issue is not None:
                return [issue]
    return []


def _allowed_subquery(node: exp.Query) -> bool:
    """A query is the body of a scalar/EXISTS subquery, IN's query, or a set operand there."""
    parent = node.parent
    if isinstance(parent, exp.SetOperation):  # the set operation itself is checked too
        return True
    if isinstance(node, exp.Subquery):
        return node.args.get("alias") is None and not isinstance(parent, exp.From | exp.Join)
    return isinstance(parent, _SUBQUERY_HOLDERS)


def _check_table(node: exp.Table, kind: str) -> Issue | None:
    """A mapping table is a plain three-part catalog name: no path, no table function."""
    what = _what(kind)
    if not isinstance(node.this, exp.Identifier):
        return (
            f"{kind}-table-function",
            f"{what} reads a table function: {_short(node.sql('spark'))}",
            "read mapping tables by their catalog name",
        )
    parts = [node.args.get(k) for k in ("catalog", "db", "this")]
    db = node.args.get("db")
    if isinstance(db, exp.Identifier) and db.name.lower() in FILE_FORMATS:
        return (
            f"{kind}-reads-path",
            f"{what} reads files by path: {_short(node.sql('spark'))}",
            "read mapping tables by their catalog name, e.g. main.acl.user_regions",
        )
    if node.args.get("version") or node.args.get("sample"):
        return (
            f"{kind}-subquery-shape",
            f"{what} reads {node.name} with time travel or sampling",
            "a policy reads the mapping table's current version",
        )
    if not all(isinstance(p, exp.Identifier) for p in parts) or not _valid_name(node):
        return (
            "mapping-table-name",
            f"{what} names the table {_short(node.sql('spark'))}, not a three-part name",
            "write catalog.schema.table, e.g. main.acl.user_regions",
        )
    return None


def _valid_name(node: exp.Table) -> bool:
    parts = mapping_name(node).split(".")
    if len(parts) != 3:
        return False
    try:
        for part in parts:
            check_name(part, "name part")
    except InvalidName:
        return False
    return True


def mapping_name(node: exp.Table) -> str:
    """The lower-case three-part name of a table a policy subquery reads."""
    parts = (node.args.get("catalog"), node.args.get("db"), node.this)
    return ".".join(p.name for p in parts if p is not None).lower()


def mapping_tables(tree: exp.Expression) -> tuple[str, ...]:
    """The mapping tables a (checked) policy expression reads, in order, without repeats."""
    return tuple(dict.fromkeys(mapping_name(t) for t in tree.find_all(exp.Table)))


def _check_column(node: exp.Column, what: str) -> list[Issue]:
    hidden = [p.name for p in node.parts if p.name.lower() in METADATA_COLUMNS]
    if not hidden:
        return []
    return [
        (
            "metadata-column",
            f"{what} reads the file metadata column {hidden[0]}",
            "use the table's own columns; file metadata is not governed data",
        )
    ]


def _check_call(node: exp.Expression, what: str, groups: set[str]) -> list[Issue]:
    name = function_name(node)
    if name in IDENTITY_ARITY:
        return _check_identity(node, name, groups) if isinstance(node, exp.Anonymous) else []
    if name in DENIED_FUNCTIONS:
        return [
            (
                "forbidden-function",
                f"{what} calls {name}(), which {DENIED_FUNCTIONS[name]}",
                "use the row's columns, literals, Spark built-ins and the identity functions",
            )
        ]
    if is_unknown_function(node, name):
        return [
            (
                "unknown-function",
                f"{what} calls {name}(), which is not a Spark built-in (a UDF?)",
                "policy expressions may call only Spark built-ins and the identity functions",
            )
        ]
    return []


def _check_identity(node: exp.Anonymous, name: str, groups: set[str]) -> list[Issue]:
    args = node.expressions
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
                group_hint(group, groups),
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


# --------------------------------------------------------------------------- mapping tables

MappingIssue = tuple[int, str, str, str, str]  # (rule index, code, message, hint, severity)


class _Target(Protocol):
    """A rule's `on` pattern (governance.policy.model.NamePattern)."""

    def matches_table(self, catalog: str, schema: str, table: str) -> bool: ...


def mapping_issues(
    rules: Sequence[tuple[_Target, str, str]], tables: Collection[str] | None
) -> list[MappingIssue]:
    """What is wrong with the mapping tables of (on, text, kind) policy rules: a table that
    is not in the catalog (`tables`; a warning when no catalog is at hand) and cycles (a
    rule on T reads U and a chain of rules on what it reads leads back to T)."""
    reads = [_reads(text, kind) for _, text, kind in rules]
    issues: list[MappingIssue] = []
    for i, names in enumerate(reads):
        for name in names:
            if tables is None:
                issues.append(
                    (
                        i,
                        "mapping-table-unchecked",
                        f"reads mapping table {name}; with no catalog at hand its existence "
                        "was not checked",
                        "run lakegate policy validate with a lakegate.yaml (--config)",
                        "warning",
                    )
                )
            elif name not in tables:
                issues.append(
                    (
                        i,
                        "mapping-table-missing",
                        f"reads mapping table {name}, which is not in the catalog",
                        "register the table, or fix the name (catalog.schema.table)",
                        "error",
                    )
                )
        chain = _cycle(i, rules, reads)
        if chain:
            issues.append(
                (
                    i,
                    "mapping-cycle",
                    "reads mapping tables in a cycle: " + " -> ".join(chain),
                    "a mapping table's own policies may not read the tables they govern",
                    "error",
                )
            )
    return issues


def _reads(text: str, kind: str) -> tuple[str, ...]:
    """The well-formed mapping-table names an expression reads (the rest are refused)."""
    tree, _ = parse_expression(text, kind)
    if tree is None:
        return ()
    tables = [t for t in tree.find_all(exp.Table) if _check_table(t, kind) is None]
    return tuple(dict.fromkeys(mapping_name(t) for t in tables))


def _cycle(
    start: int, rules: Sequence[tuple[_Target, str, str]], reads: list[tuple[str, ...]]
) -> list[str]:
    """The chain of tables from rule `start`'s reads back to a table it governs, if any."""
    on = rules[start][0]
    stack = [[name] for name in reads[start]]
    seen: set[str] = set()
    while stack:
        path = stack.pop()
        name = path[-1]
        parts = name.split(".")
        if on.matches_table(*parts):
            return [str(on), *path]
        if name in seen:
            continue
        seen.add(name)
        for j, (other, _, _) in enumerate(rules):
            if other.matches_table(*parts):
                stack += [[*path, nxt] for nxt in reads[j]]
    return []
