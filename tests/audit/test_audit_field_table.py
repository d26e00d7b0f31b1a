"""The audit field table renders every line byte for byte as the writer did before it existed.

`golden_lines.txt` was written by the line renderer of `audit/log.py` as it stood before the
fields became one table (`audit.format.FIELDS`), and `golden_records.json` is what `to_record`
and `to_json` made of those lines then; the chain hashes the bytes, so rendering the same
events through the table must give the same lines, hashes included, and reading them back
the same records.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from audit import AuditEvent
from audit.format import FIELD_FILTERS, LAYOUTS, RECORD_FIELDS, parse_complete, to_record
from audit.handler import AuditFormatter
from audit.log import render_line
from audit.query import Filters

GOLDEN = Path(__file__).with_name("golden_lines.txt")
GOLDEN_RECORDS = Path(__file__).with_name("golden_records.json")
#: `system.access.audit`'s columns as they were before the table (column order is API).
COLUMNS_BEFORE = (
    *("ts:timestamp", "allowed:boolean", "user:string", "ugi:string", "ip:string"),
    *("cmd:string", "src:string", "dst:string", "proto:string", "callerContext:string"),
    *("succeeded:boolean", "eventId:string", "queryId:string", "stmtHash:string"),
    *("columns:array<string>", "masked:array<struct<column:string,mask:string>>"),
    *("rowFilters:array<string>", "policies:array<string>", "reason:string"),
    *("durationMs:bigint", "policyVersion:string", "phase:string", "writer:string"),
    *("seq:bigint", "prevHash:string", "hash:string", "file:string"),
)
WRITER = "host-1:4242:0badcafe"
T0 = datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)


def representative_events() -> list[AuditEvent]:
    """Every value shape a line can hold: v1 and extended layouts, empty and escaped values,
    lists and pairs with separators inside, a service acting for a user, odd users and IPs."""
    return [
        AuditEvent(
            allowed=True,
            user="alice",
            auth="TOKEN",
            cmd="select",
            src="main.sales.orders",
            succeeded=True,
            query_id="q-1",
            stmt_hash="sha256:" + "ab" * 32,
            columns=["id", "region", "email"],
            masked=[("email", "hash")],
            row_filters=["emea-only"],
            policies=["analysts-read", "emea-only", "hide-pii"],
            duration_ms=812,
            ts=T0,
            event_id="e" * 32,
        ),
        AuditEvent(
            allowed=False,
            user="bob",
            cmd="refused",
            reason='table "x"\tnot\nallowed: é ☃ 𝄞',
            policy_version="sha256:" + "cd" * 32,
            ts=T0.replace(microsecond=999999),
            event_id="f" * 32,
        ),
        AuditEvent(
            allowed=True,
            user="svc(etl)",
            auth="KERBEROS(x)",
            via="gateway(1)",
            via_auth="TO(KEN)",
            ip="/10.0.0.7",
            proto="rest",
            cmd="listTables",
            caller_context="job,42:null",
            succeeded=True,
            columns=["a,b", "", "null", "c\\d"],
            masked=[("e:mail", "ha,sh"), ("", "dropped"), ("phone", "")],
            row_filters=["f,1"],
            policies=["p:1", "null"],
            duration_ms=0,
            phase="intent",
            ts=datetime(2026, 1, 2, 3, 4, 5),
            event_id="null",
        ),
        AuditEvent(
            allowed=True,
            user="null",
            auth="",
            ip="",
            proto="connect",
            cmd="insert",
            src="main.s.t",
            dst="main.s.u",
            succeeded=False,
            query_id="q-2",
            duration_ms=-3,
            policy_version="git:3f2a",
            phase="outcome",
            ts=T0,
            event_id="1" * 32,
        ),
        AuditEvent(
            allowed=True,
            user="",
            cmd="policyReload",
            via="proxy",
            ip="::1",
            caller_context="\x7f\x00",
            phase="recovered",
            succeeded=True,
            ts=T0,
            event_id="2" * 32,
        ),
    ]


def render_chain(events: list[AuditEvent]) -> list[str]:
    prefix = AuditFormatter().line_prefix
    lines, prev = [], None
    for seq, event in enumerate(events, start=1):
        assert event.ts is not None
        line, prev = render_line(event, prefix(event.ts), WRITER, seq, prev)
        lines.append(line)
    return lines


def test_field_table_renders_the_golden_lines_byte_for_byte() -> None:
    golden = GOLDEN.read_text("ascii").splitlines()
    assert render_chain(representative_events()) == golden


def test_golden_lines_read_back_to_the_golden_records() -> None:
    """Every key a record had before the table, with the same value, in the same order (a
    field added since adds its key, empty on these lines)."""
    golden = json.loads(GOLDEN_RECORDS.read_text("ascii"))
    for number, line in enumerate(GOLDEN.read_text("ascii").splitlines(), start=1):
        parsed = parse_complete(line)
        assert parsed is not None
        values, link = parsed
        assert link.hash_ok and link.seq == number
        record = json.loads(json.dumps(to_record(values, "audit.log", number).to_json()))
        before = golden[number - 1]
        assert {key: record[key] for key in before} == before
        assert [key for key in record if key in before] == list(before)


def test_audit_table_keeps_its_columns_in_order() -> None:
    """The columns of `system.access.audit` before the table, same types, same order."""
    from audit.spark_table import AUDIT_SCHEMA

    names = {column.split(":")[0] for column in COLUMNS_BEFORE}
    columns = [f"{f.name}:{f.dataType.simpleString()}" for f in AUDIT_SCHEMA.fields]
    assert tuple(c for c in columns if c.split(":")[0] in names) == COLUMNS_BEFORE


def test_line_key_orders_are_the_contracts() -> None:
    """v1 (docs/spec/audit-format.md), with the first extension, with the second
    (`readVersion` on policyRead lines; audit/README.md), and with the third (`issuer`,
    `subject` of an identity provider's token)."""
    v1 = (
        *("allowed", "ugi", "ip", "cmd", "src", "dst", "perm", "proto", "callerContext"),
        *("succeeded", "eventId", "ts", "queryId", "stmtHash", "columns", "masked"),
        *("rowFilters", "policies", "reason", "durationMs", "writer", "seq", "prevHash", "hash"),
    )
    extended = (*v1[:20], "policyVersion", "phase", *v1[20:])
    read = (*v1[:20], "policyVersion", "phase", "readVersion", *v1[20:])
    who = (*read[:23], "issuer", "subject", "resource", *v1[20:])
    assert (who, read, extended, v1) == LAYOUTS


def test_every_kind_of_record_field_has_a_column_in_the_audit_table() -> None:
    from audit.spark_table import _COLUMN_OF_KIND

    assert {f.kind.name for f in RECORD_FIELDS} <= set(_COLUMN_OF_KIND)


def test_audit_query_offers_one_option_per_filter_row() -> None:
    from cli.audit import cmd_query

    options = {opt for param in cmd_query.params for opt in param.opts}
    for name, field in FIELD_FILTERS.items():
        assert field.filter is not None and field.filter.name == name
        assert f"--{name.replace('_', '-')}" in options
    assert {"user", "cmd", "caller_context", "column", "policy_version"} <= set(FIELD_FILTERS)


def test_filters_refuse_a_field_the_table_does_not_filter_on() -> None:
    with pytest.raises(TypeError, match=r"^unknown audit filter: stmt_hash$"):
        Filters(stmt_hash="sha256:00")


def test_field_filters_match_as_their_rows_say() -> None:
    golden = GOLDEN.read_text("ascii").splitlines()
    records = []
    for number, line in enumerate(golden, start=1):
        parsed = parse_complete(line)
        assert parsed is not None
        records.append(to_record(parsed[0], "audit.log", number))

    def kept(**kw: str) -> list[int]:
        return [r.line for r in records if Filters(**kw).keeps(r)]

    assert kept(cmd="LISTTABLES") == [3]  # case-insensitive
    assert kept(column="REGION") == [1]  # an item of the list, case-insensitive
    assert kept(policy_version="git:") == [4]  # a prefix
    assert kept(caller_context="job,42:null") == [3]  # exact
    assert kept(user="svc(etl)") == [3]
    assert kept(user="svc") == []
