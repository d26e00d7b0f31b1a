"""Step 6 at the Spark edge: run a plan, and Spark's errors as data.

A runtime error's message may quote values read from a table, so the caller gets its error
class and a query id (the full text goes to the server log, `lakegate.errors`), or Spark's
first line only for an allow-listed analysis error, which names the statement's own
identifiers.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.landing import COMMIT_TAG_CONF, commit_tag
from catalog.catalog import Catalog
from governance.errors import AccessDenied, LakegateError
from governance.execute.actions import execute_actions, read_history
from governance.execute.sources import PinnedSources, ensure_pins
from governance.files import owner_only
from governance.metrics import PHASE_SECONDS
from governance.planning.lineage import carried, refuse_unorderable
from governance.planning.planned import ROW_FILTER_VIOLATION, Planned, RegisterTable
from governance.planning.writes import carry_tags
from governance.rewrite.aggregation import AGG_MARK
from governance.spark_line import LINE
from governance.verify.guard import analyzed_command, commands_with, query_frame, run_analyzed
from governance.verify.plan import Analyze, Verified, columns_used, lineage_of, verify_plan
from governance.verify.readable import Seen, readable_line, seen_by

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Full Spark error texts go here, never to the caller: the CLI and the REST server route it
#: to `lakegate-server.log` beside the config (see `route_error_log`).
ERROR_LOG = logging.getLogger("lakegate.errors")
#: Analysis errors whose message names only the statement's own identifiers (never a value
#: read from a table), so the caller may read them. An allow-list by error class: any other
#: class, and every error raised while running, is reported as class + query id only.
READABLE_ANALYSIS_ERRORS = frozenset(
    {
        "PARSE_SYNTAX_ERROR",
        "PARSE_EMPTY_STATEMENT",
        "UNRESOLVED_COLUMN.WITH_SUGGESTION",
        "UNRESOLVED_COLUMN.WITHOUT_SUGGESTION",
        "UNRESOLVED_FIELD.WITH_SUGGESTION",
        "UNRESOLVED_FIELD.WITHOUT_SUGGESTION",
        "UNRESOLVED_ROUTINE",
        "TABLE_OR_VIEW_NOT_FOUND",
        "AMBIGUOUS_REFERENCE",
        "WRONG_NUM_ARGS.WITHOUT_SUGGESTION",
        "MISSING_AGGREGATION",
        "MISSING_GROUP_BY",
    }
)


class StatementFailed(LakegateError):
    """Spark could not run an allowed statement: its error class and query id, or (for an
    allow-listed analysis error) Spark's first line."""


def route_error_log(path: Path) -> None:
    """Send `lakegate.errors` to `path` only (never to the caller's stdout/stderr)."""
    target = str(path.resolve())
    if any(
        isinstance(h, logging.FileHandler) and h.baseFilename == target for h in ERROR_LOG.handlers
    ):
        return
    handler = logging.FileHandler(target, encoding="utf-8")
    owner_only(Path(target))  # full Spark error texts, which may quote rows
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ERROR_LOG.addHandler(handler)
    ERROR_LOG.propagate = False
    if ERROR_LOG.level == logging.NOTSET:
        ERROR_LOG.setLevel(logging.INFO)


def error_class(e: BaseException) -> str:
    """Spark's error class of `e` or of the first JVM cause that has one (a failed job wraps
    the task's error), else the exception's type name. Never derived from message text."""
    get = getattr(e, LINE.error_class_method, None)
    try:
        cls = get() if callable(get) else None
    except Exception:
        cls = None
    if cls:
        return str(cls)
    j = getattr(e, "_origin", None) or getattr(e, "java_exception", None)
    for _ in range(16):  # a cause chain is short; bound it anyway
        if j is None:
            break
        try:
            cls = getattr(j, LINE.error_class_method)()
        except Exception:
            cls = None
        if cls:
            return str(cls)
        try:
            j = j.getCause()
        except Exception:
            break
    return type(e).__name__


def small_group_refusal(text: str, query_id: str, user: str) -> AccessDenied | None:
    """A run that failed on a group below an aggregation policy's size (`on_small_group:
    refuse`, the marker only Lakegate's guard raises) is a refusal, audited as one."""
    if AGG_MARK not in text:
        return None
    ERROR_LOG.warning("query %s (user %s) refused: a group below minimum size", query_id, user)
    return AccessDenied(
        f"refused: a group of the result has fewer rows of an aggregate-only table than "
        f"its aggregation policy's min_group_size (query {query_id})"
    )


def failed_run(e: BaseException, query_id: str, user: str) -> LakegateError:
    """What the caller gets for a run that failed while its rows were produced."""
    refused = small_group_refusal(str(getattr(e, "desc", None) or e), query_id, user)
    return refused or StatementFailed(failure_message(e, query_id, user))


def failure_message(e: BaseException, query_id: str, user: str) -> str:
    """The caller's line for a failed run: class + query id; the full text to the server log.
    A group below an aggregation policy's size (`on_small_group: refuse`) is a refusal."""
    cls = error_class(e)
    refused = small_group_refusal(str(getattr(e, "desc", None) or e), query_id, user)
    if refused is not None:
        return str(refused)
    ERROR_LOG.error(
        "query %s (user %s) failed [%s]: %s", query_id, user, cls, getattr(e, "desc", None) or e
    )
    return f"statement failed: [{cls}] (query {query_id})"


def governed_frame(
    df: DataFrame, query_id: str, user: str, on_failure: Callable[[str], None] | None = None
) -> DataFrame:
    """`df` whose actions report failures as class + query id (see GovernedDataFrame);
    `on_failure` hears the error class first."""
    df.__class__ = _governed_class(type(df))
    df._lg_query_id, df._lg_user = query_id, user  # type: ignore[attr-defined]
    df._lg_on_failure = on_failure  # type: ignore[attr-defined]
    return df


_GOVERNED: dict[type, type] = {}
_ACTIONS = (
    "collect",
    "take",
    "head",
    "first",
    "tail",
    "count",
    "show",
    "toPandas",
    "toLocalIterator",
    "foreach",
    "foreachPartition",
)


def _governed_class(frame: type) -> type:
    """Built on first use (importing the session imports no pyspark) over the concrete
    DataFrame class Spark handed out (pyspark 4's is the classic one, not the abstract
    pyspark.sql.DataFrame); a frame already governed keeps its class."""
    if frame in _GOVERNED.values():
        return frame
    found = _GOVERNED.get(frame)
    if found is not None:
        return found

    def wrap(name: str) -> Callable[..., Any]:
        base = getattr(frame, name)

        def action(self: Any, *args: Any, **kw: Any) -> Any:
            try:
                return base(self, *args, **kw)
            except LakegateError:
                raise
            except Exception as e:
                if self._lg_on_failure is not None:
                    self._lg_on_failure(error_class(e))
                raise failed_run(e, self._lg_query_id, self._lg_user) from None

        action.__name__ = name
        action.__doc__ = base.__doc__
        return action

    cls = type(
        "GovernedDataFrame",
        (frame,),
        {
            "__doc__": "A governed statement's result: an error while producing rows (which may "
            "quote values) reaches the caller as its error class and query id only. "
            "Frames derived from it (df.limit(...), df.select(...)) are plain "
            "DataFrames again.",
            **{name: wrap(name) for name in _ACTIONS},
        },
    )
    _GOVERNED[frame] = cls
    return cls


@contextlib.contextmanager
def tagged_commits(query_id: str) -> Iterator[None]:
    """Every Delta commit a command run meanwhile on this thread makes (`run_analyzed`)
    carries ``lakegate:queryId=<id>`` as its ``userMetadata``, so an intent whose outcome
    never made it to the audit log can be resolved from the table's log
    (audit/landing.py). The setting is made in a clone of the session per command
    (`commands_with`), never in the session: concurrent writes of one process each tag
    their own commits and do not take turns."""
    with commands_with({COMMIT_TAG_CONF: commit_tag(query_id)}):
        yield


def run_planned(
    planned: Planned,
    spark: SparkSession,
    catalog: Catalog,
    *,
    verify: bool,
    analyze: Analyze,
    refresh_derived: Callable[[], None],
    sources: PinnedSources | None = None,
    noted: Callable[[Planned], None] | None = None,
    row_limit: int | None = None,
) -> DataFrame:
    """Run a plan: its actions around its SQL, the SQL's analyzed plan verified first
    (`refresh_derived` re-lists the derived tables' files before they are read; `sources`
    makes the plan's pinned sources; `noted` puts the tags a write carries on record once
    the analysed plan says which, before any effect). `row_limit`: at most that many rows,
    a query's limit put on before its one optimization (a `limit` on the optimized frame
    would optimize the whole plan again, Delta's file skipping with it)."""
    if planned.derived:
        refresh_derived()
    ensure_pins(sources, spark, planned.pins)
    execute_actions(planned.before, catalog, spark)
    if planned.history is not None:
        return _limited(read_history(planned.history, spark), row_limit)
    if planned.local_rows is not None:
        return _limited(spark.createDataFrame(planned.local_rows, planned.local_schema), row_limit)
    assert planned.sql is not None
    # parsed as checked (governance/verify/guard.py); what is verified is the very plan that runs
    if planned.is_query:
        df = query_frame(spark, planned.sql)
        if verify:
            with PHASE_SECONDS.labels("verify").time():
                analyzed = df._jdf.queryExecution().analyzed()
                note_reads(planned, verify_plan(analyzed, planned.expected, analyze))
        df = _limited(df, row_limit)  # over the verified plan: only fewer of its rows
        # optimize now, inside the governed error handling; execution reuses this plan
        df._jdf.queryExecution().optimizedPlan()
    else:
        plan = analyze_only(spark, planned.sql)
        if verify:
            with PHASE_SECONDS.labels("verify").time():
                note_reads(planned, verify_plan(plan, planned.expected, analyze))
        if planned.carry is not None:
            _carry_tags(planned, plan, catalog, spark, noted)
        df = _limited(run_analyzed(spark, plan), row_limit)
    execute_actions(planned.after, catalog, spark)
    return df


def _limited(df: DataFrame, row_limit: int | None) -> DataFrame:
    return df if row_limit is None else df.limit(row_limit)


def _carry_tags(
    planned: Planned,
    plan: Any,
    catalog: Catalog,
    spark: SparkSession,
    noted: Callable[[Planned], None] | None,
) -> None:
    """The tags a CTAS or INSERT ... SELECT carries, by lineage in the analysed plan that
    is about to run (governance.planning.lineage): refused when two of one column's masks
    cannot be ordered, then on record, then (INSERT) in the target's governed state before
    the data or (CTAS) registered with the table."""
    carry = planned.carry
    assert carry is not None
    props = carried(carry, lineage_of(plan, carry.field))
    refuse_unorderable(carry.masks, carry.target, props, carry.existing)
    planned.propagated = props
    if noted is not None:
        noted(planned)
    if planned.target is not None:
        execute_actions(carry_tags(planned.target.table, props), catalog, spark)
        return
    tags: dict[str, set[str]] = {}
    for p in props:
        tags.setdefault(p.column, set()).update(p.tags)
    named = tuple((c, tuple(sorted(t))) for c, t in sorted(tags.items()))
    planned.after = tuple(
        replace(a, tags=named) if isinstance(a, RegisterTable) else a for a in planned.after
    )


def note_reads(planned: Planned, verified: Verified) -> None:
    """The columns the verified plan reads of each of the plan's views, for its audit lines
    (docs/audit-columns.md)."""
    owners, views = planned.expected.owners, planned.expected.views
    for loc, i, positions in columns_used(verified):
        planned.add_read(owners[loc][i], views[loc][i][1], positions)


def spark_error(
    e: Exception, planned: Planned | None, query_id: str, user: str
) -> str | AccessDenied:
    """Spark's error as class + query id (its full text to the server log), Spark's first
    line for an allow-listed analysis error, or AccessDenied when it names a hidden
    column."""
    from pyspark.errors import AnalysisException

    raw = str(getattr(e, "desc", None) or e)
    # a row the write's check refused at run time; an analysis error's text may quote the
    # check itself (Spark 4 prints the unresolved plan), which is no violation
    if ROW_FILTER_VIOLATION in raw and planned is not None and not isinstance(e, AnalysisException):
        t = planned.target
        return AccessDenied(
            f"access denied: a row written by user {user} is outside their row filter "
            f"on {planned.target_name}; nothing was written",
            cmd=planned.cmd,
            tables=(planned.target_name or "",),
            policies=t.policy_ids if t else (),
            row_filters=tuple(f.id for f in t.row_filters) if t else (),
        )
    if not isinstance(e, AnalysisException) or error_class(e) not in READABLE_ANALYSIS_ERRORS:
        return failure_message(e, query_id, user)
    lines = [ln for ln in raw.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else type(e).__name__
    if first.startswith("An error occurred while calling") and len(lines) > 1:
        first = lines[1].lstrip(": ")
    first = first.split("; line ")[0].split(";\n")[0]
    if planned is not None:
        m = re.search(r"name `([^`]+)`(?:\.`([^`]+)`)? cannot be resolved", first)
        if m:
            hidden = planned.hidden_column(m.group(2) or m.group(1)) or planned.hidden_column(
                m.group(1)
            )
            if hidden is not None:
                return AccessDenied(
                    f"access denied: user {user} may not read column {hidden[1]} of "
                    f"table {hidden[0]}",
                    cmd=planned.cmd,
                    tables=(hidden[0],),
                )
    readable = readable_line(error_class(e), first, message_parameters(e), _seen(planned))
    if readable is None:
        return failure_message(e, query_id, user)
    for v in planned.placeholders if planned is not None else ():
        readable = readable.replace(v, "")
    return f"statement failed: {readable[:500]}"


def message_parameters(e: BaseException) -> dict[str, str]:
    """Spark's message parameters of `e` (its structured fields), {} if it has none."""
    get = getattr(e, "getMessageParameters", None)
    try:
        params = get() if callable(get) else None
    except Exception:
        params = None
    return {str(k): str(v) for k, v in (params or {}).items()}


def _seen(planned: Planned | None) -> Seen:
    """What the caller may be told of: nothing but Spark's own words without a plan."""
    return planned.seen() if planned is not None else seen_by(None, [], [])


def analyze_only(spark: SparkSession, sql: str) -> Any:
    """Spark's analyzed plan of a statement without running it (commands run eagerly in
    spark.sql, so they are parsed and analysed directly, with the session active on the
    thread: Delta resolves `delta.`path`` through it, and a pool thread may have none)."""
    return analyzed_command(spark, sql)
