"""RFC 6962 hashing and proofs: the published Certificate Transparency vectors, and every
proof of every small tree against a tree computed straight from the RFC's definition."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := str(Path(__file__).resolve().parents[2])) not in sys.path:
    sys.path.insert(0, _ROOT)

from audit.merkle import (
    EMPTY_ROOT,
    TILE_SIZE,
    Frontier,
    ProofError,
    consistency_path,
    frontier_ranges,
    inclusion_path,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    split_point,
    subtree_resolver,
    verify_consistency,
)

# RFC 6962's reference inputs and tree heads, as in certificate-transparency's tests.
CT_LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243",
             "5051525354555657", "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = {
    0: ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    5: ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}  # fmt: skip


def mth(leaves: list[bytes]) -> bytes:
    """MTH straight from RFC 6962 §2.1."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = split_point(len(leaves))
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def leaves_of(n: int) -> list[bytes]:
    return [leaf_hash(f"line {i}".encode()) for i in range(n)]


def test_roots_match_the_rfc_6962_reference_tree_heads() -> None:
    frontier = Frontier()
    assert frontier.root().hex() == CT_ROOTS[0]
    for size, line in enumerate(CT_LEAVES, start=1):
        frontier.append_line(line)
        assert frontier.root().hex() == CT_ROOTS[size]


def test_inclusion_paths_match_the_rfc_6962_reference_proofs() -> None:
    leaves = [leaf_hash(line) for line in CT_LEAVES]
    for index, expected in CT_INCLUSION.items():
        path = inclusion_path(index, 8, lambda a, b: mth(leaves[a:b]))
        assert [node.hex() for node in path] == expected
        assert root_from_inclusion(index, 8, leaves[index], path).hex() == CT_ROOTS[8]


@pytest.mark.parametrize("size", range(1, 34))
def test_every_inclusion_proof_verifies_and_a_changed_one_does_not(size: int) -> None:
    leaves = leaves_of(size)
    root = mth(leaves)
    for index in range(size):
        path = inclusion_path(index, size, lambda a, b: mth(leaves[a:b]))
        assert root_from_inclusion(index, size, leaves[index], path) == root
        other = leaf_hash(b"edited")
        assert root_from_inclusion(index, size, other, path) != root
        if path:
            with pytest.raises(ProofError, match="inclusion path is too short"):
                root_from_inclusion(index, size, leaves[index], path[:-1])


@pytest.mark.parametrize("new", range(1, 34))
def test_every_consistency_proof_verifies_and_a_rewritten_prefix_does_not(new: int) -> None:
    leaves = leaves_of(new)
    for old in range(1, new + 1):
        path = consistency_path(old, new, lambda a, b: mth(leaves[a:b]))
        verify_consistency(old, new, mth(leaves[:old]), mth(leaves), path)
        forked = mth([leaf_hash(b"rewritten"), *leaves[1:old]])
        with pytest.raises(ProofError):
            verify_consistency(old, new, forked, mth(leaves), path)


def test_frontier_reports_each_completed_tile_and_keeps_log_n_nodes() -> None:
    tiles: dict[int, bytes] = {}
    frontier = Frontier(on_tile=tiles.__setitem__)
    leaves = leaves_of(3 * TILE_SIZE + 5)
    for leaf in leaves:
        frontier.append(leaf)
    assert sorted(tiles) == [0, 1, 2]
    for index, digest in tiles.items():
        assert digest == mth(leaves[index * TILE_SIZE : (index + 1) * TILE_SIZE])
    assert frontier.root() == mth(leaves)
    assert len(frontier.nodes) == bin(len(leaves)).count("1")
    assert [mth(leaves[a:b]) for a, b in frontier_ranges(len(leaves))] == frontier.nodes


def test_proof_from_a_frontier_tiles_and_retained_leaves_only() -> None:
    """Leaves before the first retained one (rotated away) are needed only as frontier
    nodes or stored tiles."""
    leaves = leaves_of(2 * TILE_SIZE + 300)
    first = TILE_SIZE + 77  # older leaves are gone
    base = Frontier()
    for leaf in leaves[:first]:
        base.append(leaf)
    known = dict(zip(frontier_ranges(first), base.nodes, strict=True))
    tiles = [mth(leaves[:TILE_SIZE]), mth(leaves[TILE_SIZE : 2 * TILE_SIZE])]

    def retained(at: int) -> bytes:
        assert at >= first, f"leaf {at} was rotated away"
        return leaves[at]

    subtree = subtree_resolver(retained, known, tiles)
    for index in (first, first + 1, 2 * TILE_SIZE - 1, 2 * TILE_SIZE, len(leaves) - 1):
        path = inclusion_path(index, len(leaves), subtree)
        assert root_from_inclusion(index, len(leaves), leaves[index], path) == mth(leaves)


def test_lines_are_found_walking_either_way_from_known_starts() -> None:
    from audit.proofs import _Lines

    data = b"".join(f"line {i}\n".encode() for i in range(50))
    lines = _Lines(data, 50, {30: data.index(b"line 30")})
    for k in (29, 0, 1, 49, 31, 10, 48):
        assert lines.line(k) == f"line {k}".encode()
