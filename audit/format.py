"""The v1 audit line: rendering, hashing and parsing (see docs/spec/audit-format.md).

Everything that must agree between the writer, ``verify``, ``query`` and the tests lives here,
so the byte layout is defined exactly once.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from audit.escape import (
    NULL_TOKEN,
    escape_java,
    escape_value,
    unescape_list,
    unescape_pairs,
    unescape_value,
)

LOGGER_NAME = "lakegate.audit"
LEVEL = "INFO"

#: Field keys in the order the contract fixes: HDFS's eight first, then Lakegate's.
KEYS: tuple[str, ...] = (
    "allowed",
    "ugi",
    "ip",
    "cmd",
    "src",
    "dst",
    "perm",
    "proto",
    "callerContext",
    "succeeded",
    "eventId",
    "ts",
    "queryId",
    "stmtHash",
    "columns",
    "masked",
    "rowFilters",
    "policies",
    "reason",
    "durationMs",
    "writer",
    "seq",
    "prevHash",
    "hash",
)
#: Keys this project adds to the v1 contract (extends docs/spec/audit-format.md, see
#: audit/README.md): written by every current writer between ``durationMs`` and ``writer``, so
#: the tamper-evidence keys stay last. Lines without them (older writers) still parse.
EXTENSION_KEYS: tuple[str, ...] = ("policyVersion", "phase")
_AT = KEYS.index("writer")
#: The key order of a line written by the current writer.
KEYS_EXT: tuple[str, ...] = KEYS[:_AT] + EXTENSION_KEYS + KEYS[_AT:]
#: A `cmd=policyRead` line of a mapping table read at plan time adds ``readVersion`` (the
#: Delta version read) after ``phase`` (audit/README.md).
KEYS_READ: tuple[str, ...] = KEYS[:_AT] + EXTENSION_KEYS + ("readVersion",) + KEYS[_AT:]
LAYOUTS: tuple[tuple[str, ...], ...] = (KEYS_READ, KEYS_EXT, KEYS)
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


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One parsed, unescaped audit line (what ``query`` filters and prints)."""

    ts: datetime
    allowed: bool
    user: str
    ugi: str
    ip: str | None
    cmd: str
    src: str | None
    dst: str | None
    proto: str | None
    caller_context: str | None
    succeeded: bool
    event_id: str | None
    query_id: str | None
    stmt_hash: str | None
    columns: tuple[str, ...]
    masked: tuple[tuple[str, str | None], ...]
    row_filters: tuple[str, ...]
    policies: tuple[str, ...]
    reason: str | None
    duration_ms: int | None
    policy_version: str | None
    phase: str | None
    writer: str
    seq: int
    prev_hash: str | None
    hash: str
    file: str
    line: int
    read_version: int | None = None  # readVersion, on policyRead lines (extension key)

    def to_json(self) -> dict[str, object]:
        """Keys as in the log line (camelCase), plus ``user``, ``file`` and ``line``."""
        return {
            "ts": format_iso_z(self.ts),
            "allowed": self.allowed,
            "user": self.user,
            "ugi": self.ugi,
            "ip": self.ip,
            "cmd": self.cmd,
            "src": self.src,
            "dst": self.dst,
            "proto": self.proto,
            "callerContext": self.caller_context,
            "succeeded": self.succeeded,
            "eventId": self.event_id,
            "queryId": self.query_id,
            "stmtHash": self.stmt_hash,
            "columns": list(self.columns),
            "masked": [{"column": c, "mask": m} for c, m in self.masked],
            "rowFilters": list(self.row_filters),
            "policies": list(self.policies),
            "reason": self.reason,
            "durationMs": self.duration_ms,
            "policyVersion": self.policy_version,
            "phase": self.phase,
            "readVersion": self.read_version,
            "writer": self.writer,
            "seq": self.seq,
            "prevHash": self.prev_hash,
            "hash": self.hash,
            "file": self.file,
            "line": self.line,
        }


def parse_ts(raw: str) -> datetime:
    """Parse the ``ts`` field (``...T..:..:..mmmZ``) into an aware UTC datetime."""
    return datetime.fromisoformat(raw).astimezone(UTC)


def user_of_ugi(ugi: str) -> str:
    """The acting user named by a (still escaped) ugi value, unescaped."""
    match = _UGI_RE.fullmatch(ugi)
    name = match.group("user") if match else ugi.partition(" (auth:")[0]
    return unescape_value(name) or ""


def to_record(values: dict[str, str], link: ChainLink, file: str, line: int) -> AuditRecord:
    """Typed, unescaped view of a parsed line."""

    def text(key: str) -> str | None:
        return unescape_value(values[key])

    duration = values["durationMs"]
    return AuditRecord(
        ts=parse_ts(values["ts"]),
        allowed=values["allowed"] == "true",
        user=user_of_ugi(values["ugi"]),
        ugi=text("ugi") or "",
        ip=text("ip"),
        cmd=text("cmd") or "",
        src=text("src"),
        dst=text("dst"),
        proto=text("proto"),
        caller_context=text("callerContext"),
        succeeded=values["succeeded"] == "true",
        event_id=text("eventId"),
        query_id=text("queryId"),
        stmt_hash=text("stmtHash"),
        columns=unescape_list(values["columns"]),
        masked=unescape_pairs(values["masked"]),
        row_filters=unescape_list(values["rowFilters"]),
        policies=unescape_list(values["policies"]),
        reason=text("reason"),
        duration_ms=int(duration) if duration.lstrip("-").isdigit() else None,
        policy_version=unescape_value(values.get("policyVersion", NULL_TOKEN)),
        phase=unescape_value(values.get("phase", NULL_TOKEN)),
        read_version=int(read) if (read := values.get("readVersion", "")).isdigit() else None,
        writer=text("writer") or "",
        seq=link.seq,
        prev_hash=link.prev_hash,
        hash=link.hash,
        file=file,
        line=line,
    )
