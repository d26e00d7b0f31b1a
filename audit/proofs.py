"""Reading the Merkle tree back: check it against the signed checkpoints and the witness,
prove one line's inclusion, and check such a proof offline.

The readers trust nothing in the audit directory but what a signature covers: the tree is
recomputed from the lines, starting from the frontier of the checkpoint that began the
oldest retained file (checked to fold to that checkpoint's signed root).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit.checkpoint import (
    CHECKPOINTS_NAME,
    Checkpoint,
    CheckpointError,
    default_origin,
    parse_checkpoints,
    read_checkpoints,
)
from audit.escape import escape_value
from audit.handler import SnapshotFile, open_snapshot
from audit.merkle import (
    Frontier,
    ProofError,
    frontier_ranges,
    inclusion_path,
    leaf_hash,
    root_from_inclusion,
    subtree_resolver,
)
from audit.tree import TILES_NAME
from audit.verify_report import Finding
from audit.witness import WitnessError
from audit.witness import read as read_witness
from audit.witness_http import pending as pending_http
from audit.witness_http import read as read_http_witness

PROOF_FORMAT = "lakegate-audit-inclusion-proof/v1"


@dataclass
class TreeReport:
    """What the tree check found; ``ok`` is False exactly when there is a break."""

    size: int = 0  # leaves (complete lines) in the retained files
    first_leaf: int = 0  # the tree index of the oldest retained line
    checked: int = 0  # signed checkpoints whose root was recomputed and matched
    rotated_away: int = 0  # signed checkpoints older than the oldest retained line
    unsigned_tail: int = 0  # lines after the newest checkpoint (not yet provable)
    witness: str | None = None
    undelivered: int = 0  # checkpoints waiting for an unreachable HTTP witness (record mode)
    stopped: bool = False  # the check stopped at a break: `size` leaves were read, no more
    breaks: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.breaks

    def summary(self) -> str:
        witness = f"; witness {self.witness}" if self.witness else "; no witness"
        if self.stopped:
            out = [
                f"tree: stopped at the first break, after {self.size} leaves (first retained "
                f"leaf {self.first_leaf}; the lines after it were not checked), "
                f"{self.checked} signed checkpoint(s) matched before it" + witness
            ]
        else:
            out = [
                f"tree: {self.size} leaves (first retained leaf {self.first_leaf}), "
                f"{self.checked} signed checkpoint(s) match, {self.rotated_away} cover only "
                f"rotated lines, {self.unsigned_tail} line(s) after the newest checkpoint" + witness
            ]
        if self.undelivered:
            out.append(
                f"warning: {self.undelivered} checkpoint(s) not yet delivered to the HTTP "
                "witness (it was unreachable; witness_unreachable: record)"
            )
        if self.ok:
            out.append("OK: the lines match every signed checkpoint")
        else:
            out.append(f"BROKEN: {self.breaks[0]}")
            out.extend(f"  also: {finding}" for finding in self.breaks[1:])
        return "\n".join(out)

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "size": self.size,
            "firstLeaf": self.first_leaf,
            "checked": self.checked,
            "rotatedAway": self.rotated_away,
            "unsignedTail": self.unsigned_tail,
            "witness": self.witness,
            "undelivered": self.undelivered,
            "stopped": self.stopped,
            "breaks": [finding.to_dict() for finding in self.breaks],
        }


@dataclass
class _Signed:
    where: str  # file:line of the checkpoint
    checkpoint: Checkpoint


def _signed(
    text: str, label: str, public: Ed25519PublicKey, origin: str, report: TreeReport
) -> list[_Signed]:
    out: list[_Signed] = []
    for number, checkpoint in parse_checkpoints(text):
        if checkpoint is None:
            report.breaks.append(Finding("forged", label, number, "not a checkpoint line"))
            continue
        try:
            checkpoint.check(public, origin)
        except CheckpointError as exc:
            report.breaks.append(Finding("forged", label, number, f"checkpoint refused: {exc}"))
            continue
        out.append(_Signed(f"{label}:{number}", checkpoint))
    return out


def _lines(item: SnapshotFile) -> Iterator[bytes]:
    for raw, had_newline in item.lines():
        if had_newline:
            yield raw


def _complete(item: SnapshotFile) -> bytes:
    """The file's complete lines (up to its last newline within the snapshot size)."""
    item.handle.seek(0)
    data = item.handle.read(item.size)
    return data[: data.rfind(b"\n") + 1]


class _Lines:
    """Line ``k`` of a file's bytes, found by walking from the nearest known line start (a
    proof needs one block of adjacent lines: no split of the whole file)."""

    def __init__(self, data: bytes, count: int, anchors: dict[int, int]) -> None:
        self.data = data
        self.anchors = {0: 0, count: len(data)} | anchors

    def line(self, k: int) -> bytes:
        near = min(self.anchors, key=lambda a: abs(a - k))
        at, offset = near, self.anchors[near]
        while at < k:
            offset = self.data.index(b"\n", offset) + 1
            at += 1
        while at > k:
            offset = self.data.rfind(b"\n", 0, offset - 1) + 1
            at -= 1
        self.anchors[k] = offset
        return self.data[offset : self.data.index(b"\n", offset)]


def _start_frontier(start: Checkpoint) -> Frontier:
    frontier = Frontier(start.size, [bytes.fromhex(node) for node in start.frontier])
    if frontier.root().hex() != start.root:
        raise ProofError("its frontier does not fold to its signed root")
    return frontier


def _matches(
    frontier: Frontier, by_size: dict[int, list[_Signed]], name: str, line: int, report: TreeReport
) -> bool:
    """Hold the recomputed root against the checkpoints signed at this size."""
    root = frontier.root().hex()
    for other in by_size.get(frontier.size, ()):
        if other.checkpoint.root != root:
            report.breaks.append(
                Finding(
                    "rewritten",
                    name,
                    line,
                    f"the first {frontier.size} leaves do not match the checkpoint signed "
                    f"{other.checkpoint.time} ({other.where}): a line up to here was edited, "
                    "deleted, inserted or reordered",
                )
            )
            return False
        report.checked += 1
    return True


def verify_tree(
    directory: Path,
    public: Ed25519PublicKey,
    origin: str | None = None,
    witness: Path | None = None,
    witness_url: str | None = None,
) -> TreeReport:
    """Recompute the tree over the retained lines and hold it against every signed
    checkpoint, here and at each witness (a directory and/or an HTTP witness URL; an HTTP
    witness that does not answer is a break: the log's end cannot be vouched for)."""
    origin = origin or default_origin(directory)
    report = TreeReport()
    try:
        local = (directory / CHECKPOINTS_NAME).read_text("ascii", "replace")
    except FileNotFoundError:
        local = ""
    signed = _signed(local, CHECKPOINTS_NAME, public, origin, report)
    report.undelivered = len(pending_http(directory))
    labels: list[str] = []
    readers: list[tuple[str, Callable[[], tuple[str, str]]]] = []
    if witness is not None:
        readers.append((str(witness), lambda: read_witness(witness, origin)))
    if witness_url is not None:
        readers.append((witness_url, lambda: read_http_witness(witness_url, origin)))
    for place, read in readers:
        try:
            label, text = read()
        except WitnessError as exc:
            report.breaks.append(Finding("unreachable", place, 0, str(exc)))
            continue
        labels.append(label)
        at_witness = _signed(text, label, public, origin, report)
        if signed and not at_witness:
            report.breaks.append(
                Finding("deleted", label, 0, "the witness holds no checkpoint of this log")
            )
        signed += at_witness
    report.witness = ", ".join(labels) or None
    starts = {s.checkpoint.file: s for s in signed if s.checkpoint.file is not None}
    by_size: dict[int, list[_Signed]] = {}
    for item in signed:
        by_size.setdefault(item.checkpoint.size, []).append(item)
    frontier: Frontier | None = None

    def stopped() -> TreeReport:
        """The report of a check that stopped at its first break: how far it got."""
        report.size = frontier.size if frontier is not None else 0
        report.stopped = True
        return report

    with open_snapshot(directory) as snapshot:
        files = [item for item in snapshot.files if item.size > 0]
        for item in files:
            start = starts.get(item.file_id)
            if start is None:
                report.breaks.append(
                    Finding(
                        "replaced",
                        item.name,
                        0,
                        "no signed checkpoint began this file (a file put in place of the "
                        "one rotation kept, or lines written without checkpoints)",
                    )
                )
                return stopped()
            if frontier is None:
                try:
                    frontier = _start_frontier(start.checkpoint)
                except ProofError as exc:
                    report.breaks.append(Finding("forged", start.where, 0, f"start: {exc}"))
                    return stopped()
                report.first_leaf = frontier.size
                if not _matches(frontier, by_size, item.name, 0, report):
                    return stopped()
            elif start.checkpoint.size != frontier.size:
                missing = start.checkpoint.size - frontier.size
                report.breaks.append(
                    Finding(
                        "deleted" if missing > 0 else "inserted",
                        item.name,
                        0,
                        f"began at leaf {start.checkpoint.size} ({start.where}) but follows "
                        f"{frontier.size} leaves: {abs(missing)} line(s) before it were "
                        + ("removed" if missing > 0 else "added"),
                    )
                )
                return stopped()
            for number, line in enumerate(_lines(item), start=1):
                frontier.append_line(line)
                if frontier.size in by_size and not _matches(
                    frontier, by_size, item.name, number, report
                ):
                    return stopped()
    report.size = frontier.size if frontier is not None else 0
    for item in signed:
        size = item.checkpoint.size
        if size < report.first_leaf:
            report.rotated_away += 1
        elif size > report.size:
            report.breaks.append(
                Finding(
                    "truncated",
                    item.where,
                    0,
                    f"checkpoint signed {item.checkpoint.time} covers {size} leaves but the log "
                    f"has {report.size}: its newest lines were cut or the log was rolled back",
                )
            )
    sizes = [s.checkpoint.size for s in signed if s.checkpoint.size <= report.size]
    covered = max(sizes, default=0)
    report.unsigned_tail = report.size - max(covered, report.first_leaf)
    return report


def _read_tiles(directory: Path) -> list[bytes]:
    try:
        data = (directory / TILES_NAME).read_bytes()
    except FileNotFoundError:
        return []
    return [data[i : i + 32] for i in range(0, len(data) - 31, 32)]


def prove(directory: Path, event_id: str, origin: str | None = None) -> dict[str, Any]:
    """The inclusion proof of the line with ``eventId``, against the newest checkpoint that
    covers it (raises :class:`ProofError` when there is no such line or checkpoint, or when
    the lines no longer lead to that checkpoint's root: a proof is only written for a line
    the signed tree holds)."""
    origin = origin or default_origin(directory)
    needle = f"\teventId={escape_value(event_id)}\t".encode("ascii")
    every = [cp for _, cp in read_checkpoints(directory / CHECKPOINTS_NAME) if cp is not None]
    candidates = [cp for cp in every if cp.origin == origin]
    if every and not candidates:
        others = sorted({cp.origin for cp in every})
        raise ProofError(
            f"no checkpoint of origin {origin} in {directory}; its checkpoints are of "
            f"{', '.join(others[:3])} (a copy of the log: give --origin)"
        )
    starts = {cp.file: cp for cp in candidates if cp.file is not None}
    with open_snapshot(directory) as snapshot:
        files = [item for item in snapshot.files if item.size > 0]
        if not files or files[0].file_id not in starts:
            raise ProofError("the oldest retained audit file has no start checkpoint")
        base = starts[files[0].file_id]
        offsets: list[int] = []
        counts: list[int] = []
        position = base.size
        found: tuple[int, bytes] | None = None
        kept: dict[int, _Lines] = {}
        for slot, item in enumerate(files):
            data = _complete(item)
            count = data.count(b"\n")
            if found is None and (hit := data.find(needle)) >= 0:
                begin = data.rfind(b"\n", 0, hit) + 1
                number = data.count(b"\n", 0, begin)
                found = (position + number, data[begin : data.find(b"\n", hit)])
                kept[slot] = _Lines(data, count, {number: begin})
            offsets.append(position)
            counts.append(count)
            position += count
        if found is None:
            raise ProofError(f"no retained audit line has eventId {event_id}")
        index, line = found
        covering = [cp for cp in candidates if index < cp.size <= position]
        if not covering:
            raise ProofError(
                f"no checkpoint covers line {index + 1} yet (run 'lakegate audit checkpoint')"
            )
        checkpoint = max(covering, key=lambda cp: cp.size)

        def leaf(at: int) -> bytes:
            if at < base.size:
                raise ProofError(f"leaf {at} was rotated away and no stored tile covers it")
            slot = max(i for i, start in enumerate(offsets) if start <= at)
            if slot not in kept:
                kept[slot] = _Lines(_complete(files[slot]), counts[slot], {})
            return leaf_hash(kept[slot].line(at - offsets[slot]))

        nodes = [bytes.fromhex(node) for node in base.frontier]
        known = dict(zip(frontier_ranges(base.size), nodes, strict=True))
        subtree = subtree_resolver(leaf, known, _read_tiles(directory))
        path = inclusion_path(index, checkpoint.size, subtree)
    if root_from_inclusion(index, checkpoint.size, leaf_hash(line), path).hex() != checkpoint.root:
        raise ProofError(
            f"line {index + 1} (event {event_id}) is not what the checkpoint signed "
            f"{checkpoint.time} holds: the log changed after it was signed (run "
            "'lakegate audit verify')"
        )
    signed = json.loads(checkpoint.to_json())
    signed.pop("file", None)
    signed.pop("frontier", None)
    return {
        "format": PROOF_FORMAT,
        "eventId": event_id,
        "leafIndex": index,
        "treeSize": checkpoint.size,
        "line": line.decode("ascii"),
        "path": [node.hex() for node in path],
        "checkpoint": signed,
    }


def verify_proof(proof: dict[str, Any], public: Ed25519PublicKey, origin: str | None = None) -> str:
    """One line saying what the proof proves; raises :class:`ProofError` or
    :class:`CheckpointError` when it does not verify."""
    if not isinstance(proof, dict) or proof.get("format") != PROOF_FORMAT:
        raise ProofError(f"not a {PROOF_FORMAT} document")
    try:
        checkpoint = Checkpoint.from_json(json.dumps(proof["checkpoint"]))
        index, size = int(proof["leafIndex"]), int(proof["treeSize"])
        line = str(proof["line"]).encode("ascii")
        path = [bytes.fromhex(str(node)) for node in proof["path"]]
        event_id = str(proof["eventId"])
    except (KeyError, TypeError, ValueError, UnicodeEncodeError) as exc:
        raise ProofError(f"malformed proof: {type(exc).__name__}") from None
    checkpoint.check(public, origin)
    if size != checkpoint.size:
        raise ProofError(f"proof is for {size} leaves, the checkpoint for {checkpoint.size}")
    if f"\teventId={escape_value(event_id)}\t".encode("ascii") not in line:
        raise ProofError(f"the proven line is not event {event_id}")
    if root_from_inclusion(index, size, leaf_hash(line), path).hex() != checkpoint.root:
        raise ProofError("the path does not lead to the checkpoint's root")
    return (
        f"OK: event {event_id} is line {index + 1} of {size} in {checkpoint.origin}, "
        f"checkpoint signed {checkpoint.time} by key {checkpoint.key}"
    )
