"""The v1 line format: exact bytes, escaping, null rules, and Hadoop-tool compatibility."""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit import AuditEvent, AuditLog, statement_hash
from audit.escape import (
    escape_java,
    escape_list,
    escape_pairs,
    escape_value,
    unescape_java,
    unescape_list,
    unescape_pairs,
    unescape_value,
)
from audit.format import KEYS, format_ugi, user_of_ugi
from audit.verify import verify

TS = datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)
STATEMENT = "SELECT id, region, email FROM main.sales.orders"


def hadoop_parse(line: str) -> tuple[str, list[tuple[str, str]]]:
    """Exactly how Hadoop's audit tools read a line: prefix at the first ': ', tabs, first '='."""
    prefix, message = line.split(": ", 1)
    fields = []
    for field in message.split("\t"):
        key, value = field.split("=", 1)
        fields.append((key, value))
    return prefix, fields


# Dynamometer's AuditLogDirectParser pattern for the log4j prefix.
DYNAMOMETER_LINE = re.compile(r"^([0-9-]+ [0-9:,]+) [^:]+: (.+)$")


def read_lines(directory: Path) -> list[str]:
    return (directory / "audit.log").read_text("ascii").splitlines()


def sample_event(**overrides: object) -> AuditEvent:
    values: dict[str, object] = {
        "allowed": True,
        "user": "alice",
        "auth": "TOKEN",
        "cmd": "select",
        "src": "main.sales.orders",
        "succeeded": True,
        "event_id": "4f1c2b7e9d8a4c3b",
        "ts": TS,
        "query_id": "q-0001",
        "stmt_hash": statement_hash(STATEMENT),
        "columns": ("id", "region", "email"),
        "masked": (("email", "hash"),),
        "row_filters": ("emea-only",),
        "policies": ("analysts-read", "emea-only", "hide-pii"),
        "duration_ms": 812,
    }
    values.update(overrides)
    return AuditEvent(**values)  # type: ignore[arg-type]


def test_exact_line_for_fixed_events(tmp_path: Path) -> None:
    with AuditLog(tmp_path, writer_id="host-1:4242:deadbeef") as log:
        log.write([sample_event(), sample_event(src="main.sales.customers", event_id="e2")])
    stmt = "sha256:" + hashlib.sha256(STATEMENT.encode()).hexdigest()
    first = (
        "2026-11-22 10:00:00,123 INFO lakegate.audit: allowed=true\tugi=alice (auth:TOKEN)"
        "\tip=/127.0.0.1\tcmd=select\tsrc=main.sales.orders\tdst=null\tperm=null\tproto=spark"
        "\tcallerContext=null\tsucceeded=true\teventId=4f1c2b7e9d8a4c3b"
        f"\tts=2026-11-22T10:00:00.123Z\tqueryId=q-0001\tstmtHash={stmt}"
        "\tcolumns=id,region,email\tmasked=email:hash\trowFilters=emea-only"
        "\tpolicies=analysts-read,emea-only,hide-pii\treason=null\tdurationMs=812"
        "\twriter=host-1:4242:deadbeef\tseq=1\tprevHash=null"
    )
    hash1 = hashlib.sha256(first.encode()).hexdigest()
    second = (
        first.replace("main.sales.orders", "main.sales.customers")
        .replace("eventId=4f1c2b7e9d8a4c3b", "eventId=e2")
        .replace("seq=1\tprevHash=null", f"seq=2\tprevHash={hash1}")
    )
    hash2 = hashlib.sha256((hash1 + second).encode()).hexdigest()
    assert read_lines(tmp_path) == [f"{first}\thash={hash1}", f"{second}\thash={hash2}"]
    raw = (tmp_path / "audit.log").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 2


def test_keys_in_contract_order_and_hdfs_first(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([sample_event()])
    _, fields = hadoop_parse(read_lines(tmp_path)[0])
    assert tuple(k for k, _ in fields) == KEYS
    assert [k for k, _ in fields[:8]] == [
        "allowed", "ugi", "ip", "cmd", "src", "dst", "perm", "proto",
    ]  # fmt: skip


def test_timestamp_is_utc_in_prefix_and_field(tmp_path: Path) -> None:
    local = datetime(2026, 11, 22, 11, 30, 5, 7000, tzinfo=timezone(timedelta(hours=1)))
    with AuditLog(tmp_path) as log:
        log.write([sample_event(ts=local)])
    line = read_lines(tmp_path)[0]
    assert line.startswith("2026-11-22 10:30:05,007 INFO lakegate.audit: ")
    assert "\tts=2026-11-22T10:30:05.007Z\t" in line


ESCAPES = [
    ("plain", "plain"),
    ('say "hi"', 'say \\"hi\\"'),
    ("back\\slash", "back\\\\slash"),
    ("tab\there", "tab\\there"),
    ("line\nbreak", "line\\nbreak"),
    ("cr\rx", "cr\\rx"),
    ("bs\bff\f", "bs\\bff\\f"),
    ("\x00\x1f", "\\u0000\\u001F"),
    ("\x7f", "\\u007F"),
    ("é", "\\u00E9"),
    ("日本", "\\u65E5\\u672C"),
    ("😀", "\\uD83D\\uDE00"),
    ("\u2028", "\\u2028"),
    ("a=b", "a=b"),
    ("a,b", "a,b"),
    ("'single'", "'single'"),
    ("/path:x", "/path:x"),
]


@pytest.mark.parametrize(("text", "escaped"), ESCAPES)
def test_escape_java_table(text: str, escaped: str) -> None:
    assert escape_java(text) == escaped
    assert unescape_java(escaped) == text


@pytest.mark.parametrize(
    ("value", "written"),
    [(None, "null"), ("", "null"), ("null", "\\u006Eull"), ("Null", "Null"), ("x", "x")],
)
def test_null_rules_for_values(value: str | None, written: str) -> None:
    assert escape_value(value) == written
    assert unescape_value(written) == (value or None)


def test_list_and_pair_escaping() -> None:
    assert escape_list(("a,b", "c")) == "a\\u002Cb,c"
    assert unescape_list("a\\u002Cb,c") == ("a,b", "c")
    assert escape_list(()) == "null" and unescape_list("null") == ()
    assert escape_list(("", "")) == "null"  # empty items carry nothing and are dropped
    assert escape_list(("null",)) == "\\u006Eull" and unescape_list("\\u006Eull") == ("null",)
    assert escape_pairs((("e:mail", "hash,v2"),)) == "e\\u003Amail:hash\\u002Cv2"
    assert unescape_pairs("e\\u003Amail:hash\\u002Cv2,ssn:redact") == (
        ("e:mail", "hash,v2"),
        ("ssn", "redact"),
    )
    assert escape_pairs(()) == "null"


def test_ugi_forms() -> None:
    assert format_ugi("alice", "TOKEN") == "alice (auth:TOKEN)"
    assert (
        format_ugi("alice", "PROXY", "svc/host@REALM", "KERBEROS")
        == "alice (auth:PROXY) via svc/host@REALM (auth:KERBEROS)"
    )
    tricky = format_ugi("a (b) (auth:X)", "SIMPLE")
    assert tricky == "a \\u0028b) \\u0028auth:X) (auth:SIMPLE)"
    assert user_of_ugi(tricky) == "a (b) (auth:X)"
    assert user_of_ugi(format_ugi("", "SIMPLE")) == ""
    assert user_of_ugi(format_ugi("null", "SIMPLE")) == "null"


def test_null_rules_in_a_line(tmp_path: Path) -> None:
    event = AuditEvent(allowed=False, user="bob", cmd="refused", ip="", proto="")
    with AuditLog(tmp_path) as log:
        log.write([event])
    _, fields = hadoop_parse(read_lines(tmp_path)[0])
    values = dict(fields)
    for key in (
        "ip", "src", "dst", "perm", "proto", "callerContext", "queryId", "stmtHash",
        "columns", "masked", "rowFilters", "policies", "reason", "durationMs", "prevHash",
    ):  # fmt: skip
        assert values[key] == "null", key
    assert all(value for _, value in fields), "no value is ever blank"
    assert values["allowed"] == "false" and values["succeeded"] == "false"
    assert values["eventId"] == event.event_id and len(values["hash"]) == 64


def test_ip_and_via(tmp_path: Path) -> None:
    with AuditLog(tmp_path) as log:
        log.write([sample_event(ip="10.1.2.3", via="lakegate-rest", via_auth="KERBEROS")])
    values = dict(hadoop_parse(read_lines(tmp_path)[0])[1])
    assert values["ip"] == "/10.1.2.3"
    assert values["ugi"] == "alice (auth:TOKEN) via lakegate-rest (auth:KERBEROS)"


def test_statement_hash() -> None:
    assert statement_hash("select 1") == ("sha256:" + hashlib.sha256(b"select 1").hexdigest())


def test_event_defaults_fill_id_and_time() -> None:
    before = datetime.now(UTC)
    event = AuditEvent(allowed=True, user="u", cmd="show")
    assert event.ts is not None and before <= event.ts <= datetime.now(UTC)
    assert event.event_id is not None and re.fullmatch(r"[0-9a-f]{32}", event.event_id)
    assert AuditEvent(allowed=True, user="u", cmd="show").event_id != event.event_id


NASTY = st.text(
    alphabet=st.one_of(
        st.sampled_from(list('\t\n\r=,:()\\" \x00\x7f\u2028é日😀null')),
        st.characters(codec="utf-8"),
    ),
    max_size=12,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    user=NASTY,
    src=NASTY,
    reason=NASTY,
    context=NASTY,
    columns=st.lists(NASTY, max_size=3),
    masked=st.lists(st.tuples(NASTY, NASTY), max_size=2),
    policies=st.lists(NASTY, max_size=3),
)
def test_hadoop_style_parser_reads_every_line(
    user: str,
    src: str,
    reason: str,
    context: str,
    columns: list[str],
    masked: list[tuple[str, str]],
    policies: list[str],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with AuditLog(directory) as log:
            log.write(
                [
                    AuditEvent(
                        allowed=False,
                        user=user,
                        cmd="select",
                        src=src,
                        dst=src,
                        reason=reason,
                        caller_context=context,
                        columns=columns,
                        masked=masked,
                        policies=policies,
                    )
                ]
            )
        lines = read_lines(directory)
        assert len(lines) == 1
        line = lines[0]
        assert line.isascii() and "\r" not in line
        assert DYNAMOMETER_LINE.match(line)
        _, fields = hadoop_parse(line)
        assert all(value.isprintable() and value for _, value in fields)
        assert tuple(k for k, _ in fields) == KEYS
        values = dict(fields)
        assert user_of_ugi(values["ugi"]) == user
        assert unescape_value(values["src"]) == (src or None)
        assert unescape_value(values["dst"]) == (src or None)
        assert unescape_value(values["reason"]) == (reason or None)
        assert unescape_value(values["callerContext"]) == (context or None)
        assert unescape_list(values["columns"]) == tuple(c for c in columns if c)
        assert unescape_list(values["policies"]) == tuple(p for p in policies if p)
        assert unescape_pairs(values["masked"]) == tuple((c, m or None) for c, m in masked if c)
        assert verify(directory).ok


@given(st.text())
def test_escape_round_trip_and_shape(text: str) -> None:
    escaped = escape_java(text)
    assert escaped.isascii() and escaped.isprintable()
    assert unescape_java(escaped) == text
