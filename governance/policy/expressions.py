"""What a policy expression (a row filter's `where`, a custom mask's `expression`) may be.

One checker for validation and for the rewrite, so a policy set that passes
`lakegate policy validate` never makes a table unreadable at run time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types

from governance.policy.problems import group_hint

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

Issue = tuple[str, str, str]  # (code, message, hint)


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

