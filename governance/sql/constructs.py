"""Refuse what the layer does not govern, and resolve identity functions to literals.

Runs over the user's statement and over every policy expression. Identity is decided by
the layer, never by Spark: `current_user()` and friends become string literals and
`is_member('g')` becomes TRUE or FALSE for the governed user.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from pathlib import Path

from sqlglot import exp

from governance.errors import Refused
from governance.spark_line import LINE, SPARK_4
from governance.sql import spark4_syntax

_RUNS_CODE = "runs arbitrary JVM code"
_READS_FILES = "reads files or file metadata instead of governed values"
_ERROR_CHANNEL = "can fail with a value in its error message, a channel for hidden values"
_LAYOUT = "exposes how the data is stored, not its values"
_SESSION = "depends on the Spark session's namespace, which the layer does not govern"
# The one list of functions no governed SQL may call (statements and policy expressions),
# each with why; `lakegate policy validate` and the rewrite both refuse them through it.
DENIED_FUNCTIONS: dict[str, str] = {
    "reflect": _RUNS_CODE,
    "java_method": _RUNS_CODE,
    "try_reflect": _RUNS_CODE,
    "input_file_name": _READS_FILES,
    "input_file_block_start": _READS_FILES,
    "input_file_block_length": _READS_FILES,
    "read_files": _READS_FILES,
    "raise_error": _ERROR_CHANNEL,
    "assert_true": _ERROR_CHANNEL,
    "from_avro": _ERROR_CHANNEL,
    "to_avro": _ERROR_CHANNEL,
    "url_decode": _ERROR_CHANNEL,
    # Spark 4's, reviewed against FunctionRegistry (docs/spark4-syntax.md): each fails on a
    # row's value with that value (or its length) in the message; the try_ forms that
    # answer NULL instead (try_validate_utf8, try_to_time) are allowed
    "validate_utf8": _ERROR_CHANNEL,
    "to_time": _ERROR_CHANNEL,
    "make_time": _ERROR_CHANNEL,
    "time_from_seconds": _ERROR_CHANNEL,
    "time_from_millis": _ERROR_CHANNEL,
    "time_from_micros": _ERROR_CHANNEL,
    "time_trunc": _ERROR_CHANNEL,
    "time_diff": _ERROR_CHANNEL,
    "st_geomfromwkb": _ERROR_CHANNEL,
    "st_geogfromwkb": _ERROR_CHANNEL,
    "st_setsrid": _ERROR_CHANNEL,
    "vector_cosine_similarity": _ERROR_CHANNEL,
    "vector_inner_product": _ERROR_CHANNEL,
    "vector_l2_distance": _ERROR_CHANNEL,
    "vector_norm": _ERROR_CHANNEL,
    "vector_normalize": _ERROR_CHANNEL,
    "vector_avg": _ERROR_CHANNEL,
    "vector_sum": _ERROR_CHANNEL,
    # a protobuf descriptor is read from a file path on the driver
    "from_protobuf": _READS_FILES,
    "to_protobuf": _READS_FILES,
    "spark_partition_id": _LAYOUT,
    "monotonically_increasing_id": _LAYOUT,
    "current_database": _SESSION,
    "current_schema": _SESSION,
    "current_catalog": _SESSION,
    "current_path": _SESSION,
}
IDENTITY_USER = frozenset({"current_user", "session_user", "user"})
IDENTITY_MEMBER = frozenset({"is_member", "is_account_group_member"})


def builtin_names(listing: str) -> frozenset[str]:
    """The function names a list beside this module holds (generated from Spark's
    FunctionRegistry.builtin; tests/security/test_spark_functions.py checks it against the
    running Spark)."""
    text = (Path(__file__).parent / listing).read_text()
    return frozenset(
        line.strip().lower()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    )


# The running line's built-in function names; anything else (a UDF registered in the shared
# session, say) is refused.
SPARK_BUILTINS = builtin_names(LINE.builtin_functions)
# Spark 4's built-ins this line lacks, refused by name instead of failing inside Spark
# (empty on Spark 4). The variant and collation functions have their own refusal
# (governance/sql/spark4_syntax.py), denied and identity functions theirs on both lines;
# percentile_cont/_disc ... WITHIN GROUP is 3.5 grammar; sqlglot reads listagg and
# string_agg as group_concat.
NEEDS_SPARK_4 = (
    builtin_names(SPARK_4.builtin_functions)
    - SPARK_BUILTINS
    - spark4_syntax.FUNCTIONS.keys()
    - DENIED_FUNCTIONS.keys()
    - IDENTITY_USER
    - {"percentile_cont", "percentile_disc"}
) | ({"group_concat"} if "listagg" not in SPARK_BUILTINS else set())
METADATA_COLUMNS = frozenset(
    {"_metadata", "_row_id", "_change_type", "_commit_version", "_commit_timestamp"}
)


def function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return ""


def is_unknown_function(node: exp.Expression, name: str) -> bool:
    """A call of something that is not a Spark built-in (a UDF in the shared session, say).

    Table functions (a call under a FROM) are resolve.py's to govern."""
    return name in NEEDS_SPARK_4 or (
        isinstance(node, exp.Anonymous)
        and name not in SPARK_BUILTINS
        and name not in IDENTITY_USER
        and name not in IDENTITY_MEMBER
        and not spark4_syntax.is_governed_function(name)
        and not isinstance(node.parent, exp.Table)
    )


def _time_travel(node: exp.Version) -> tuple[list[tuple[exp.Expression, exp.Expression]], bool]:
    """`VERSION AS OF` takes a literal. `TIMESTAMP AS OF` takes a timestamp literal, or
    `current_timestamp()`/`now()` plus or minus INTERVAL literals, which is folded here into
    one UTC timestamp literal: Delta time-travels a table read by its path only to a
    literal, and the statement and the verifier's own analysis of the view then resolve
    the same Delta version. Anything else (columns, subqueries, other functions) is refused.
    Also says whether the clock was read (such a plan holds only now: never cached)."""
    kind = str(node.name).upper()
    value = node.expression
    if kind == "VERSION":
        if not isinstance(value, exp.Literal):
            raise Refused("VERSION AS OF takes a literal version number")
        return [], False
    if kind != "TIMESTAMP" or value is None:
        raise Refused(f"time travel by {kind} is not governed")
    literal = _literal_timestamp(value)
    if literal is not None:
        return ([] if literal is value else [(value, literal)]), False
    try:
        instant = _now_plus_intervals(value)
    except OverflowError:
        raise Refused(f"{_TT_HELP}; this one is out of range") from None
    text = instant.strftime("%Y-%m-%d %H:%M:%S.%fZ")
    return [(value, exp.Literal.string(text))], True


_TT_HELP = (
    "TIMESTAMP AS OF takes a timestamp literal, or current_timestamp() plus or minus "
    "INTERVAL literals"
)
_INTERVAL_UNITS = {
    "MICROSECOND": dt.timedelta(microseconds=1),
    "MILLISECOND": dt.timedelta(milliseconds=1),
    "SECOND": dt.timedelta(seconds=1),
    "MINUTE": dt.timedelta(minutes=1),
    "HOUR": dt.timedelta(hours=1),
    "DAY": dt.timedelta(days=1),
    "WEEK": dt.timedelta(weeks=1),
}


def _literal_timestamp(value: exp.Expression) -> exp.Literal | None:
    """A string literal as written; `TIMESTAMP '...'` as its string (the same value to
    Delta, read in the session time zone), since sqlglot would write it as a CAST."""
    if isinstance(value, exp.Literal) and value.is_string:
        return value
    if (
        isinstance(value, exp.Cast)
        and isinstance(value.this, exp.Literal)
        and value.this.is_string
        and value.to.is_type(exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ)
    ):
        return exp.Literal.string(value.this.this)
    return None


def _now_plus_intervals(value: exp.Expression) -> dt.datetime:
    """current_timestamp()/now() [(+|-) INTERVAL n unit ...], evaluated now, in UTC."""
    if isinstance(value, exp.Paren):
        return _now_plus_intervals(value.this)
    if isinstance(value, exp.CurrentTimestamp) and not value.this:
        return dt.datetime.now(dt.UTC)
    if function_name(value) == "now" and not value.expressions:
        return dt.datetime.now(dt.UTC)
    if isinstance(value, exp.Add):
        return _now_plus_intervals(value.this) + _interval(value.expression)
    if isinstance(value, exp.Sub):
        return _now_plus_intervals(value.this) - _interval(value.expression)
    raise Refused(_TT_HELP)


def _interval(value: exp.Expression) -> dt.timedelta:
    """INTERVAL n unit (and sums of them) with a whole number and a fixed-length unit."""
    if isinstance(value, exp.Paren):
        return _interval(value.this)
    if isinstance(value, exp.Add):
        return _interval(value.this) + _interval(value.expression)
    if isinstance(value, exp.Sub):
        return _interval(value.this) - _interval(value.expression)
    if isinstance(value, exp.Interval) and isinstance(value.this, exp.Literal):
        unit = value.args["unit"].name.upper() if value.args.get("unit") else ""
        step = _INTERVAL_UNITS.get(unit.removesuffix("S"))
        number = value.this.this
        if step is not None and number.lstrip("-").isdigit() and len(number) <= 12:
            return int(number) * step
    raise Refused(f"{_TT_HELP} (whole numbers of microseconds to weeks)")


# Every node kind govern_expression looks at (function_name is empty for all but Func);
# sqlglot's compiled walk skips the rest (identifiers, literals, operators, clauses).
GOVERNED_NODES = (
    exp.Func,
    exp.Parameter,
    exp.Version,
    exp.Placeholder,
    exp.SessionParameter,
    exp.QueryTransform,
    exp.Directory,
    exp.Column,
    exp.Dot,
    exp.DataType,  # VARIANT (governance/sql/spark4_syntax.py)
    exp.Like,  # grouping written out (governance/sql/spark4_syntax.py)
    exp.ILike,
    exp.RegexpLike,
)


def govern_expression(
    tree: exp.Expression,
    user: str,
    is_member: Callable[[str], bool],
    *,
    where: str = "statement",
    namespace: tuple[str, str] | None = None,
    on_clock: Callable[[], None] | None = None,
) -> exp.Expression:
    """Check constructs and replace identity functions in place; returns the (new) root.
    `on_clock` is called when a time was folded from the clock (`TIMESTAMP AS OF now()`)."""
    return govern_nodes(
        tree,
        tree.find_all(*GOVERNED_NODES),
        user,
        is_member,
        where=where,
        namespace=namespace,
        on_clock=on_clock,
    )[0]


def govern_nodes(
    tree: exp.Expression,
    nodes: Iterable[exp.Expression],
    user: str,
    is_member: Callable[[str], bool],
    *,
    where: str = "statement",
    namespace: tuple[str, str] | None = None,
    on_clock: Callable[[], None] | None = None,
) -> tuple[exp.Expression, bool]:
    """govern_expression over `nodes`, the tree's nodes of the GOVERNED_NODES kinds in
    breadth-first order (sqlglot's find_all, or governance/sql/walk.py's one walk); also says
    whether the tree changed (a node was replaced)."""
    replacements: list[tuple[exp.Expression, exp.Expression]] = []
    for node in nodes:  # the kinds checked below, nothing else
        name = function_name(node)
        if name in NEEDS_SPARK_4:
            spelled = "listagg" if name == "group_concat" else name
            raise Refused(
                f"function {spelled}() needs Spark 4; this Lakegate runs on Spark {LINE.name}"
            )
        fixed = spark4_syntax.govern_node(node, name)
        if fixed is not None:
            replacements.append((node, fixed))
            continue
        if isinstance(node, exp.Column):
            for part in node.parts:
                if part.name.lower() in METADATA_COLUMNS:
                    raise Refused(f"file metadata columns ({part.name}) are not readable")
            continue
        if isinstance(node, exp.Parameter) and isinstance(node.parent, exp.TableAlias):
            raise Refused(
                f"the `table@{node.name}` time-travel spelling is not governed; "
                "write VERSION AS OF / TIMESTAMP AS OF"
            )
        if isinstance(node, exp.Version):
            found, clock = _time_travel(node)
            replacements += found
            if clock and on_clock is not None:
                on_clock()
            continue
        if isinstance(node, exp.Placeholder | exp.Parameter | exp.SessionParameter):
            raise Refused(  # named (:x) and positional (?) markers among them
                f"parameters and variables ({node.sql('spark')}) in a {where} are "
                "not governed; inline the value"
            )
        if isinstance(node, exp.QueryTransform):
            raise Refused(f"TRANSFORM ... USING in a {where} is refused: it runs a program")
        if isinstance(node, exp.Directory):
            raise Refused("writing to a DIRECTORY is refused; write into a governed table")
        if isinstance(node, exp.Dot) and node.name.lower() in METADATA_COLUMNS:
            raise Refused(f"file metadata columns ({node.name}) are not readable")
        if isinstance(node, exp.CurrentUser | exp.SessionUser):
            if node.this is not None or node.expressions:
                raise Refused(f"{node.sql_name().lower()}() takes no arguments")
            replacements.append((node, exp.Literal.string(user)))
            continue
        if isinstance(node, exp.CurrentDatabase | exp.CurrentSchema) and namespace:
            replacements.append((node, exp.Literal.string(namespace[1])))
            continue
        if isinstance(node, exp.CurrentCatalog) and namespace:
            replacements.append((node, exp.Literal.string(namespace[0])))
            continue
        if not name:
            continue
        if name in IDENTITY_USER:
            if node.expressions:
                raise Refused(f"{name}() takes no arguments")
            replacements.append((node, exp.Literal.string(user)))
        elif name in IDENTITY_MEMBER:
            args = node.expressions
            if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
                raise Refused(f"{name}() takes one string literal (a group name)")
            replacements.append((node, exp.Boolean(this=is_member(args[0].this))))
        elif name in DENIED_FUNCTIONS:
            raise Refused(f"function {name}() is refused in a {where}")
        elif is_unknown_function(node, name):
            raise Refused(f"function {name}() is not a Spark built-in; refused in a {where}")
    for old, new in replacements:
        if old is tree:
            tree = new
        else:
            old.replace(new)
    return tree, bool(replacements)
