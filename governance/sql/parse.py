"""Step 1: statement text -> one sqlglot expression, or a one-line refusal.

Everything that is not exactly one statement sqlglot fully understands is refused here:
empty text, several statements, NUL bytes and invalid UTF-8, text longer than the limit,
nesting too deep for the parser, and anything sqlglot could only keep as an opaque Command.
"""

from __future__ import annotations

import logging
import re
import sys
from collections import Counter
from collections.abc import Iterable
from itertools import accumulate, repeat
from operator import attrgetter

from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.tokens import TokenType

from governance.errors import Refused, SqlParseError
from governance.sql import pipe, spark4_syntax
from governance.sql.spark_dialect import SPARK, tokenize
from governance.sql.walk import Walked, collect

MAX_STATEMENT_CHARS = 1_000_000
# sqlglot's parser and generator recurse per nesting level. Deeper statements are refused
# from the token stream, before the parser can hit a RecursionError or the C stack.
MAX_NESTING = 256
# A flat chain of operators nests just as deep once parsed (`a AND b AND c ...` is a
# left-deep tree), and Spark's optimizer recurses over it.
MAX_OPERATORS = 1_000
_OPERATORS = frozenset(
    {
        TokenType.AND,
        TokenType.OR,
        TokenType.PLUS,
        TokenType.DASH,
        TokenType.STAR,
        TokenType.SLASH,
        TokenType.DPIPE,
        TokenType.EQ,
        TokenType.NEQ,
        TokenType.LT,
        TokenType.GT,
        TokenType.LTE,
        TokenType.GTE,
        TokenType.PIPE,
        TokenType.AMP,
        TokenType.CARET,
        TokenType.MOD,
    }
)
_RECURSION_LIMIT = 10_000
if sys.getrecursionlimit() < _RECURSION_LIMIT:
    sys.setrecursionlimit(_RECURSION_LIMIT)
# one C-level scan instead of a Python generator over every character
_SURROGATE = re.compile("[\ud800-\udfff]")
# sqlglot warns on stderr before falling back to a Command, which we refuse anyway
logging.getLogger("sqlglot").setLevel(logging.ERROR)


def decode_statement(text: str | bytes) -> str:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SqlParseError(f"statement is not valid UTF-8 (byte {e.start})") from None
    if not isinstance(text, str):
        raise SqlParseError("statement must be text")
    if "\x00" in text:
        raise SqlParseError("statement contains a NUL character")
    if _SURROGATE.search(text):
        raise SqlParseError("statement contains an unpaired UTF-16 surrogate (invalid UTF-8)")
    if len(text) > MAX_STATEMENT_CHARS:
        raise SqlParseError(
            f"statement is {len(text)} characters long; the limit is {MAX_STATEMENT_CHARS}"
        )
    return text


def parse_statement(text: str | bytes) -> exp.Expression:
    stmt, cross = _parse(text)
    if not cross:
        _restore_comma_joins(stmt.find_all(exp.Join))
    return stmt


def parse_walked(text: str | bytes) -> tuple[exp.Expression, Walked]:
    """parse_statement, and the statement's one walk (governance/sql/walk.py) the planner's
    steps read instead of walking the tree again each."""
    stmt, cross = _parse(text)
    walked = collect(stmt)
    if not cross:
        _restore_comma_joins(walked.joins)
    return stmt, walked


def _parse(text: str | bytes) -> tuple[exp.Expression, bool]:
    """The statement's tree, and whether a CROSS keyword occurs in its tokens."""
    text = decode_statement(text)
    tokens: list = []
    has_pipe = False
    try:
        tokens = tokenize(text)
        has_cross, has_pipe, forms = _check_nesting(tokens)
        spark4_syntax.refuse_statement_forms(tokens, forms)
        if forms:
            spark4_syntax.read_function_forms(tokens, forms)
        if has_pipe:  # Spark 4's `|>`, read operator by operator (governance/sql/pipe.py)
            stmt = pipe.translate(tokens, lambda part: _one_statement(part, text))
        else:
            stmt = _one_statement(tokens, text)
    except Refused:  # SqlParseError, and a Spark 4 construct refused by name
        raise
    except (ParseError, TokenError) as e:
        named = spark4_syntax.parse_failure(tokens)
        if named is not None:
            raise named from None
        what = "pipe syntax (|>)" if has_pipe else "statement"
        raise SqlParseError(f"cannot parse {what}: {describe_parse_error(e)}") from None
    except RecursionError:
        raise SqlParseError("statement is nested too deeply to govern") from None
    except Exception as e:  # the parser must never be the reason a statement runs
        raise SqlParseError(f"cannot parse statement: {type(e).__name__}") from None
    if isinstance(stmt, exp.Command):
        word = str(stmt.this).split()[0].upper() if stmt.this else "?"
        raise Refused(f"statement kind {word} is not governed by Lakegate")
    return stmt, has_cross


def _one_statement(tokens: list, text: str) -> exp.Expression:
    """The one statement `tokens` hold (`text` is the statement's, for error positions)."""
    if tokens and tokens[0].token_type == TokenType.TABLE:
        return _table_statement(tokens, text)
    statements = SPARK.parser(error_level=ErrorLevel.RAISE).parse(tokens, text)
    statements = [s for s in statements if s is not None]
    if not statements:
        raise SqlParseError("empty statement")
    if len(statements) > 1:
        raise Refused(f"multiple statements ({len(statements)}) in one call; send one at a time")
    return statements[0]


def _table_statement(tokens: list, text: str) -> exp.Select:
    """Spark's `TABLE t` is `SELECT * FROM t`; sqlglot would read it as a column named
    TABLE aliased t, so the name after the keyword is parsed as a table and wrapped."""
    rest = tokens[1:]
    if rest and rest[-1].token_type == TokenType.SEMICOLON:
        rest = rest[:-1]
    if not rest:
        raise SqlParseError("cannot parse statement: TABLE needs a table name")
    table = SPARK.parser(error_level=ErrorLevel.RAISE).parse_into(exp.Table, rest, text)[0]
    if not isinstance(table, exp.Table) or set(table.args) - {"this", "db", "catalog"}:
        raise SqlParseError("cannot parse statement: TABLE takes only a table name")
    return exp.select(exp.Star()).from_(table, copy=False)


def _restore_comma_joins(joins: Iterable[exp.Join]) -> None:
    """sqlglot reads Spark's `FROM a, b` as `a CROSS JOIN b`, and Spark skips dynamic
    partition pruning on explicit cross joins: with no CROSS keyword in the text, every
    CROSS join (of the statement's `joins`) came from a comma, so it is written back as
    one (same meaning to Spark)."""
    for join in joins:
        if (
            join.args.get("kind") == "CROSS"
            and not join.args.get("on")
            and not join.args.get("using")
        ):
            join.set("kind", None)


_OPENING = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET})
_TOKEN_TYPE = attrgetter("token_type")  # read in C over the whole token list
_DEPTH = {**dict.fromkeys(_OPENING, 1), **dict.fromkeys(_CLOSING, -1)}  # token -> nesting step


def _check_nesting(tokens: list) -> tuple[bool, bool, list[int]]:
    """Refuse statements nested or chained too deeply; also says whether a CROSS keyword
    occurs (the same pass over the tokens serves `_restore_comma_joins`), whether a pipe
    `|>` does, and where the tokens spark4_syntax.refuse_statement_forms looks at are.
    The kinds are read and counted in C; the running depth is only computed when there are
    more opening brackets than the limit (it can never exceed their number)."""
    kinds = list(map(_TOKEN_TYPE, tokens))
    counts = Counter(kinds)
    if sum(counts[k] for k in _OPENING) > MAX_NESTING:
        peak = max(accumulate(map(_DEPTH.get, kinds, repeat(0))))
        if peak > MAX_NESTING:
            raise SqlParseError(f"statement nests {peak} levels deep; the limit is {MAX_NESTING}")
    operators = sum(counts[k] for k in _OPERATORS)
    if operators > MAX_OPERATORS:
        raise SqlParseError(f"statement has {operators} operators; the limit is {MAX_OPERATORS}")
    form_tokens = spark4_syntax.FORM_TOKENS
    forms = (
        [i for i, k in enumerate(kinds) if k in form_tokens]
        if any(counts[k] for k in form_tokens)
        else []
    )
    return TokenType.CROSS in counts, TokenType.PIPE_GT in counts, forms


_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: ?(.*?), line: .*?>")


_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>")


def _token_text(m: re.Match) -> str:
    kind, text = m.group(1), m.group(2)
    return "the end of the statement" if kind == "SENTINEL" or not text else f"'{text}'"


def describe_parse_error(e: Exception) -> str:
    """sqlglot's error in one line a person can act on (statements and policy expressions)."""
    errors = getattr(e, "errors", None)
    if errors:
        first = errors[0]
        desc = _TOKEN.sub(_token_text, str(first.get("description", "syntax error")))
        desc = _MISSING.sub(lambda m: f"incomplete {m.group(1).upper()} clause", desc)
        return f"{desc} at line {first.get('line')}, column {first.get('col')}"
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__
