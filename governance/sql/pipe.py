"""Spark 4's SQL pipe syntax (`FROM t |> WHERE ... |> SELECT ...`), read operator by operator.

sqlglot (pinned) parses pipe syntax, but folds operators into the query before them where
Spark applies each to the result of the one before: `FROM t |> LIMIT 1 |> WHERE p` becomes
`... WHERE p LIMIT 1`, `|> SELECT DISTINCT` loses DISTINCT, `|> AS x` leaves a bare alias
in FROM. So Lakegate splits the statement at its top-level `|>` tokens itself and makes each
operator one SELECT over the previous result as a derived table: a plain SQL query that the
rest of the pipeline governs like any other (and that Spark 3.5 runs too). Operators whose
meaning that reading cannot keep, and `|>` inside parentheses, are refused by name.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from governance.errors import Refused
from governance.sql.spark_dialect import tokenize

_OPENING = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET})
_QUERIES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Values, exp.Subquery)
_JOIN_WORDS = frozenset(
    {"JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL", "SEMI", "ANTI"}
)
_SET_WORDS = frozenset({"UNION", "INTERSECT", "EXCEPT", "MINUS"})
# operator -> (tokens put before the operator's own, the Select args it may set)
_CLAUSES: dict[str, tuple[str, frozenset[str]]] = {
    "SELECT": ("", frozenset({"expressions", "distinct"})),
    "EXTEND": ("SELECT", frozenset({"expressions"})),
    "WHERE": ("SELECT *", frozenset({"expressions", "where"})),
    "AGGREGATE": ("SELECT", frozenset({"expressions", "group"})),
    "ORDER BY": ("SELECT *", frozenset({"expressions", "order"})),
    "LIMIT": ("SELECT *", frozenset({"expressions", "limit", "offset"})),
    "OFFSET": ("SELECT *", frozenset({"expressions", "offset"})),
}
# the operator's text starts after its first word for these (the prefix stands for it)
_DROPS_WORD = frozenset({"EXTEND", "AGGREGATE"})

# parses a token list (one statement) into its tree
ParseTokens = Callable[[list[Token]], exp.Expression]


def _tokens(text: str) -> list[Token]:
    return tokenize(text) if text else []


def split(tokens: list[Token]) -> list[list[Token]]:
    """The statement's parts between top-level `|>`; `|>` inside parentheses is refused."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        kind = t.token_type
        if kind in _OPENING:
            depth += 1
        elif kind in _CLOSING:
            depth -= 1
        elif kind == TokenType.PIPE_GT:
            if depth:
                raise Refused(
                    "pipe syntax (|>) inside parentheses is not governed by Lakegate; "
                    "use it at the top level of a query"
                )
            parts.append([])
            continue
        parts[-1].append(t)
    if parts and parts[-1] and parts[-1][-1].token_type == TokenType.SEMICOLON:
        parts[-1].pop()
    return parts


def translate(tokens: list[Token], parse: ParseTokens) -> exp.Expression:
    """The pipe statement as nested SELECTs, one per operator."""
    first, *operators = split(tokens)
    query = parse(first)
    if not isinstance(query, _QUERIES):
        raise Refused(
            "pipe syntax (|>) is governed after a query only; "
            f"not after {type(query).__name__.upper()}"
        )
    alias: exp.Identifier | None = None
    step = 0
    for op in operators:
        if not op:
            raise Refused("pipe syntax (|>) needs an operator after each |>")
        word = " ".join(op[0].text.upper().split())  # `ORDER BY` is one token
        if word == "AS":
            if len(op) != 2 or op[1].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
                raise Refused("pipe operator |> AS takes one name")
            alias = exp.to_identifier(op[1].text, quoted=op[1].token_type == TokenType.IDENTIFIER)
            continue
        if alias is None and _merges(query, word):
            query = _merge(word, op, query, parse)
            continue
        step += 1
        source = exp.Subquery(
            this=query,
            alias=exp.TableAlias(this=alias or exp.to_identifier(f"__pipe_{step}")),
        )
        alias = None
        query = _apply(word, op, source, parse)
    return query


def _is_bare(query: exp.Expression) -> bool:
    """`SELECT * FROM ... [JOIN ...] [WHERE ...]`: relations and a filter, nothing after."""
    if not isinstance(query, exp.Select) or _set_args(query) - {
        "expressions",
        "from_",
        "joins",
        "where",
    }:
        return False
    stars = query.expressions
    return len(stars) == 1 and isinstance(stars[0], exp.Star) and not any(stars[0].args.values())


def _merges(query: exp.Expression, word: str) -> bool:
    """Whether the operator can join the query before it instead of wrapping it, with the
    same result (so the relations' names stay in scope, and an order stays the result's):
    a filter, projection or aggregation over a bare query is the clause SQL evaluates
    right after it; a join follows joins directly when no filter came before it; ORDER BY
    and LIMIT/OFFSET are the last clauses SQL evaluates, when the query has none yet."""
    if word in ("ORDER BY", "LIMIT", "OFFSET"):
        after = ("limit", "offset") if word != "ORDER BY" else ("order", "limit", "offset")
        return isinstance(query, exp.Select) and not any(query.args.get(a) for a in after)
    if not _is_bare(query):
        return False
    if word in ("WHERE", "SELECT", "EXTEND", "AGGREGATE"):
        return True
    return word.split()[0] in _JOIN_WORDS and query.args.get("where") is None


def _merge(word: str, op: list[Token], query: exp.Select, parse: ParseTokens) -> exp.Expression:
    """The operator as clauses of the bare query before it (see `_merges`)."""
    name = f"__lg_pipe_{secrets.token_hex(6)}"
    single = _apply(word, op, exp.Subquery(this=exp.Table(this=exp.to_identifier(name))), parse)
    if not isinstance(single, exp.Select):  # _apply makes a SELECT of these operators
        raise Refused(f"pipe operator |> {word} takes only its own clause here")
    if word == "WHERE":
        return query.where(single.args["where"].this, copy=False)
    if word in ("ORDER BY", "LIMIT", "OFFSET"):
        for clause in ("order", "limit", "offset"):
            if single.args.get(clause) is not None:
                query.set(clause, single.args[clause])
        return query
    if word in _CLAUSES:
        query.set("expressions", single.expressions)
        query.set("distinct", single.args.get("distinct"))
        query.set("group", single.args.get("group"))
        return query
    for join in single.args.get("joins") or []:
        query.append("joins", join)
    return query


def _apply(word: str, op: list[Token], source: exp.Subquery, parse: ParseTokens) -> exp.Expression:
    """One operator over `source` (the previous result, aliased)."""
    if word in _CLAUSES:
        prefix, allowed = _CLAUSES[word]
        body = op[1:] if word in _DROPS_WORD else op
        select = parse(_tokens(prefix) + body)
        if not isinstance(select, exp.Select) or _set_args(select) - allowed:
            raise Refused(f"pipe operator |> {word} takes only its own clause here")
        if word == "EXTEND":
            select.set("expressions", [exp.Star(), *select.expressions])
        elif word == "AGGREGATE":
            group = select.args.get("group")
            keys = [k.copy() for k in group.expressions] if group is not None else []
            select.set("expressions", [*keys, *select.expressions])
        return select.from_(source, copy=False)
    first = word.split()[0]
    if first in _JOIN_WORDS or first in _SET_WORDS:
        name = f"__lg_pipe_{secrets.token_hex(6)}"
        tree = parse(_tokens(f"SELECT * FROM {name}") + op)
        inputs = [t for t in tree.find_all(exp.Table) if t.name == name]
        shape_ok = (
            isinstance(tree, exp.Select) and _set_args(tree) <= {"expressions", "from_", "joins"}
            if first in _JOIN_WORDS
            else isinstance(tree, exp.Union | exp.Intersect | exp.Except)
        )
        if not shape_ok or len(inputs) != 1 or inputs[0].args.get("alias") is not None:
            raise Refused(f"pipe operator |> {word} takes only its own clause here")
        inputs[0].replace(source)
        return tree
    raise Refused(f"pipe operator |> {word} is not governed by Lakegate")


def _set_args(select: exp.Expression) -> set[str]:
    return {k for k, v in select.args.items() if v}
