"""The v1 audit line: its fields, hashing and parsing (see docs/spec/audit-format.md).

Everything that must agree between the writer, ``verify``, ``query``, ``system.access.audit``
and the tests lives here, so the byte layout is defined exactly once: :data:`FIELDS` is the
audit fields as one table, one row each (key, record attribute, kind, query filter), and
the writer's line, the parsed record, its JSON, the Spark table's columns and the query
filters are all read from it. A new field is one row (audit/README.md, "Adding a field").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, make_dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

from audit.escape import (
    NULL_TOKEN,
    escape_java,
    escape_list,
    escape_pairs,
    escape_value,
    unescape_list,
    unescape_pairs,
    unescape_value,
)

LOGGER_NAME = "lakegate.audit"
LEVEL = "INFO"

HASH_SEPARATOR = "\thash="
HASH_HEX_LEN = 64
_HASH_RE = re.compile(r"[0-9a-f]{64}")
_UGI_RE = re.compile(
    r"(?P<user>[^(]*) \(auth:(?P<auth>[^()]*)\)"
    r"(?: via (?P<via>[^(]*) \(auth:(?P<via_auth>[^()]*)\))?"
)
# "2026-11-22 10:00:00,123 " : d = digit, anything else literal.
_TS_MASK = "dddd-dd-dd dd:dd:dd,ddd "
# %p %c{2}: the logger name has exactly two components, so %c{2} is the whole name.
_HEAD_NAME = f"{LEVEL} {LOGGER_NAME}"
_HEAD = f"{_HEAD_NAME}: "


def logger_category(name: str, components: int = 2) -> str:
    """log4j ``%c{2}``: the last ``components`` dot-separated parts of the logger name."""
    return ".".join(name.split(".")[-components:])


def to_utc(ts: datetime) -> datetime:
    """Naive datetimes are taken to be UTC already; aware ones are converted."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def format_prefix_time(ts: datetime) -> str:
    """log4j ``%d{ISO8601}``: ``yyyy-MM-dd HH:mm:ss,SSS`` (always UTC here)."""
    t = to_utc(ts)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d} "
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d},{t.microsecond // 1000:03d}"
    )


def format_iso_z(ts: datetime) -> str:
    """The ``ts`` field: ISO-8601 in UTC with milliseconds and ``Z``."""
    t = to_utc(ts)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T"
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}.{t.microsecond // 1000:03d}Z"
    )


@lru_cache(maxsize=4096)
def format_ugi(user: str, auth: str, via: str | None = None, via_auth: str = "TOKEN") -> str:
    """``USER (auth:M)`` or ``USER (auth:M) via SERVICE (auth:M)``, escaped.

    ``(`` inside names and ``(``/``)`` inside methods are written ``\\u0028``/``\\u0029`` so the
    user is always the text before the first `` (auth:``.
    """
    text = f"{escape_value(user, '(')} (auth:{escape_java(auth or 'SIMPLE', '()')})"
    if via:
        text += f" via {escape_value(via, '(')} (auth:{escape_java(via_auth or 'TOKEN', '()')})"
    return text


@lru_cache(maxsize=4096)
def format_ip(ip: str | None) -> str:
    """HDFS writes the client address as ``/a.b.c.d``."""
    if not ip:
        return NULL_TOKEN
    return escape_value(ip if ip.startswith("/") else f"/{ip}")


def chain_hash(prev_hash: str | None, unhashed_line: str) -> str:
    """``sha256(prevHash + line-before-'\\thash=')``; the genesis line contributes no prevHash."""
    data = ((prev_hash or "") + unhashed_line).encode("ascii")
    return hashlib.sha256(data).hexdigest()


def split_line(text: str) -> tuple[str, list[tuple[str, str]]] | None:
    """Split the way Hadoop's tools do: prefix at the first ``': '``, tabs, first ``=``."""
    prefix, sep, message = text.partition(": ")
    if not sep:
        return None
    fields: list[tuple[str, str]] = []
    for field in message.split("\t"):
        key, eq, value = field.partition("=")
        if not eq:
            return None
        fields.append((key, value))
    return prefix, fields


def _matches_mask(text: str) -> bool:
    """``text`` (at most as long as the mask) follows the timestamp mask char by char."""
    return all(
        (c.isdigit() and c.isascii()) if m == "d" else c == m
        for c, m in zip(text, _TS_MASK, strict=False)
    )


def _valid_prefix(prefix: str) -> bool:
    mask_len = len(_TS_MASK)
    return (
        prefix[mask_len:] == _HEAD_NAME
        and _matches_mask(prefix[:mask_len])
        and (len(prefix) == mask_len + len(_HEAD_NAME))
    )


@dataclass(frozen=True, slots=True)
class ChainLink:
    """The tamper-evidence part of one complete, well-formed line."""

    writer: str
    seq: int
    prev_hash: str | None
    hash: str
    hash_ok: bool


def parse_complete(text: str) -> tuple[dict[str, str], ChainLink] | None:
    """Parse a complete v1 line (all keys, in order, valid hash syntax) or return ``None``."""
    if not text.isascii():
        return None
    split = split_line(text)
    if split is None:
        return None
    prefix, fields = split
    layout = next((keys for keys in LAYOUTS if len(keys) == len(fields)), None)
    if layout is None or not _valid_prefix(prefix):
        return None
    values: dict[str, str] = {}
    for (key, value), expected in zip(fields, layout, strict=True):
        if key != expected or value == "":
            return None
        values[key] = value
    digest = values["hash"]
    prev = values["prevHash"]
    if _HASH_RE.fullmatch(digest) is None:
        return None
    if prev != NULL_TOKEN and _HASH_RE.fullmatch(prev) is None:
        return None
    seq_text = values["seq"]
    if not seq_text.isdigit() or values["writer"] == NULL_TOKEN:
        return None
    prev_hash = None if prev == NULL_TOKEN else prev
    unhashed = text[: len(text) - len(HASH_SEPARATOR) - HASH_HEX_LEN]
    link = ChainLink(
        writer=values["writer"],
        seq=int(seq_text),
        prev_hash=prev_hash,
        hash=digest,
        hash_ok=chain_hash(prev_hash, unhashed) == digest,
    )
    return values, link


def partial_line_fields(text: str) -> dict[str, str] | None:
    """If ``text`` is a strict prefix of a well-formed line, return the fields it holds whole.

    This is how a line cut short by a killed writer is told apart from an edited one: the cut
    can fall anywhere, but what is left still follows the grammar up to the cut.
    """
    if not text or not text.isascii():
        return None
    mask_len = len(_TS_MASK)
    if not _matches_mask(text[:mask_len]):
        return None
    rest = text[mask_len:]
    if len(rest) <= len(_HEAD):
        return {} if _HEAD.startswith(rest) else None
    if not rest.startswith(_HEAD):
        return None
    parts = rest[len(_HEAD) :].split("\t")
    for keys in LAYOUTS:
        whole = _partial_fields(parts, keys)
        if whole is not None:
            return whole
    return None


def _partial_fields(parts: list[str], keys: tuple[str, ...]) -> dict[str, str] | None:
    """The whole fields of a cut line's ``parts`` if they follow the key order ``keys``."""
    if len(parts) > len(keys):
        return None
    whole: dict[str, str] = {}
    for index, part in enumerate(parts):
        key = keys[index]
        if index < len(parts) - 1:
            if not part.startswith(key + "=") or len(part) == len(key) + 1:
                return None
            whole[key] = part[len(key) + 1 :]
        elif len(part) <= len(key):
            if not (key + "=").startswith(part):
                return None
        elif not part.startswith(key + "="):
            return None
        elif key == "hash" and len(part) - len(key) - 1 >= HASH_HEX_LEN:
            return None  # nothing is missing: that is a complete line, not a cut one
    return whole


def parse_ts(raw: str) -> datetime:
    """Parse the ``ts`` field (``...T..:..:..mmmZ``) into an aware UTC datetime."""
    return datetime.fromisoformat(raw).astimezone(UTC)


def user_of_ugi(ugi: str) -> str:
    """The acting user named by a (still escaped) ugi value, unescaped."""
    match = _UGI_RE.fullmatch(ugi)
    name = match.group("user") if match else ugi.partition(" (auth:")[0]
    return unescape_value(name) or ""


# The fields, one table ------------------------------------------------------------------


def _same(value: Any) -> Any:
    return value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _write_long(value: int | None) -> str:
    return NULL_TOKEN if value is None else str(int(value))


def _read_long(raw: str) -> int | None:
    return int(raw) if raw.lstrip("-").isdigit() else None


def _struct(*names: str) -> dict[str, object]:
    fields = [{"name": n, "type": "string", "nullable": True, "metadata": {}} for n in names]
    return {"type": "struct", "fields": fields}


def _array(element: object) -> dict[str, object]:
    return {"type": "array", "elementType": element, "containsNull": True}


@dataclass(frozen=True, slots=True)
class Kind:
    """How one kind of value is written into a line, read back, shown as JSON and typed in
    ``system.access.audit`` (``spark_type``: the JSON form of a Spark type, so this module
    needs no Spark; ``audit.spark_table`` reads the column with the builder of ``name``)."""

    name: str
    write: Callable[[Any], str]
    read: Callable[[str], Any]
    py_type: str
    spark_type: str | dict[str, object]
    empty: object = None  # the value of an unset field
    to_json: Callable[[Any], object] = _same
    freeze: Callable[[Any], Any] = _same  # an event's value in the form the writer renders


BOOL = Kind("bool", _bool, lambda raw: raw == "true", "bool", "boolean", empty=False)
TEXT = Kind("text", escape_value, unescape_value, "str | None", "string")
#: text that is never empty in a record (``""`` rather than ``None``)
NAME = Kind("name", escape_value, lambda raw: unescape_value(raw) or "", "str", "string")
IP = Kind("ip", format_ip, unescape_value, "str | None", "string")
TIME = Kind("time", format_iso_z, parse_ts, "datetime", "timestamp", to_json=format_iso_z)
LONG = Kind("long", _write_long, _read_long, "int | None", "long")
#: the chain's hex digests: never escaped
HASH = Kind("hash", lambda v: v or NULL_TOKEN, unescape_value, "str | None", "string")
LIST = Kind(
    "list",
    lambda v: escape_list(tuple(v)),
    unescape_list,
    "tuple[str, ...]",
    _array("string"),
    empty=(),
    to_json=list,
    freeze=tuple,
)
PAIRS = Kind(
    "pairs",
    lambda v: escape_pairs(tuple(v)),
    unescape_pairs,
    "tuple[tuple[str, str | None], ...]",
    _array(_struct("column", "mask")),
    empty=(),
    to_json=lambda v: [{"column": c, "mask": m} for c, m in v],
    freeze=lambda v: tuple((c, m) for c, m in v),
)
#: the acting user, read from the ``ugi`` value (not a key of its own)
USER = Kind("user", escape_value, user_of_ugi, "str", "string")
#: HDFS's ``perm``: always ``null``, kept for HDFS's parsers, in no record
NULL = Kind("null", lambda _: NULL_TOKEN, unescape_value, "None", "string")


@dataclass(frozen=True, slots=True)
class Filter:
    """A field as an ``audit query`` filter: the ``Filters`` keyword ``name`` (the command
    line's ``--name``), how a record's value matches what was asked, and the option's help."""

    name: str
    matches: Callable[[Any, str], bool]
    help: str


def exact(value: str | None, wanted: str) -> bool:
    return value == wanted


def folded(value: str | None, wanted: str) -> bool:
    """Case-insensitive equality (commands)."""
    return value is not None and value.lower() == wanted.lower()


def prefixed(value: str | None, wanted: str) -> bool:
    """The value starts with what was asked (``git:3f2a`` finds ``git:3f2a9c...``)."""
    return (value or "").startswith(wanted)


def has_item(values: tuple[str, ...], wanted: str) -> bool:
    """A list holds the item, case-insensitively (Spark's column names are)."""
    return wanted.lower() in (v.lower() for v in values)


#: Who puts a field's value on the line: the event, the writer's chain, or nobody (read
#: from another field).
Origin = Literal["event", "chain", "derived"]
REQUIRED: Any = object()  # an event attribute without a default


@dataclass(frozen=True, slots=True)
class Field:
    """One audit field: its key (in the line, in JSON and as a column of
    ``system.access.audit``), the attribute of ``AuditEvent``/``AuditRecord`` (``None``: on
    the line only), its kind, and whether ``audit query`` filters on it.

    ``extension``: 0 for the keys of the v1 contract; n for the n-th extension (audit/README.md),
    whose keys are written only when a field of it, or of a later one, is set, so an event
    without them renders exactly as an older line. ``leads``: first in records and the table
    (time), wherever the line has it. ``render``: writes from the whole event (``ugi``).
    ``reads``: a derived field's source key. ``default``: the event's default (``None``: the
    kind's empty value; :data:`REQUIRED`: none).
    """

    key: str
    attr: str | None
    kind: Kind
    filter: Filter | None = None
    extension: int = 0
    origin: Origin = "event"
    leads: bool = False
    render: Callable[[Any], str] | None = None
    reads: str | None = None
    default: object = None

    @property
    def on_line(self) -> bool:
        return self.origin != "derived"


def _ugi(event: Any) -> str:
    return format_ugi(event.user, event.auth, event.via, event.via_auth)


#: The audit fields in the order the contract writes them: HDFS's eight first, then
#: Lakegate's, the extension keys before the tamper-evidence keys, which stay last.
FIELDS: tuple[Field, ...] = (
    Field("allowed", "allowed", BOOL, default=REQUIRED),
    Field(
        "user", "user", USER, Filter("user", exact, "acting user (exact)"),
        origin="derived", reads="ugi",
    ),
    Field("ugi", "ugi", NAME, render=_ugi),
    Field("ip", "ip", IP, default="127.0.0.1"),
    Field(
        "cmd", "cmd", NAME, Filter("cmd", folded, "command, e.g. select, refused, policyReload"),
        default=REQUIRED,
    ),
    Field("src", "src", TEXT),
    Field("dst", "dst", TEXT),
    Field("perm", None, NULL, render=NULL.write),
    Field("proto", "proto", TEXT, default="spark"),
    Field(
        "callerContext", "caller_context", TEXT,
        Filter("caller_context", exact, "caller context (exact), e.g. connect:<session id>"),
    ),
    Field("succeeded", "succeeded", BOOL),
    Field("eventId", "event_id", TEXT),
    Field("ts", "ts", TIME, leads=True),
    Field("queryId", "query_id", TEXT),
    Field("stmtHash", "stmt_hash", TEXT),
    Field(
        "columns", "columns", LIST,
        Filter("column", has_item, "lines whose columns include this column"),
    ),
    Field("masked", "masked", PAIRS),
    Field("rowFilters", "row_filters", LIST),
    Field("policies", "policies", LIST),
    Field("reason", "reason", TEXT),
    Field("durationMs", "duration_ms", LONG),
    Field(
        "policyVersion", "policy_version", TEXT,
        Filter("policy_version", prefixed, "policyVersion or its prefix (sha256:..., git:...)"),
        extension=1,
    ),
    Field("phase", "phase", TEXT, extension=1),
    #: the Delta version of ``src`` read, on ``cmd=policyRead`` lines of a mapping table read
    #: at plan time (audit/README.md)
    Field("readVersion", "read_version", LONG, extension=2),
    #: who the organisation's identity provider says the user is (issue 37): the token's
    #: issuer and subject behind the user name (docs/identity.md); null for local users and
    #: Lakegate's own tokens
    Field("issuer", "issuer", TEXT, Filter("issuer", exact, "identity provider (exact)"),
          extension=3),
    Field("subject", "subject", TEXT, Filter("subject", exact, "provider subject (exact)"),
          extension=3),
    #: what a call that touches no table acted on: the SCIM resource an identity provider
    #: pushed (`scim:user:NAME`, `scim:group:ID`), so `src` keeps meaning a table
    Field("resource", "resource", TEXT,
          Filter("resource", exact, "resource a non-table call acted on (exact)"), extension=3),
    Field("writer", "writer", NAME, origin="chain"),
    Field("seq", "seq", LONG, origin="chain"),
    Field("prevHash", "prev_hash", HASH, origin="chain"),
    Field("hash", "hash", HASH, origin="chain"),
)  # fmt: skip

LINE_FIELDS: tuple[Field, ...] = tuple(f for f in FIELDS if f.on_line)
#: The key orders a line may have, newest extension first; v1 (no extension keys) last.
LAYOUTS: tuple[tuple[str, ...], ...] = tuple(
    tuple(f.key for f in LINE_FIELDS if f.extension <= generation)
    for generation in range(max(f.extension for f in FIELDS), -1, -1)
)
#: The v1 contract's keys, and those of a line written by the current writer.
KEYS, KEYS_EXT = LAYOUTS[-1], LAYOUTS[0]
#: Keys this project adds to the v1 contract (extends docs/spec/audit-format.md).
EXTENSION_KEYS: tuple[str, ...] = tuple(f.key for f in LINE_FIELDS if f.extension)
#: A record's fields (and ``system.access.audit``'s columns), time first.
RECORD_FIELDS: tuple[Field, ...] = tuple(
    sorted((f for f in FIELDS if f.attr is not None), key=lambda f: not f.leads)
)
#: The fields ``audit query`` filters on, by ``Filters`` keyword.
FIELD_FILTERS: dict[str, Field] = {f.filter.name: f for f in FIELDS if f.filter is not None}
#: Where a record was found: not a field of the line, but part of every record.
LOCATION: tuple[tuple[str, str], ...] = (("file", "str"), ("line", "int"))


def _to_json(self: Any) -> dict[str, object]:
    """Keys as in the log line (camelCase), plus ``user``, ``file`` and ``line``."""
    out = {f.key: f.kind.to_json(getattr(self, f.attr)) for f in RECORD_FIELDS if f.attr}
    return out | {name: getattr(self, name) for name, _ in LOCATION}


#: One parsed, unescaped audit line (what ``query`` filters and prints): one attribute per
#: row of :data:`FIELDS` that has one, then where the line was found.
AuditRecord = make_dataclass(
    "AuditRecord",
    [(f.attr, f.kind.py_type) for f in RECORD_FIELDS if f.attr] + list(LOCATION),
    frozen=True,
    slots=True,
    namespace={
        "__module__": __name__,
        "to_json": _to_json,
        "__doc__": "One parsed, unescaped audit line.",
    },
)


def to_record(values: dict[str, str], file: str, line: int) -> AuditRecord:
    """Typed, unescaped view of a parsed line; the keys of an extension later than the
    line's are empty (``None``)."""
    record = {
        f.attr: f.kind.read(values.get(f.reads or f.key, NULL_TOKEN))
        for f in RECORD_FIELDS
        if f.attr
    }
    return AuditRecord(**record, file=file, line=line)
