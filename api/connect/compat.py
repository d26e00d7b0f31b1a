"""Requests from Spark Connect clients newer than the protocol governed: refused field by field.

The gateway governs one protocol on both Spark lines: Spark 3.5's (the field numbers of
every message, `protocol35.json`, generated from pyspark 3.5.8's proto), so both lines give
the same answers. On Spark 3.5 a field a newer client sets arrives as an *unknown field*:
the governing walk (relations.py) never sees it and the backend ignores it, so passing it
on would run something other than what the client asked (a `try_cast` run as a `cast`, a
rename not renamed, grouping sets dropped). On Spark 4 the same field is known to the proto
and the backend would act on it, unwalked. Either way, every field outside the governed
protocol, anywhere in a request, is refused with one line, except the few below, each with
the reason it changes no answer:

- translated: Spark 4's `spark.sql(q)` sends the query as `SqlCommand.input`, a `sql`
  relation, instead of `SqlCommand.sql`; a plain one becomes `sql` (parameters and
  DataFrame arguments are refused as before);
- dropped (INERT): the client's echo of a server-side session id and the client's own
  call sites for its error messages; and (INERT_WHEN_FALSE) flags left at their default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from pyspark.sql.connect.proto import relations_pb2

from api.connect.backend import MAX_MESSAGE_BYTES
from governance.errors import AccessDenied

MAX_DEPTH = 512
_ECHO = (
    "the client's echo of a server-side session id: the backend sends none, so it "
    "carries nothing the gateway or the backend reads"
)
_ORIGIN = (
    "the client's own call site (file, line, function name) for its error messages; "
    "it takes no part in planning or execution"
)
#: Unknown fields dropped before the request is governed, with the reason it is safe.
INERT: dict[tuple[str, int], str] = {
    ("spark.connect.ExecutePlanRequest", 8): _ECHO,
    ("spark.connect.AnalyzePlanRequest", 17): _ECHO,
    ("spark.connect.ConfigRequest", 8): _ECHO,
    ("spark.connect.InterruptRequest", 7): _ECHO,
    ("spark.connect.ReattachExecuteRequest", 6): _ECHO,
    ("spark.connect.ReleaseExecuteRequest", 7): _ECHO,
    ("spark.connect.ExecutePlanRequest.RequestOption", 2): "result_chunking_options: asks "
    "the server to split large Arrow batches; the backend sends whole batches, which the "
    "client reads as batches of one chunk (as from any server before Spark 4.1)",
    ("spark.connect.RelationCommon", 3): _ORIGIN,
    ("spark.connect.Expression", 18): _ORIGIN,  # ExpressionCommon: only `origin`
}
#: Unknown boolean fields dropped when false (the proto default, what an older client means
#: by leaving them out); when true they are refused like any other unknown field.
INERT_WHEN_FALSE: dict[tuple[str, int], str] = {
    # PySpark 4 sets it on every column reference; true only for df.metadataColumn(...),
    # which reads file metadata the gateway refuses
    ("spark.connect.Expression.UnresolvedAttribute", 3): "is_metadata_column",
}
_PARAMETERS = "SQL parameters are not governed; inline the values"
#: Unknown fields refused with a line of their own (the rest get the generic line).
REFUSED: dict[tuple[str, int], str] = {
    ("spark.connect.SQL", 4): _PARAMETERS,
    ("spark.connect.SQL", 5): _PARAMETERS,
    ("spark.connect.SqlCommand", 4): _PARAMETERS,
    ("spark.connect.SqlCommand", 5): _PARAMETERS,
    ("spark.connect.Relation", 41): "spark.sql(...) with DataFrame arguments is not governed; "
    "create a temporary view of the DataFrame and name it in the query",
    ("spark.connect.Plan", 3): "compressed plans are refused; the gateway reads every plan",
}
#: Settings PySpark 4 reads (`get`) that a Spark 3.5 backend does not have (its `get` fails
#: on them), most before it sends local data (createDataFrame): answered by the gateway
#: itself on both lines, and none is settable. The sizes bound the client's own upload
#: only (local data above localRelationCacheThreshold, a 3.5 setting read from the backend,
#: goes up as a cached relation, which is refused anyway); the two inference switches are
#: Spark 4's defaults and decide only how the client types its own Python data before
#: sending it.
CLIENT_SETTINGS: dict[str, str] = {
    "spark.sql.execution.pandas.inferPandasDictAsMap": "false",
    "spark.sql.pyspark.legacy.inferMapTypeFromFirstPair.enabled": "false",
    "spark.sql.session.localRelationSizeLimit": str(MAX_MESSAGE_BYTES),
    "spark.sql.session.localRelationChunkSizeRows": "10000",
    "spark.sql.session.localRelationChunkSizeBytes": str(16 * 1024 * 1024),
    "spark.sql.session.localRelationBatchOfChunksSizeBytes": str(MAX_MESSAGE_BYTES),
    # PySpark 4.2 asks whether to compress plans; the gateway reads every plan and refuses
    # compressed ones (REFUSED), so it answers "off", as the client concludes by itself
    # when the backend (3.5) does not know the settings
    "spark.connect.session.planCompression.threshold": "-1",
    "spark.connect.session.planCompression.defaultAlgorithm": "NONE",
}
_SQL_COMMAND = "spark.connect.SqlCommand"
_SQL_COMMAND_INPUT = 6
#: The governed protocol: each Spark Connect message's field numbers in Spark 3.5.
GOVERNED: dict[str, frozenset[int]] = {
    name: frozenset(numbers)
    for name, numbers in json.loads(Path(__file__).with_name("protocol35.json").read_text())[
        "fields"
    ].items()
}


@dataclass(frozen=True)
class _Field:
    """A field outside the governed protocol, as its wire form (an unknown field's view)."""

    field_number: int
    wire_type: int
    data: Any
    known: FieldDescriptor | None  # the proto's descriptor when this line's proto knows it


def accept(request: Message) -> None:
    """Refuse a request that carries a field outside the governed protocol (AccessDenied,
    one line); translate Spark 4's SQL command and drop the inert fields in place."""
    _check(request, 0)
    request.DiscardUnknownFields()


def _outside(msg: Message) -> list[_Field]:
    """The fields of `msg` outside the governed protocol: unknown to this line's proto, or
    known to it (Spark 4) but not to Spark 3.5's."""
    out = [_Field(f.field_number, f.wire_type, f.data, None) for f in UnknownFieldSet(msg)]
    governed = GOVERNED.get(msg.DESCRIPTOR.full_name)
    if governed is None:  # not a Spark Connect message (google.protobuf.Any's payload)
        return out
    for fd, value in msg.ListFields():
        if fd.number in governed:
            continue
        for v in value if fd.is_repeated else [value]:
            if isinstance(v, Message):
                out.append(_Field(fd.number, 2, v.SerializeToString(), fd))
            else:
                out.append(_Field(fd.number, 0 if isinstance(v, bool | int) else 2, v, fd))
    return out


def _check(msg: Message, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise AccessDenied(f"request nests more than {MAX_DEPTH} levels; refused")
    name = msg.DESCRIPTOR.full_name
    outside = _outside(msg)
    for f in outside:
        key = (name, f.field_number)
        if key == (_SQL_COMMAND, _SQL_COMMAND_INPUT):
            _sql_input(msg, f.data, outside, depth)
        elif key in INERT_WHEN_FALSE and f.wire_type == 0 and f.data == 0:
            pass
        elif key not in INERT:
            raise AccessDenied(
                REFUSED.get(key)
                or f"field {f.field_number} of {name.removeprefix('spark.connect.')} comes "
                "from a Spark Connect client newer than the protocol Lakegate governs "
                "(Spark 3.5's) and is not governed; refused"
            )
        if f.known is not None:
            msg.ClearField(f.known.name)  # dropped, as DiscardUnknownFields drops the rest
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            children = [v for v in value.values() if isinstance(v, Message)]
        elif fd.is_repeated:
            children = list(value)
        else:
            children = [value]
        for child in children:
            _check(child, depth + 1)


def _sql_input(cmd: Any, data: Any, outside: list[_Field], depth: int) -> None:
    """Spark 4's `SqlCommand.input`: a plain `sql` relation becomes `SqlCommand.sql`."""
    if cmd.sql or cmd.args or cmd.pos_args or sum(f.field_number == 6 for f in outside) != 1:
        raise AccessDenied("a SQL command carries its statement once; refused")
    try:
        rel = relations_pb2.Relation.FromString(bytes(data))
    except DecodeError:
        raise AccessDenied("a SQL command's input is not a relation; refused") from None
    _check(rel, depth + 1)  # parameters, DataFrame arguments: refused with their own line
    if rel.WhichOneof("rel_type") != "sql":
        raise AccessDenied("a SQL command's input must be a SQL statement; refused")
    if rel.sql.args or rel.sql.pos_args:
        raise AccessDenied(_PARAMETERS)
    cmd.sql = rel.sql.query


def answer(response: Message) -> bool:
    """Make a backend answer what a server of the governed protocol sends: its top-level
    fields outside the protocol cleared (Spark 4's server-side session id: the gateway
    answers some calls itself, without one, and a client that sees the id change refuses
    the session). False when the answer's own kind is outside the protocol (Spark 4's
    execution progress), which a result stream then skips, as it skips extensions."""
    governed = GOVERNED.get(response.DESCRIPTOR.full_name, frozenset())
    kept = True
    response.DiscardUnknownFields()  # nothing a governed server sends
    for fd, _ in response.ListFields():
        if fd.number in governed:
            continue
        if fd.containing_oneof is not None:
            kept = False
        else:
            response.ClearField(fd.name)
    return kept
