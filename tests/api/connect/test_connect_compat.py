"""Fields of a newer Spark Connect protocol than the gateway's: translated, dropped or refused.

The requests are built with this line's proto and the newer client's fields appended as raw
wire bytes (field number, type, value), exactly as a PySpark 4 client's request arrives at
a gateway reading it with the Spark 3.5 proto. The stock PySpark 4 clients themselves run
the same paths in test_connect_stock_clients.py.
"""

from __future__ import annotations

import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from pyspark.sql.connect.proto import base_pb2, commands_pb2, expressions_pb2, relations_pb2

from api.connect import compat
from governance.errors import AccessDenied


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    """One wire field: a varint for an int, length-delimited for bytes."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _with(msg, *fields: bytes):
    """`msg` parsed again with extra (unknown to this proto) fields."""
    return type(msg).FromString(msg.SerializeToString() + b"".join(fields))


def _request(command: commands_pb2.Command | None = None, root=None) -> base_pb2.ExecutePlanRequest:
    req = base_pb2.ExecutePlanRequest(session_id="00000000-0000-0000-0000-000000000000")
    if command is not None:
        req.plan.command.CopyFrom(command)
    if root is not None:
        req.plan.root.CopyFrom(root)
    return req


def _sql_command(input_relation: bytes) -> commands_pb2.Command:
    cmd = commands_pb2.Command()
    cmd.sql_command.CopyFrom(_with(commands_pb2.SqlCommand(), _field(6, input_relation)))
    return cmd


def test_spark4_sql_command_input_is_read_as_its_sql_text() -> None:
    rel = relations_pb2.Relation(sql=relations_pb2.SQL(query="SELECT count(*) FROM t"))
    origin = _field(3, _field(1, _field(1, b"sql")))  # RelationCommon.origin.python_origin
    rel_bytes = _with(rel, _field(1, origin)).SerializeToString()
    req = _request(_sql_command(rel_bytes))
    compat.accept(req)
    assert req.plan.command.sql_command.sql == "SELECT count(*) FROM t"
    assert list(UnknownFieldSet(req.plan.command.sql_command)) == []


@pytest.mark.parametrize("number", [4, 5])
def test_spark4_sql_parameters_are_refused(number: int) -> None:
    arg = expressions_pb2.Expression(literal=expressions_pb2.Expression.Literal(integer=1))
    sql = _with(relations_pb2.SQL(query="SELECT ?"), _field(number, arg.SerializeToString()))
    rel = relations_pb2.Relation(sql=sql)
    with pytest.raises(AccessDenied, match=r"^SQL parameters are not governed; inline the values$"):
        compat.accept(_request(_sql_command(rel.SerializeToString())))


def test_spark4_sql_with_dataframe_arguments_is_refused() -> None:
    with_relations = _field(41, _field(1, relations_pb2.Relation().SerializeToString()))
    with pytest.raises(AccessDenied, match=r"^spark.sql\(...\) with DataFrame arguments"):
        compat.accept(_request(_sql_command(with_relations)))


def test_a_sql_command_with_both_forms_is_refused() -> None:
    rel = relations_pb2.Relation(sql=relations_pb2.SQL(query="SELECT 2"))
    cmd = _sql_command(rel.SerializeToString())
    cmd.sql_command.sql = "SELECT 1"
    with pytest.raises(AccessDenied, match=r"^a SQL command carries its statement once; refused$"):
        compat.accept(_request(cmd))


def test_a_newer_field_that_changes_the_answer_is_refused() -> None:
    """try_cast from PySpark 4 is a Cast with eval_mode TRY (field 4): read as a plain cast
    it would fail or answer differently, so it is refused, naming the field."""
    cast = expressions_pb2.Expression.Cast(
        expr=expressions_pb2.Expression(
            unresolved_attribute=expressions_pb2.Expression.UnresolvedAttribute(
                unparsed_identifier="amount"
            )
        ),
        type_str="int",
    )
    expr = expressions_pb2.Expression(cast=_with(cast, _field(4, 3)))
    root = relations_pb2.Relation(project=relations_pb2.Project(expressions=[expr]))
    with pytest.raises(AccessDenied) as e:
        compat.accept(_request(root=root))
    assert str(e.value) == (
        "field 4 of Expression.Cast comes from a Spark Connect client newer than the protocol "
        "Lakegate governs (Spark 3.5's) and is not governed; refused"
    )


def test_call_sites_and_the_session_echo_are_dropped() -> None:
    origin = _field(1, _field(1, _field(1, b"col")))  # ExpressionCommon.origin.python_origin
    attr = expressions_pb2.Expression(
        unresolved_attribute=expressions_pb2.Expression.UnresolvedAttribute(
            unparsed_identifier="id"
        )
    )
    project = relations_pb2.Project(expressions=[_with(attr, _field(18, origin))])
    root = relations_pb2.Relation(project=project)
    root.common.CopyFrom(_with(relations_pb2.RelationCommon(), _field(3, origin)))
    req = _with(_request(root=root), _field(8, b"server-session"))
    compat.accept(req)
    assert (
        req.SerializeToString()
        == _request(
            root=relations_pb2.Relation(
                common=relations_pb2.RelationCommon(),
                project=relations_pb2.Project(expressions=[attr]),
            )
        ).SerializeToString()
    )


@pytest.mark.parametrize(("flag", "refused"), [(0, False), (1, True)])
def test_metadata_column_flag_is_dropped_only_when_false(flag: int, refused: bool) -> None:
    attr = expressions_pb2.Expression.UnresolvedAttribute(unparsed_identifier="_metadata")
    expr = expressions_pb2.Expression(unresolved_attribute=_with(attr, _field(3, flag)))
    req = _request(root=relations_pb2.Relation(project=relations_pb2.Project(expressions=[expr])))
    if refused:
        with pytest.raises(AccessDenied, match=r"^field 3 of Expression\.UnresolvedAttribute "):
            compat.accept(req)
    else:
        compat.accept(req)
        assert req.plan.root.project.expressions[0].unresolved_attribute.ByteSize() == len(
            attr.SerializeToString()
        )


def test_spark4_local_relation_sizes_are_answered_by_the_gateway() -> None:
    from api.connect.settings import checked_keys, gateway_answers, split_gateway_keys

    keys = ["spark.sql.session.timeZone", *compat.CLIENT_SETTINGS, "spark.remote"]
    op = base_pb2.ConfigRequest.Operation(get=base_pb2.ConfigRequest.Get(keys=keys))
    assert checked_keys("get", op.get) == keys
    split_gateway_keys(op, "get")
    assert list(op.get.keys) == ["spark.sql.session.timeZone"]  # all the backend sees
    backend = base_pb2.ConfigResponse(session_id="s")
    backend.pairs.add(key="spark.sql.session.timeZone", value="UTC")
    answer = gateway_answers(backend, "get", keys, {})
    assert [(kv.key, kv.value if kv.HasField("value") else None) for kv in answer.pairs] == [
        ("spark.sql.session.timeZone", "UTC"),
        *compat.CLIENT_SETTINGS.items(),
        ("spark.remote", None),
    ]


def test_a_backend_answer_loses_the_server_side_session_id() -> None:
    """Spark 4's backend stamps its answers with a server-side session id (field 15) and the
    gateway's own answers carry none; a 4.x client that sees the id come and go refuses the
    session, so answers go out as a server of the governed protocol sends them."""
    plain = base_pb2.ExecutePlanResponse(session_id="s", operation_id="o")
    stamped = _with(plain, _field(15, b"b3c0c0a2-0000-4000-8000-000000000000"))
    assert compat.answer(stamped) is True
    assert stamped.SerializeToString() == plain.SerializeToString()
