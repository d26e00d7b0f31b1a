"""RFC 6962 / RFC 9162 Merkle tree hashing, proofs and their verification.

Pure functions and one small incremental structure (:class:`Frontier`), no file I/O, so the
offline verifier (`lakegate audit verify-proof`) needs nothing but this module and a public
key. Leaves are audit lines (their bytes without the newline):

* leaf hash ``SHA-256(0x00 || line)``, interior node ``SHA-256(0x01 || left || right)``;
* the tree of ``n`` leaves splits at the largest power of two ``k < n`` (RFC 6962 §2.1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()
#: Perfect subtrees of ``2**TILE_HEIGHT`` leaves are stored (``audit.tiles``) so a proof at
#: 10^7 lines needs ~10^4 stored hashes and one block of lines, not every line.
TILE_HEIGHT = 10
TILE_SIZE = 1 << TILE_HEIGHT

#: ``subtree(start, end)``: the hash of leaves ``start..end-1`` (an RFC 6962 subtree).
Subtree = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof that does not verify, or one that cannot be built from what is retained."""


def leaf_hash(line: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + line).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def frontier_ranges(size: int) -> list[tuple[int, int]]:
    """The perfect subtrees a tree of ``size`` leaves is made of, left to right."""
    out: list[tuple[int, int]] = []
    start = 0
    for height in range(size.bit_length() - 1, -1, -1):
        if size >> height & 1:
            out.append((start, start + (1 << height)))
            start += 1 << height
    return out


class Frontier:
    """The compact state of a growing tree: the roots of its perfect subtrees.

    Appending a leaf costs one leaf hash plus, on average, one node hash (O(log n) at
    worst); ``on_tile(index, hash)`` is called whenever a block of ``TILE_SIZE`` leaves
    completes.
    """

    __slots__ = ("nodes", "on_tile", "size")

    def __init__(
        self,
        size: int = 0,
        nodes: Sequence[bytes] = (),
        on_tile: Callable[[int, bytes], None] | None = None,
    ) -> None:
        if len(nodes) != bin(size).count("1"):
            raise ProofError(f"a frontier of size {size} has {bin(size).count('1')} nodes")
        self.size = size
        self.nodes = list(nodes)
        self.on_tile = on_tile

    def copy(self) -> Frontier:
        return Frontier(self.size, self.nodes)

    def append(self, leaf: bytes) -> None:
        digest, size, height = leaf, self.size, 0
        while size & 1:
            digest = node_hash(self.nodes.pop(), digest)
            size >>= 1
            height += 1
            if height == TILE_HEIGHT and self.on_tile is not None:
                self.on_tile(self.size >> TILE_HEIGHT, digest)
        self.nodes.append(digest)
        self.size += 1

    def append_line(self, line: bytes) -> None:
        self.append(leaf_hash(line))

    def root(self) -> bytes:
        if not self.nodes:
            return EMPTY_ROOT
        digest = self.nodes[-1]
        for node in reversed(self.nodes[:-1]):
            digest = node_hash(node, digest)
        return digest


def inclusion_path(index: int, size: int, subtree: Subtree) -> list[bytes]:
    """RFC 6962 PATH(index, D[0:size]), bottom-up."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = split_point(end - start)
        if index < start + k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_path(old: int, new: int, subtree: Subtree) -> list[bytes]:
    """RFC 6962 PROOF(old, D[0:new]): that the first ``old`` leaves are unchanged."""
    if not 0 < old <= new:
        raise ProofError(f"no consistency proof from {old} to {new} leaves")
    if old == new:
        return []
    path: list[bytes] = []
    start, end, complete = 0, new, True
    m = old
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            m -= k
            start += k
            complete = False
    if not complete:
        path.append(subtree(start, end))
    path.reverse()
    return path


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes:
    """The root an inclusion path leads to (RFC 9162 §2.1.3.2); raises if malformed."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} outside a tree of {size} leaves")
    fn, sn, digest = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            raise ProofError("inclusion path is too long")
        if fn & 1 or fn == sn:
            digest = node_hash(sibling, digest)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            digest = node_hash(digest, sibling)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion path is too short")
    return digest


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, path: Sequence[bytes]
) -> None:
    """Raise :class:`ProofError` unless ``path`` proves tree ``old`` is a prefix of ``new``
    (RFC 9162 §2.1.4.2)."""
    if not 0 < old <= new:
        raise ProofError(f"no consistency between sizes {old} and {new}")
    if old == new:
        if path or old_root != new_root:
            raise ProofError("equal sizes with different roots")
        return
    nodes = list(path)
    if old & (old - 1) == 0:  # an exact power of two: the old root is a node of the new tree
        nodes.insert(0, old_root)
    if not nodes:
        raise ProofError("empty consistency path")
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    first = second = nodes[0]
    for node in nodes[1:]:
        if sn == 0:
            raise ProofError("consistency path is too long")
        if fn & 1 or fn == sn:
            first = node_hash(node, first)
            second = node_hash(node, second)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            second = node_hash(second, node)
        fn >>= 1
        sn >>= 1
    if sn != 0 or first != old_root or second != new_root:
        raise ProofError("consistency path does not join the two roots")


def subtree_resolver(
    leaf: Callable[[int], bytes],
    known: dict[tuple[int, int], bytes] | None = None,
    tiles: Sequence[bytes] = (),
) -> Subtree:
    """A ``subtree`` function from stored pieces: ``known`` ranges (e.g. the frontier at the
    first retained line), stored tiles, and leaf hashes for the rest."""
    fixed = dict(known or {})

    def subtree(start: int, end: int) -> bytes:
        if (start, end) in fixed:
            return fixed[(start, end)]
        if end - start == 1:
            return leaf(start)
        if end - start == TILE_SIZE and start % TILE_SIZE == 0 and start // TILE_SIZE < len(tiles):
            return tiles[start // TILE_SIZE]
        k = split_point(end - start)
        return node_hash(subtree(start, start + k), subtree(start + k, end))

    return subtree
