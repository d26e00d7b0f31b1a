"""Check every writer's hash chain across all retained audit files, oldest to newest.

Reports the first break of each chain (edited, deleted, inserted, reordered, truncated) with
file and line number. Two things are *not* breaks and are reported separately:

* a **truncated** line that a killed writer left behind (a strict prefix of a valid line that
  its writer never continued past: the statement it described never returned a result);
* an **anchor**: a chain whose first retained line has ``seq > 1`` because rotation deleted
  the file holding its previous line, as proven by ``audit.crossings`` (a crossing note for
  that line plus a rotation-deletion note for that file). Otherwise a chain that does not
  start at ``seq=1, prevHash=null`` means lines were deleted. Without the index, verify falls
  back to accepting anchors only in the oldest retained rotated file, with a warning.

Verification streams the files and keeps only a small window per writer, so it runs on logs
of any size.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from audit.escape import unescape_java
from audit.format import ChainLink, parse_complete, partial_line_fields
from audit.handler import CROSSINGS_NAME, LOG_NAME, CrossingIndex, open_snapshot
from audit.verify_report import Finding, Pos, VerifyReport, WriterSummary

_WINDOW = 256  # recent lines kept per writer to recognise duplicates and forks


@dataclass(frozen=True)
class _Entry:
    seq: int
    hash: str
    prev_hash: str | None
    pos: Pos


@dataclass
class _Gap:
    """Seqs ``low..high`` were skipped at ``at``: deleted, unless they turn up later."""

    low: int
    high: int
    at: _Entry
    before: _Entry | None
    why: str = ""


@dataclass
class _Pending:
    """An anomaly only the writer's next line can classify.

    ``fork``: ``other`` continues the same parent as ``tip``; whichever the chain does not
    go on from was inserted. ``mismatch``: ``other`` has the next seq but chains to a
    different hash: if the chain goes on from ``tip`` then ``other`` was inserted, otherwise
    ``tip`` was edited and re-hashed.
    """

    kind: str
    tip: _Entry
    other: _Entry


@dataclass
class _Torn:
    pos: Pos
    seq: int | None
    writer: str | None


@dataclass
class _Chain:
    writer: str
    summary: WriterSummary
    tip: _Entry | None = None
    first: _Entry | None = None
    broken: bool = False
    gap: _Gap | None = None
    pending: _Pending | None = None
    displaced: _Entry | None = None  # a line that jumped ahead; must fit in later
    torn: _Torn | None = None
    recent: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)

    def advance(self, entry: _Entry) -> None:
        self.tip = entry
        self.recent[entry.hash] = entry
        if len(self.recent) > _WINDOW:
            self.recent.popitem(last=False)


def _links(entry: _Entry, parent: _Entry | None) -> bool:
    if parent is None:
        return entry.seq == 1 and entry.prev_hash is None
    return entry.seq == parent.seq + 1 and entry.prev_hash == parent.hash


class _Verifier:
    def __init__(
        self,
        files: list[str],
        file_ids: list[str | None] | None = None,
        crossings: CrossingIndex | None = None,
    ) -> None:
        self.files = files
        self.oldest_is_rotated = bool(files) and files[0] != LOG_NAME
        self.file_ids = file_ids if file_ids is not None else [None] * len(files)
        self.retained = {fid: name for fid, name in zip(self.file_ids, files, strict=True) if fid}
        self.crossings = crossings
        self.warnings: list[str] = []
        self.chains: dict[str, _Chain] = {}
        self.breaks: list[tuple[Pos, Finding]] = []
        self.torn: list[_Torn] = []
        self.anchors: list[Finding] = []
        self.lines = 0

    # -- helpers -------------------------------------------------------------------------
    def at(self, pos: Pos) -> str:
        return f"{self.files[pos[0]]}:{pos[1]}"

    def finding(
        self, kind: str, pos: Pos, detail: str, chain: _Chain | None, seq: int | None
    ) -> Finding:
        writer = unescape_java(chain.writer) if chain is not None else None
        return Finding(kind, self.files[pos[0]], pos[1], detail, writer, seq)

    def broke(
        self, chain: _Chain | None, kind: str, pos: Pos, detail: str, seq: int | None
    ) -> None:
        self.breaks.append((pos, self.finding(kind, pos, detail, chain, seq)))
        if chain is not None:
            chain.broken = True

    def chain(self, writer: str) -> _Chain:
        chain = self.chains.get(writer)
        if chain is None:
            chain = _Chain(writer, WriterSummary(unescape_java(writer)))
            self.chains[writer] = chain
        return chain

    # -- per line -------------------------------------------------------------------------
    def line(self, index: int, lineno: int, raw: bytes, had_newline: bool, last_file: bool) -> None:
        self.lines += 1
        pos = (index, lineno)
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            self.broke(None, "edited", pos, "line holds non-ASCII bytes", None)
            return
        parsed = parse_complete(text)
        if parsed is not None:
            self.complete(pos, parsed[1])
            return
        if not text:
            self.broke(None, "inserted", pos, "blank line", None)
            return
        whole = partial_line_fields(text)
        if whole is None:
            self.broke(None, "edited", pos, "not a well-formed audit line", None)
            return
        if not had_newline and not last_file:
            self.broke(
                None,
                "truncated",
                pos,
                "rotated file ends inside a line (writers always finish lines before rotating)",
                None,
            )
            return
        self.cut(pos, whole)

    def cut(self, pos: Pos, whole: dict[str, str]) -> None:
        """A strict prefix of a valid line: a crash remnant unless its writer went on."""
        writer = whole.get("writer")
        seq_text = whole.get("seq", "")
        seq = int(seq_text) if seq_text.isdigit() else None
        torn = _Torn(pos, seq, writer)
        if writer is None or seq is None:
            self.torn.append(torn)
            return
        chain = self.chains.get(writer)
        if chain is None:  # the writer's only line, cut by the crash
            self.torn.append(torn)
            return
        busy = chain.gap is not None or chain.pending is not None or chain.displaced is not None
        if chain.broken or busy:
            self.torn.append(torn)
            return
        expected = chain.tip.seq + 1 if chain.tip is not None else None
        if expected is not None and seq != expected:
            self.broke(
                chain,
                "truncated",
                pos,
                f"cut-short line has seq {seq} but the chain expects {expected}",
                seq,
            )
            return
        chain.torn = torn
        self.torn.append(torn)

    def complete(self, pos: Pos, link: ChainLink) -> None:
        chain = self.chain(link.writer)
        summary = chain.summary
        if summary.lines == 0:
            summary.first_seq, summary.first_at = link.seq, self.at(pos)
        summary.lines += 1
        summary.last_seq, summary.last_at = link.seq, self.at(pos)
        if chain.broken:
            return
        if not link.hash_ok:
            self.broke(chain, "edited", pos, "content does not match its hash", link.seq)
            return
        entry = _Entry(link.seq, link.hash, link.prev_hash, pos)
        if chain.gap is not None:
            self.resolve_gap(chain, entry)
        elif chain.pending is not None:
            self.resolve_pending(chain, entry)
        elif chain.tip is None:
            self.start(chain, entry)
        elif _links(entry, chain.tip):
            chain.torn = None
            chain.advance(entry)
            displaced = chain.displaced
            if displaced is not None and entry.seq >= displaced.seq:
                self.broke(
                    chain,
                    "inserted",
                    displaced.pos,
                    f"seq {displaced.seq} does not fit the chain, which goes on at "
                    f"{self.at(entry.pos)}",
                    displaced.seq,
                )
        elif chain.torn is not None:
            torn = chain.torn
            self.torn.remove(torn)
            self.broke(
                chain,
                "truncated",
                torn.pos,
                f"line cut short, yet its writer went on at {self.at(pos)} (not a crash)",
                torn.seq,
            )
        else:
            self.anomaly(chain, entry)

    def start(self, chain: _Chain, entry: _Entry) -> None:
        """First retained line of a writer: genesis, rotation anchor, or lines deleted."""
        chain.first = entry
        if entry.prev_hash is None or entry.seq == 1:
            if _links(entry, None):
                chain.advance(entry)
            else:
                self.broke(
                    chain,
                    "edited",
                    entry.pos,
                    "only seq 1 may have prevHash=null (chain genesis)",
                    entry.seq,
                )
            return
        chain.advance(entry)
        previous = entry.seq - 1
        if self.crossings is not None:
            note = self.crossings.notes.get((chain.writer, entry.seq))
            if note is None or note.file_id != self.file_ids[entry.pos[0]]:
                why = (
                    f"chain starts at seq {entry.seq}, but its previous line was in this same "
                    "file (no record of it coming from another file): deleted"
                )
            elif note.previous_id in self.retained:
                why = (
                    f"its previous line (seq {previous}) was in "
                    f"{self.retained[note.previous_id]}, which is retained, but is not there"
                )
            elif note.previous_id in self.crossings.rotated_away:
                self.anchor(
                    chain,
                    entry,
                    f"its previous line (seq {previous}) was in a file that rotation deleted",
                )
                return
            else:
                why = (
                    f"its previous line (seq {previous}) was in a file that is gone, but "
                    "rotation did not delete it (file removed, or its first line edited)"
                )
        elif entry.pos[0] == 0 and self.oldest_is_rotated:
            self.warnings.append(
                f"no {CROSSINGS_NAME} index: chains starting in the oldest file are accepted "
                "without proof that their earlier lines were rotated away"
            )
            self.anchor(chain, entry, "chain starts in the oldest retained rotated file")
            return
        else:
            why = (
                f"chain starts at seq {entry.seq} outside the oldest retained rotated file: "
                f"its {previous} earlier line(s) were deleted"
            )
        chain.gap = _Gap(1, previous, entry, None, why)

    def anchor(self, chain: _Chain, entry: _Entry, detail: str) -> None:
        chain.summary.anchored = True
        self.anchors.append(self.finding("anchor", entry.pos, detail, chain, entry.seq))

    def displaced_line(
        self, chain: _Chain, displaced: _Entry, tip: _Entry, reordered: bool
    ) -> None:
        """A line out of place: moved before its predecessor, or not of this chain at all."""
        if reordered:
            self.broke(
                chain,
                "reordered",
                displaced.pos,
                f"seq {displaced.seq} appears before its predecessor seq {tip.seq} "
                f"at {self.at(tip.pos)}",
                displaced.seq,
            )
        else:
            self.broke(
                chain,
                "inserted",
                displaced.pos,
                f"seq {displaced.seq} does not fit anywhere in the chain",
                displaced.seq,
            )

    def anomaly(self, chain: _Chain, entry: _Entry) -> None:
        tip = chain.tip
        assert tip is not None
        seq = entry.seq
        displaced = chain.displaced
        if displaced is not None:
            reordered = _links(displaced, tip) and entry.prev_hash == displaced.hash
            self.displaced_line(chain, displaced, tip, reordered)
        elif seq == tip.seq + 1:
            chain.pending = _Pending("mismatch", tip, entry)
        elif seq > tip.seq + 1:
            chain.gap = _Gap(tip.seq + 1, seq - 1, entry, tip)
        elif entry.hash in chain.recent:
            original = chain.recent[entry.hash]
            self.broke(chain, "inserted", entry.pos, f"duplicate of {self.at(original.pos)}", seq)
        else:
            parent = chain.recent.get(entry.prev_hash or "")
            if parent is not None and _links(entry, parent) and seq == tip.seq:
                chain.pending = _Pending("fork", tip, entry)
            elif parent is not None and _links(entry, parent):
                self.broke(
                    chain,
                    "inserted",
                    entry.pos,
                    f"seq {seq} already continues the chain earlier; this copy does not",
                    seq,
                )
            elif chain.first is not None and seq < chain.first.seq:
                self.broke(
                    chain,
                    "reordered",
                    chain.first.pos,
                    f"seq {chain.first.seq} appears before seq {seq} at {self.at(entry.pos)}",
                    chain.first.seq,
                )
            else:
                self.broke(
                    chain,
                    "inserted",
                    entry.pos,
                    f"seq {seq} after seq {tip.seq} at {self.at(tip.pos)} continues nothing",
                    seq,
                )

    def resolve_gap(self, chain: _Chain, entry: _Entry) -> None:
        """Wait for a skipped seq: if it links where the gap opened, the gap line jumped."""
        gap = chain.gap
        assert gap is not None
        if not gap.low <= entry.seq <= gap.high:
            return
        chain.gap = None
        if _links(entry, gap.before):
            chain.displaced = gap.at
            chain.advance(entry)
            return
        self.broke(
            chain,
            "reordered",
            gap.at.pos,
            f"seq {gap.at.seq} appears before seq {entry.seq} at {self.at(entry.pos)}",
            gap.at.seq,
        )

    def resolve_pending(self, chain: _Chain, entry: _Entry) -> None:
        pending = chain.pending
        assert pending is not None
        chain.pending = None
        tip, other = pending.tip, pending.other
        if pending.kind == "mismatch" and not _links(entry, tip):
            self.broke(
                chain,
                "edited",
                tip.pos,
                f"its hash differs from the prevHash that seq {other.seq} at "
                f"{self.at(other.pos)} chains to (content changed and re-hashed)",
                tip.seq,
            )
            return
        if pending.kind == "fork" and _links(entry, other):
            inserted, genuine = tip, other
        else:
            inserted, genuine = other, tip
        self.broke(
            chain,
            "inserted",
            inserted.pos,
            f"seq {inserted.seq} is not part of the chain, which goes on from "
            f"{self.at(genuine.pos)}",
            inserted.seq,
        )

    # -- end ------------------------------------------------------------------------------
    def finish(self) -> None:
        for chain in self.chains.values():
            if chain.broken:
                continue
            if chain.gap is not None:
                self.finish_gap(chain, chain.gap)
            elif chain.pending is not None:
                pending = chain.pending
                if pending.kind == "mismatch":
                    self.broke(
                        chain,
                        "edited",
                        pending.tip.pos,
                        f"its hash differs from the prevHash that seq {pending.other.seq} at "
                        f"{self.at(pending.other.pos)} chains to",
                        pending.tip.seq,
                    )
                else:
                    self.broke(
                        chain,
                        "inserted",
                        pending.other.pos,
                        f"second line with seq {pending.other.seq} (first at "
                        f"{self.at(pending.tip.pos)})",
                        pending.other.seq,
                    )
            elif chain.displaced is not None and chain.tip is not None:
                displaced = chain.displaced
                self.displaced_line(chain, displaced, chain.tip, _links(displaced, chain.tip))

    def finish_gap(self, chain: _Chain, gap: _Gap) -> None:
        missing = gap.high - gap.low + 1
        if gap.before is None:
            self.broke(chain, "deleted", gap.at.pos, gap.why, gap.at.seq)
            return
        if missing == 1:
            for torn in self.torn:
                if torn.writer is None and gap.before.pos < torn.pos < gap.at.pos:
                    self.torn.remove(torn)
                    self.broke(
                        chain,
                        "truncated",
                        torn.pos,
                        f"line (seq {gap.low}) cut short, yet its writer went on at "
                        f"{self.at(gap.at.pos)} (not a crash)",
                        gap.low,
                    )
                    return
        self.broke(
            chain,
            "deleted",
            gap.at.pos,
            f"{missing} line(s) (seq {gap.low}..{gap.high}) missing between "
            f"{self.at(gap.before.pos)} and here",
            gap.at.seq,
        )


def verify(directory: str | Path) -> VerifyReport:
    """Verify all chains in ``directory`` (a snapshot taken under the writers' lock)."""
    with open_snapshot(directory) as snapshot:
        names = [f.name for f in snapshot.files]
        verifier = _Verifier(names, [f.file_id for f in snapshot.files], snapshot.crossings)
        for index, item in enumerate(snapshot.files):
            last_file = index == len(snapshot.files) - 1
            for lineno, (raw, had_newline) in enumerate(item.lines(), start=1):
                verifier.line(index, lineno, raw, had_newline, last_file)
        verifier.finish()
        breaks = [finding for _, finding in sorted(verifier.breaks, key=lambda b: b[0])]
        for gap_name in snapshot.gaps:
            breaks.append(
                Finding(
                    "deleted",
                    gap_name,
                    0,
                    "rotated file is missing from the numbering (removed, or a process was "
                    "killed mid-rotation: then the next rotation renumbers the files)",
                )
            )
        truncated = [
            Finding(
                "truncated",
                names[t.pos[0]],
                t.pos[1],
                "cut short: its writer was killed while writing it, so the statement it "
                "records never returned a result (not tampering)",
                unescape_java(t.writer) if t.writer else None,
                t.seq,
            )
            for t in sorted(verifier.torn, key=lambda t: t.pos)
        ]
        return VerifyReport(
            directory=str(directory),
            files=names,
            lines=verifier.lines,
            writers={w.summary.writer: w.summary for w in verifier.chains.values()},
            breaks=breaks,
            truncated=truncated,
            anchors=verifier.anchors,
            locked=snapshot.locked,
            warnings=sorted(set(verifier.warnings)),
        )
