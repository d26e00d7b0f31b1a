"""What the Merkle tree and signed checkpoints cost, and what a proof costs at 10^7 lines.

Run from the repository root:
``.venv/bin/python benchmarks/audit_proofs.py [--seconds 5] [--rate 20000] [--leaves 10000000]``

1. **Added cost per line at a fixed rate**: one writer writes one-line statements paced at
   ``--rate`` lines/s (default 20,000), once without and once with the tree (checkpoints
   every 10,000 lines or 60 s, a witness directory), alternating ``--rounds`` times. Prints
   ``write()`` p50/p99/p99.9 per mode, the difference (the added latency), and the writer
   thread's CPU per line (load-independent) and the share of writes over 1 ms (on a host
   whose load exceeds its cores, those are preemptions, in both modes alike). Target: at
   most 1 ms added at p99.
2. **End to end on the log just written**: ``prove`` of a random event (search of the retained
   files included), ``verify_proof`` offline, and the full tree check.
3. **Proof at 10^7 lines**: the tree over ``--leaves`` synthetic lines shaped like audit lines
   (one template, the index substituted: ~420 bytes) is built in memory with the same
   ``Frontier`` the writer uses, keeping the 1024-leaf tiles (``audit.tiles``) it stores; then
   inclusion proofs of random leaves are computed from those tiles plus the leaves of one
   block (which ``prove`` reads back from the log file; here they are re-derived, so file
   reading is not in this figure: part 2 has it) and verified. Prints the build rate, the
   proof size (hashes and JSON bytes) and the proof and verification times.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from audit import AuditEvent, AuditLog, statement_hash  # noqa: E402
from audit.checkpoint import CheckpointSettings, generate_key, load_public_key  # noqa: E402
from audit.merkle import (  # noqa: E402
    TILE_SIZE,
    Frontier,
    inclusion_path,
    leaf_hash,
    root_from_inclusion,
    subtree_resolver,
)
from audit.proofs import prove, verify_proof, verify_tree  # noqa: E402
from benchmarks import harness  # noqa: E402

STATEMENT_HASH = statement_hash("SELECT id, region, email FROM main.sales.orders")
TEMPLATE = (
    "2026-11-22 10:00:00,123 INFO lakegate.audit: allowed=true\tugi=user7 (auth:TOKEN)"
    "\tip=/127.0.0.1\tcmd=select\tsrc=main.sales.table3\tdst=null\tperm=null\tproto=spark"
    "\tcallerContext=null\tsucceeded=true\teventId={i:032x}\tts=2026-11-22T10:00:00.123Z"
    "\tqueryId=q{i}\tstmtHash=" + STATEMENT_HASH + "\tcolumns=id,region,email"
    "\tmasked=email:hash\trowFilters=emea-only\tpolicies=analysts-read,emea-only,hide-pii"
    "\treason=null\tdurationMs=812\twriter=host:1:deadbeef\tseq={i}\tprevHash=" + "a" * 64
)


def event(i: int) -> AuditEvent:
    return AuditEvent(
        allowed=True, user=f"user{i % 50}", auth="TOKEN", cmd="select",
        src=f"main.sales.table{i % 20}", succeeded=True, query_id=f"q{i}",
        stmt_hash=STATEMENT_HASH, columns=("id", "region", "email"),
        masked=(("email", "hash"),), row_filters=("emea-only",),
        policies=("analysts-read", "emea-only", "hide-pii"), duration_ms=812,
    )  # fmt: skip


def paced(directory: Path, seconds: float, rate: int, settings: CheckpointSettings | None):
    """Write one-line statements at ``rate``/s: (write latencies ns, CPU s per line, ids)."""
    latencies: list[int] = []
    ids: list[str] = []
    count = int(seconds * rate)
    events = [event(i) for i in range(count)]
    with AuditLog(directory, max_bytes=64 << 20, backup_count=20, checkpoints=settings) as log:
        cpu = time.thread_time()
        start = time.perf_counter()
        for i, item in enumerate(events):
            due = start + i / rate
            while (now := time.perf_counter()) < due:
                if due - now > 0.0005:
                    time.sleep(due - now - 0.0003)
            before = time.perf_counter_ns()
            log.write([item])
            latencies.append(time.perf_counter_ns() - before)
        achieved = count / (time.perf_counter() - start)
        cpu = time.thread_time() - cpu
        ids = [item.event_id or "" for item in events]
    print(f"    achieved {achieved:,.0f} lines/s")
    return latencies, cpu / count, ids


def pct(values: list[int], q: float) -> float:
    return harness.percentile(values, q) / 1000


def part_rate(root: Path, args: argparse.Namespace, settings: CheckpointSettings) -> Path:
    print(f"1. write() at {args.rate:,} lines/s, one line per statement, {args.seconds} s a run")
    runs: dict[str, list[list[int]]] = {"plain": [], "tree": []}
    cpus: dict[str, list[float]] = {"plain": [], "tree": []}
    last = root
    for round_ in range(args.rounds):
        for mode in ("plain", "tree"):
            directory = root / f"{mode}-{round_}"
            print(f"  round {round_ + 1} {mode}")
            lat, cpu, _ = paced(
                directory, args.seconds, args.rate, settings if mode == "tree" else None
            )
            runs[mode].append(lat)
            cpus[mode].append(cpu)
            if mode == "tree":
                last = directory
            else:
                shutil.rmtree(directory)
    row = (
        "  {:<6} p50 {:>7.1f} µs  p99 {:>7.1f} µs  p99.9 {:>8.1f} µs  CPU {:>5.1f} µs/line"
        "  writes > 1 ms: {:.2%}"
    )
    for mode, lats in runs.items():
        merged = [x for run in lats for x in run]
        print(
            row.format(
                mode, pct(merged, 0.5), pct(merged, 0.99), pct(merged, 0.999),
                statistics.median(cpus[mode]) * 1e6,
                sum(1 for x in merged if x > 1_000_000) / len(merged),
            )
        )  # fmt: skip
    plain = [x for run in runs["plain"] for x in run]
    tree = [x for run in runs["tree"] for x in run]
    print(
        f"  added: p50 {pct(tree, 0.5) - pct(plain, 0.5):+.1f} µs, "
        f"p99 {pct(tree, 0.99) - pct(plain, 0.99):+.1f} µs, CPU "
        f"{(statistics.median(cpus['tree']) - statistics.median(cpus['plain'])) * 1e6:+.1f} "
        "µs/line"
    )
    return last


def part_end_to_end(directory: Path, settings: CheckpointSettings, ids: int) -> None:
    public = load_public_key(settings.public_key_path)
    lines = sum(1 for _ in directory.glob("audit.log*"))
    start = time.perf_counter()
    report = verify_tree(directory, public, witness=settings.witness)
    took = time.perf_counter() - start
    print(f"2. on the log written above ({report.size:,} lines, {lines} file(s)):")
    print(f"  tree check: {took:.2f} s ({report.size / took:,.0f} lines/s), ok={report.ok}")
    text = (directory / "audit.log").read_text("ascii").splitlines()
    chosen = random.Random(7).sample(text[: max(1, len(text) - 5000)], k=min(ids, len(text)))
    for line in chosen:
        event_id = line.split("\teventId=", 1)[1].split("\t", 1)[0]
        begin = time.perf_counter()
        proof = prove(directory, event_id)
        proved = time.perf_counter() - begin
        begin = time.perf_counter()
        verdict = verify_proof(proof, public)
        checked = time.perf_counter() - begin
        size = len(json.dumps(proof))
        print(
            f"  prove {proved * 1000:.0f} ms (search included), verify-proof "
            f"{checked * 1000:.2f} ms, {len(proof['path'])} hashes, {size:,} bytes JSON: "
            f"{verdict[:2]}"
        )


def part_scale(leaves: int, samples: int) -> None:
    print(f"3. proofs at {leaves:,} leaves (synthetic audit-shaped lines, in memory)")
    tiles: list[bytes] = []
    frontier = Frontier(on_tile=lambda index, digest: tiles.append(digest))
    begin = time.perf_counter()
    for i in range(leaves):
        frontier.append_line(TEMPLATE.format(i=i).encode("ascii"))
    built = time.perf_counter() - begin
    root = frontier.root()
    print(
        f"  built in {built:.1f} s ({leaves / built:,.0f} lines/s, one core); "
        f"{len(tiles):,} tiles = {len(tiles) * 32:,} bytes; frontier {len(frontier.nodes)} nodes"
    )

    def leaf(at: int) -> bytes:  # prove() reads these lines back from the log file
        return leaf_hash(TEMPLATE.format(i=at).encode("ascii"))

    subtree = subtree_resolver(leaf, tiles=tiles)
    proof_ms: list[float] = []
    verify_ms: list[float] = []
    for index in random.Random(11).sample(range(leaves), k=samples):
        begin = time.perf_counter()
        path = inclusion_path(index, leaves, subtree)
        proof_ms.append((time.perf_counter() - begin) * 1000)
        begin = time.perf_counter()
        assert root_from_inclusion(index, leaves, leaf(index), path) == root
        verify_ms.append((time.perf_counter() - begin) * 1000)
    document = {
        "format": "lakegate-audit-inclusion-proof/v1",
        "eventId": "0" * 32,
        "leafIndex": leaves - 1,
        "treeSize": leaves,
        "line": TEMPLATE.format(i=leaves - 1) + "\thash=" + "b" * 64,
        "path": [node.hex() for node in path],
        "checkpoint": {"origin": "lakegate-audit:/var/lib/lakegate/audit", "size": leaves,
                       "root": root.hex(), "time": "2026-11-22T10:00:00.123Z",
                       "key": "0" * 16, "sig": "A" * 88},
    }  # fmt: skip
    written = len(json.dumps(document, indent=1))
    print(
        f"  proof: {len(path)} hashes ({len(path) * 32} bytes), ~{written:,} "
        f"bytes as written by 'audit prove'; computed in p50 {statistics.median(proof_ms):.1f} ms"
        f" / max {max(proof_ms):.1f} ms (one block of {TILE_SIZE} leaves + tiles), verified in "
        f"p50 {statistics.median(verify_ms) * 1000:.0f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--leaves", type=int, default=10_000_000)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="audit-proofs-"))
    try:
        key = root / "keys" / "signing.pem"
        generate_key(key)
        settings = CheckpointSettings(key=key, witness=root / "witness")
        last = part_rate(root / "logs", args, settings)
        part_end_to_end(last, settings, 3)
        if args.leaves:  # --leaves 0 skips part 3
            part_scale(args.leaves, args.samples)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
