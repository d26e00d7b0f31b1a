"""What Spark 4 added to the SQL language: each construct governed like the rest, or refused
with one line that names it; never passed through (see docs/spark4-syntax.md).

sqlglot (pinned) reads some of these constructs as something else: `parse_json(x)` as a
node Spark's generator writes as plain `x`, `v:a` as `v AS :a`, `collate(x, 'c')` as
`x COLLATE 'c'` (which Spark does not parse), Spark 4's statement forms (scripting,
`WITH SCHEMA EVOLUTION`) not at all or as an opaque Command. So the statement forms are
recognised from the token stream before parsing, and expressions are fixed or refused
node by node (`govern_node`, called by governance.sql.constructs for statements and policy
expressions alike). A feature the running Spark line lacks (`LINE.language`) is refused
by name, the same on every line, instead of failing inside Spark.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from governance.errors import Refused
from governance.spark_line import LINE

#: Spark 4 functions Lakegate governs where the line has their feature: pure functions of
#: their arguments, which are the governed view's values (masked, filtered), nothing else.
FUNCTIONS: dict[str, str] = {
    "parse_json": "variant",
    "try_parse_json": "variant",
    "variant_get": "variant",
    "try_variant_get": "variant",
    "is_variant_null": "variant",
    "is_valid_variant": "variant",
    "schema_of_variant": "variant",
    "schema_of_variant_agg": "variant",
    "to_variant_object": "variant",
    "collate": "collation",
    "collation": "collation",
}
#: Table-valued functions Spark 4 added; none is governed (see resolve.SAFE_TABLE_FUNCTIONS).
TABLE_FUNCTIONS = frozenset(
    {"variant_explode", "variant_explode_outer", "sql_keywords", "collations", "python_worker_logs"}
)
_FEATURE_NAMES = {"variant": "the VARIANT type", "collation": "collations"}

_SCRIPTING = (
    "SQL scripting (BEGIN ... END compound statements) is not governed by Lakegate; "
    "send one statement at a time"
)
_VARIABLES = (
    "session variables ({}) are not governed by Lakegate: a variable lives in the shared "
    "Spark session; inline the value"
)
_PATH = (
    "variant path extraction (`expr:path`) is not governed by Lakegate; "
    "write variant_get(expr, '$.path', 'type')"
)


def line_has(feature: str) -> bool:
    """Whether the running Spark line has (and Lakegate governs) a Spark 4 feature."""
    return feature in LINE.language


def _needs(feature: str, construct: str) -> Refused:
    return Refused(
        f"{construct} needs Spark 4 ({_FEATURE_NAMES[feature]}); this Lakegate runs on "
        f"Spark {LINE.name}"
    )


def _text(token: Token | None) -> str:
    return token.text.upper() if token is not None else ""


# `BEGIN [TRANSACTION | WORK]` starts a transaction (refused as a statement kind); any other
# word after BEGIN starts a compound statement
_TRANSACTION = frozenset({"TRANSACTION", "WORK", ";"})


#: The token kinds that may start a form refused anywhere in a statement, or a function
#: call sqlglot reads as a keyword (BETWEEN): the caller's own pass over the tokens finds
#: them for `refuse_statement_forms` and `read_function_forms` (one pass, not two).
FORM_TOKENS = frozenset({TokenType.WITH, TokenType.DEFAULT, TokenType.BETWEEN})


def refuse_statement_forms(tokens: list[Token], forms: Iterable[int]) -> None:
    """Refuse by name the Spark 4 statement forms sqlglot cannot parse or would keep as an
    opaque Command (which parse.py refuses by its first word only); `forms`: the positions
    of the FORM_TOKENS in `tokens`."""
    if not tokens:
        return
    kinds = [t.token_type for t in tokens[:3]]
    first = kinds[0]
    second = tokens[1] if len(tokens) > 1 else None
    third = tokens[2] if len(tokens) > 2 else None
    if first == TokenType.BEGIN and second is not None and _text(second) not in _TRANSACTION:
        raise Refused(_SCRIPTING)
    if kinds[1:3] == [TokenType.COLON, TokenType.BEGIN]:  # a labelled compound statement
        raise Refused(_SCRIPTING)
    if first == TokenType.EXECUTE and _text(second).startswith("IMMEDIATE"):
        raise Refused(
            "EXECUTE IMMEDIATE is not governed by Lakegate: the statement it runs is only "
            "known when it runs; send that statement itself"
        )
    if first == TokenType.DECLARE:
        raise Refused(_VARIABLES.format("DECLARE VARIABLE"))
    if first == TokenType.SET and _text(second) in ("VAR", "VARIABLE"):
        raise Refused(_VARIABLES.format(f"SET {_text(second)}"))
    if kinds[:2] == [TokenType.DROP, TokenType.TEMPORARY] and _text(third) == "VARIABLE":
        raise Refused(_VARIABLES.format("DROP TEMPORARY VARIABLE"))
    if first == TokenType.COMMAND and _text(tokens[0]) == "CALL":
        raise Refused("CALL (stored procedures) is not governed by Lakegate")
    for i in forms:
        if i >= len(tokens) - 2:
            break
        kind = tokens[i].token_type
        if kind == TokenType.WITH and tokens[i + 1].token_type == TokenType.SCHEMA:
            if _text(tokens[i + 2]) == "EVOLUTION":
                raise Refused(
                    "WITH SCHEMA EVOLUTION is not governed by Lakegate: a write may not "
                    "change a governed table's columns; ALTER TABLE first"
                )
        elif kind == TokenType.DEFAULT and _text(tokens[i + 1]) == "COLLATION":
            raise Refused("default collations (DEFAULT COLLATION) are not governed by Lakegate")


_PATH_BEFORE = frozenset(
    {TokenType.VAR, TokenType.IDENTIFIER, TokenType.R_PAREN, TokenType.R_BRACKET}
)
_PATH_AFTER = frozenset({TokenType.VAR, TokenType.IDENTIFIER, TokenType.L_BRACKET})


#: Tokens after which an expression starts: a BETWEEN there, followed by `(`, is Spark 4's
#: between(x, low, high) function, which sqlglot can only read as the operator's keyword
_EXPRESSION_START = frozenset(
    {
        TokenType.SELECT,
        TokenType.COMMA,
        TokenType.L_PAREN,
        TokenType.WHERE,
        TokenType.HAVING,
        TokenType.QUALIFY,
        TokenType.ON,
        TokenType.AND,
        TokenType.OR,
        TokenType.WHEN,
        TokenType.THEN,
        TokenType.ELSE,
        TokenType.DISTINCT,
        TokenType.ORDER_BY,
        TokenType.GROUP_BY,
        TokenType.EQ,
        TokenType.NEQ,
        TokenType.LT,
        TokenType.GT,
        TokenType.LTE,
        TokenType.GTE,
    }
)


def read_function_forms(tokens: list[Token], forms: Iterable[int]) -> None:
    """Mark in place the tokens sqlglot would read as a keyword where Spark reads a function
    call: `between(x, low, high)` (Spark 4's function, the same as `x BETWEEN low AND
    high`) becomes a call of `between`, an identifier token, which sqlglot parses as that
    call. Only where an expression starts (after SELECT, a comma, `(`, WHERE,
    an operator, NOT after one of those): `x BETWEEN (1) AND 2` keeps its operator.
    `forms`: the positions of the FORM_TOKENS in `tokens`."""
    for i in forms:
        if tokens[i].token_type != TokenType.BETWEEN or i + 1 >= len(tokens):
            continue
        if tokens[i + 1].token_type != TokenType.L_PAREN:
            continue
        before = i - 1
        if before >= 0 and tokens[before].token_type == TokenType.NOT:
            before -= 1
        if before < 0 or tokens[before].token_type in _EXPRESSION_START:
            tokens[i].token_type = TokenType.VAR


def parse_failure(tokens: list[Token]) -> Refused | None:
    """The refusal naming a Spark 4 construct a statement sqlglot could not parse holds: a
    `:` path (`v:a.b`; `STRUCT<a: INT>` has a type after its colon, a parameter marker an
    operator before it), else None (the parse error stands)."""
    for i in range(1, len(tokens) - 1):
        if (
            tokens[i].token_type == TokenType.COLON
            and tokens[i - 1].token_type in _PATH_BEFORE
            and tokens[i + 1].token_type in _PATH_AFTER
        ):
            return Refused(_PATH)
    return None


def govern_node(node: exp.Expression, name: str) -> exp.Expression | None:
    """Check one node of a statement or policy expression (`name`: its function name, or
    ""); raises Refused, or returns the node to put in its place (None: keep it)."""
    alias = node.parent
    if isinstance(alias, exp.Alias) and isinstance(alias.args.get("alias"), exp.Placeholder):
        raise Refused(_PATH)  # sqlglot reads `v:a` as `v AS :a` (`v` or `:a` comes first)
    if isinstance(node, exp.DataType):
        if node.is_type(exp.DataType.Type.VARIANT) and not line_has("variant"):
            raise _needs("variant", "the VARIANT type")
        return None
    if isinstance(node, exp.Collate):
        if not line_has("collation"):
            raise _needs("collation", "COLLATE")
        collation = node.expression
        if isinstance(collation, exp.Literal) and collation.is_string:
            # collate(x, 'c'): Spark parses the function, not `x COLLATE 'c'`
            return exp.Anonymous(this="collate", expressions=[node.this, collation])
        return None
    if isinstance(node, _PATTERN_MATCHES) and isinstance(node.parent, _BINDS_TIGHTER):
        # like(s, p) = false is read as (s LIKE p) = FALSE, but written bare, Spark reads
        # s LIKE (p = FALSE): the tree's grouping is written out
        return exp.Paren(this=type(node)(**node.args))
    spelled = _spark_spelling(node)
    if spelled is not None:
        return spelled
    if name == "identifier":
        raise Refused(
            "IDENTIFIER(...) is not governed by Lakegate: the name it makes is only known "
            "when the statement runs; write the name itself"
        )
    if name in TABLE_FUNCTIONS:
        raise Refused(f"table-valued function {name}(...) is not governed")
    feature = FUNCTIONS.get(name)
    if feature is None:
        return None
    if not line_has(feature):
        raise _needs(feature, f"{name}()")
    if isinstance(node, exp.ParseJSON):
        # Spark's generator writes parse_json(x) as x: kept as the call the user wrote
        return exp.Anonymous(this="parse_json", expressions=[node.this])
    return None


#: Pattern matches sqlglot writes as bare operators (from `like(s, p)` or `s LIKE p`)
_PATTERN_MATCHES = (exp.Like, exp.ILike, exp.RegexpLike)
#: Parents that Spark's grammar binds tighter than a pattern match: a comparison,
#: arithmetic or a unary operator (AND, OR and NOT bind looser)
_BINDS_TIGHTER = (
    exp.EQ,
    exp.NEQ,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.DPipe,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.Neg,
    exp.BitwiseNot,
    exp.Is,
)


def _spark_spelling(node: exp.Expression) -> exp.Expression | None:
    """The call Spark runs for one sqlglot would write as another with other answers
    (None: sqlglot writes it as read). `to_char(x, fmt)` formats x by fmt, but sqlglot
    writes `CAST(x AS STRING)`: the call is kept as written. `listagg(x)` (and
    `string_agg(x)`) concatenates without a delimiter, but sqlglot writes
    `LISTAGG(x, ',')`: the default is spelled out as Spark's, NULL.
    `percentile_cont(p) WITHIN GROUP (ORDER BY x)` is exact (and `percentile_disc`
    discrete, in the order given), but sqlglot writes both as `PERCENTILE_APPROX(x, p)`:
    the call is kept as written. The children move into the new node (never copied), so
    what govern_nodes replaces inside them still lands."""
    if isinstance(node, exp.ToChar):
        # sqlglot writes to_char(x, fmt) as CAST(x AS STRING): the format is lost
        return exp.Anonymous(
            this="to_char", expressions=[a for a in (node.this, node.args.get("format")) if a]
        )
    if (
        isinstance(node, exp.Log)
        and isinstance(node.this, exp.Literal)
        and not node.this.meta  # no place in the text: sqlglot made it for log10/log2
        and str(node.this.this) in ("10", "2")
        and node.expression is not None
    ):
        # log10(x) and log2(x) are read as LOG(10, x) and LOG(2, x), which Spark computes
        # as ln(x) / ln(base): log10(1000) is 3.0, LOG(10, 1000) 2.9999999999999996
        return exp.Anonymous(this=f"log{node.this.this}", expressions=[node.expression])
    if isinstance(node, exp.GroupConcat) and node.args.get("separator") is None:
        return exp.GroupConcat(this=node.this, separator=exp.Null())
    if isinstance(node, exp.PercentileCont | exp.PercentileDisc) and isinstance(
        node.parent, exp.WithinGroup
    ):
        return exp.Anonymous(this=node.sql_name().lower(), expressions=[node.this])
    return None


def is_governed_function(name: str) -> bool:
    """A Spark 4 function this line governs (and so not an unknown one)."""
    feature = FUNCTIONS.get(name)
    return feature is not None and line_has(feature)
