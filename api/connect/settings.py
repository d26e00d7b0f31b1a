"""The gateway's settings allow-lists: what a Spark Connect client may set and read.

No setting a client can set is free text: each takes booleans or whole numbers only, so no
setting can carry text into a statement, a plan or a file path (and Spark's `${...}`
variable substitution is off in every session: governance/verify/guard.py). `spark.remote`, which
PySpark's builder sets on every new session (its value holds the connection string and
token), is answered by the gateway and never reaches the backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pyspark.sql.connect.proto import base_pb2

from api.connect.compat import CLIENT_SETTINGS
from governance.errors import AccessDenied

#: Settings a client may change in its backend session, each with the only values it takes:
#: none is free text, so no setting can carry text into a statement, a plan or a path (and
#: variable substitution is off everywhere: governance/verify/guard.py). Everything else is
#: refused: governance relies on the rest (ANSI mode; the time zone moves row-filter
#: boundaries; parser and legacy settings change what a checked text means).
_BOOL = re.compile(r"^(?i:true|false)$")
_COUNT = re.compile(r"^-?[0-9]{1,9}$")
SETTABLE_CONF: dict[str, re.Pattern[str]] = {
    # PySpark's notebook display of DataFrames (_repr_html_): read by the client only
    "spark.sql.repl.eagerEval.enabled": _BOOL,
    "spark.sql.repl.eagerEval.maxNumRows": _COUNT,
    "spark.sql.repl.eagerEval.truncate": _COUNT,
    # how the client converts Arrow batches to pandas: client-side
    "spark.sql.execution.pandas.convertToArrowArraySafely": _BOOL,
    # rows per Arrow batch of a result: the size of the answer's chunks, not its content
    "spark.sql.execution.arrow.maxRecordsPerBatch": _COUNT,
}
#: Settings the gateway answers itself and never forwards: PySpark's builder sets
#: `spark.remote` (the connection string, token included) on every new session. Setting it
#: is accepted and forgotten; reading it answers "not set".
GATEWAY_CONF = frozenset({"spark.remote"})
#: Settings PySpark 4 reads that a Spark 3.5 backend does not have: answered by the gateway
#: with Spark 4's defaults, read-only (compat.py says why each is client-side only).
LOCAL_ANSWERS: dict[str, str] = CLIENT_SETTINGS
#: Settings a client may read: the settable ones, those PySpark's client reads to convert
#: results (its own Arrow, pandas, REPL and PySpark families below, and the exact keys), and
#: never storage, catalog or credential settings.
READABLE_PREFIXES = (
    "spark.sql.execution.arrow.",  # Arrow batch sizes and fallbacks the client converts with
    "spark.sql.execution.pandas.",  # pandas conversion options the client applies
    "spark.sql.repl.",  # notebook display options the client applies
    "spark.sql.pyspark.",  # PySpark's type inference options for createDataFrame
    "spark.sql.execution.pyspark.",  # how PySpark 4 turns results into Python values
)
READABLE_CONF = (
    frozenset(SETTABLE_CONF)
    | GATEWAY_CONF
    | {
        # results' timestamps are shown in the session's time zone (read-only here)
        "spark.sql.session.timeZone",
        # how large a createDataFrame may be before the client caches it server-side
        "spark.sql.session.localRelationCacheThreshold",
        # createDataFrame's inference of dicts and arrays
        "spark.sql.pyspark.inferNestedDictAsStruct.enabled",
        "spark.sql.pyspark.legacy.inferArrayTypeFromFirstElement.enabled",
        # the timestamp type the client infers for Python datetimes
        "spark.sql.timestampType",
        # whether the client sends Python UDFs as Arrow (UDFs are refused; read-only)
        "spark.sql.execution.pythonUDF.arrow.enabled",
        "spark.sql.execution.pythonUDTF.arrow.enabled",
        # PySpark 4 reads it before building any expression, to decide whether to attach
        # its call sites: a client switch no plan or SQL reads (compat.INERT drops them)
        "spark.python.sql.dataFrameDebugging.enabled",
    }
    | frozenset(LOCAL_ANSWERS)
)
_VALUES = {_BOOL: "true or false", _COUNT: "a whole number"}
#: Distinct read requests a session remembers the answer of (the readable prefixes admit
#: many keys; past this, reads are forwarded every time).
MAX_REMEMBERED = 32


def checked_keys(kind: str | None, sub: Any) -> list[str]:
    """The keys of a Config operation, each on its allow-list (a set value of its kind);
    AccessDenied with one line otherwise."""
    if kind == "set":
        keys, allowed = [p.key for p in sub.pairs], SETTABLE_CONF
        for p in sub.pairs:
            check = SETTABLE_CONF.get(p.key)
            if check is not None and not check.match(p.value):
                raise AccessDenied(f"configuration {p.key} takes {_VALUES[check]}; refused")
    elif kind == "unset":
        keys, allowed = list(sub.keys), SETTABLE_CONF
    elif kind == "get_with_default":
        keys, allowed = [p.key for p in sub.pairs], READABLE_CONF
    elif kind in ("get", "get_option", "is_modifiable"):
        keys, allowed = list(sub.keys), READABLE_CONF
    else:
        raise AccessDenied(
            f"configuration operation {kind or 'unset'} is refused; "
            "settings are read and set by name"
        )
    for k in keys:
        if k in allowed or k in GATEWAY_CONF:
            continue
        if allowed is READABLE_CONF and k.startswith(READABLE_PREFIXES):
            continue
        raise AccessDenied(
            f"configuration {k} is not on the gateway's allow-list for {kind}; refused"
        )
    return keys


def answered_here(key: str) -> bool:
    """A key the gateway answers itself and never forwards."""
    return key in GATEWAY_CONF or key in LOCAL_ANSWERS


def split_gateway_keys(op: Any, kind: str) -> dict[str, str]:
    """Take the keys the gateway answers itself out of the request (they are never
    forwarded); the defaults a `get_with_default` gave them."""
    sub = getattr(op, kind)
    defaults = {
        p.key: p.value
        for p in (sub.pairs if kind == "get_with_default" else ())
        if p.key in GATEWAY_CONF and p.HasField("value")
    }
    if kind in ("set", "get_with_default"):
        keep = [p for p in sub.pairs if not answered_here(p.key)]
        del sub.pairs[:]
        sub.pairs.extend(keep)
    else:
        keep_keys = [k for k in sub.keys if not answered_here(k)]
        del sub.keys[:]
        sub.keys.extend(keep_keys)
    return defaults


def gateway_answers(backend: Any, kind: str, keys: list[str], defaults: dict[str, str]) -> Any:
    """The backend's answer with the gateway's own keys put back in request order:
    `spark.remote` never set (a default read gives the default) and modifiable; the local
    answers with their fixed values, not modifiable."""
    if kind in ("set", "unset") or not any(answered_here(k) for k in keys):
        return backend
    theirs = iter(backend.pairs)
    out = base_pb2.ConfigResponse(session_id=backend.session_id, warnings=backend.warnings)
    for k in keys:
        if not answered_here(k):
            out.pairs.append(next(theirs))
        elif kind == "is_modifiable":
            out.pairs.add(key=k, value="true" if k in GATEWAY_CONF else "false")
        elif k in LOCAL_ANSWERS:
            out.pairs.add(key=k, value=LOCAL_ANSWERS[k])
        elif k in defaults:
            out.pairs.add(key=k, value=defaults[k])
        else:
            out.pairs.add(key=k)
    return out


def config_answer(
    op: Any,
    kind: str,
    keys: list[str],
    memo: dict[bytes, Any] | None,
    session_id: str,
    forward: Callable[[], Any],
) -> Any:
    """The answer to an allowed Config operation: the gateway's own keys answered here, the
    rest by the backend (`forward`). A read of keys no caller can set (none of
    SETTABLE_CONF) is answered from the session's `memo` when the same read was answered
    before: nothing a caller does changes those values in its backend session (the guard
    pins other families), so the remembered answer is the backend's, without the hop
    (the stock client reads the same keys around every collect)."""
    remembered = None
    if memo is not None and kind in ("get", "get_with_default"):
        sub = getattr(op, kind)
        names = [p.key for p in sub.pairs] if kind == "get_with_default" else list(sub.keys)
        if not any(k in SETTABLE_CONF for k in names):
            remembered = kind.encode() + b"\0" + sub.SerializeToString(deterministic=True)
            hit = memo.get(remembered)
            if hit is not None:
                return hit
    defaults = split_gateway_keys(op, kind)
    answer = base_pb2.ConfigResponse(session_id=session_id)
    if any(not answered_here(k) for k in keys):
        answer = forward()
    out = gateway_answers(answer, kind, keys, defaults)
    if remembered is not None and memo is not None and len(memo) < MAX_REMEMBERED:
        memo[remembered] = out
    return out
