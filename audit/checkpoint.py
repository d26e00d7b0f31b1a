"""Signed checkpoints of the audit tree: Ed25519 keys, signing, checking, files, the witness.

A checkpoint says "the log ``origin`` had ``size`` lines with Merkle root ``root`` at
``time``", signed with a key kept outside the audit directory. It is one JSON line in
``<audit dir>/audit.checkpoints`` and the same line in the witness (a directory elsewhere),
so a log cut short or rolled back contradicts checkpoints it cannot take back.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

CHECKPOINTS_NAME = "audit.checkpoints"
SIGNED_HEADER = "lakegate-audit-checkpoint v1"
_FILE_MODE = 0o640


class CheckpointError(Exception):
    """A key or checkpoint that cannot be used (one line, says which file and why)."""


@dataclass(frozen=True)
class CheckpointSettings:
    """``audit_checkpoints:`` in lakegate.yaml: turns the Merkle tree and checkpoints on."""

    key: Path  # Ed25519 private key (PKCS#8 PEM), owner-only, outside the audit directory
    public_key: Path | None = None  # default: ``<key>.pub``
    every_lines: int = 10_000
    every_seconds: float = 60.0
    witness: Path | None = None  # a directory outside the audit directory (maybe a git repo)
    origin: str | None = None  # default: the audit directory's absolute path
    witness_url: str | None = None  # an HTTP witness (audit/witness_http.py)
    witness_unreachable: str = "refuse"  # or "record": keep it and warn when the URL is down
    witness_timeout: float = 5.0  # seconds per HTTP request to the witness

    @property
    def public_key_path(self) -> Path:
        return self.public_key or self.key.with_name(self.key.name + ".pub")


def default_origin(directory: Path) -> str:
    return f"lakegate-audit:{directory.resolve()}"


def check_origin(origin: str) -> str:
    if not origin or not origin.isascii() or not origin.isprintable():
        raise CheckpointError("checkpoint origin must be printable ASCII on one line")
    return origin


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_key(path: Path, public_path: Path | None = None) -> Path:
    """Write a new private key (mode 0600, never overwriting) and its public key."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CheckpointError(f"signing key {path} exists; not overwriting it") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public_path = public_path or path.with_name(path.name + ".pub")
    public_path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return public_path


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The signing key; refused unless it is a regular file only its owner can read."""
    try:
        info = path.stat()
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read signing key {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
        raise CheckpointError(f"signing key {path} must be a file readable by its owner only")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except ValueError:
        raise CheckpointError(f"signing key {path} is not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"signing key {path} is not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"cannot read public key {path}: {exc.strerror}") from None
    except ValueError:
        raise CheckpointError(f"public key {path} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"public key {path} is not an Ed25519 key")
    return key


@dataclass(frozen=True)
class Checkpoint:
    """One signed statement of the tree's size and root.

    ``file`` and ``frontier`` are set on the checkpoint written when an audit file begins
    (genesis and every rotation): the id of that file and the perfect-subtree roots at
    ``size``, from which the tree continues over the file's lines. They are not signed; a
    reader checks that they fold to the signed ``root``.
    """

    origin: str
    size: int
    root: str  # 64 hex
    time: str  # UTC ISO-8601 with Z
    key: str = ""  # key id: first 16 hex of SHA-256 of the raw public key
    sig: str = ""  # base64 Ed25519 signature of signed_text()
    file: str | None = None
    frontier: list[str] = field(default_factory=list)

    def signed_text(self) -> bytes:
        return (
            f"{SIGNED_HEADER}\norigin {self.origin}\nsize {self.size}\nroot {self.root}\n"
            f"time {self.time}\n"
        ).encode("ascii")

    def signed(self, private: Ed25519PrivateKey) -> Checkpoint:
        signature = base64.b64encode(private.sign(self.signed_text())).decode("ascii")
        values = asdict(self) | {"key": key_id(private.public_key()), "sig": signature}
        return Checkpoint(**values)

    def check(self, public: Ed25519PublicKey, origin: str | None = None) -> None:
        """Raise :class:`CheckpointError` unless ``public`` signed it (for ``origin``)."""
        if self.key != key_id(public):
            raise CheckpointError(f"signed by key {self.key or '(none)'}, not {key_id(public)}")
        try:
            public.verify(base64.b64decode(self.sig, validate=True), self.signed_text())
        except (InvalidSignature, ValueError):
            raise CheckpointError("bad signature") from None
        if origin is not None and self.origin != origin:
            raise CheckpointError(f"checkpoint of another log ({self.origin!r})")

    def to_json(self) -> str:
        data: dict[str, object] = {
            k: v for k, v in asdict(self).items() if k not in ("file", "frontier")
        }
        if self.file is not None:
            data["file"] = self.file
            data["frontier"] = self.frontier
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        try:
            data = json.loads(text)
            frontier = data.get("frontier") or []
            checkpoint = cls(
                origin=str(data["origin"]),
                size=int(data["size"]),
                root=str(data["root"]),
                time=str(data["time"]),
                key=str(data.get("key", "")),
                sig=str(data.get("sig", "")),
                file=None if data.get("file") is None else str(data["file"]),
                frontier=[str(item) for item in frontier],
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            raise CheckpointError("not a checkpoint line") from None
        if checkpoint.size < 0 or len(checkpoint.root) != 64:
            raise CheckpointError("not a checkpoint line")
        return checkpoint


def append_line(path: Path, text: str, *, fsync: bool = False) -> None:
    """Append one line with one ``write(2)`` (O_APPEND), so concurrent appenders never mix."""
    data = (text + "\n").encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(5, "short write", str(path))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def witness_file(witness: Path, origin: str) -> Path:
    """One file per log in the witness directory (several logs may share one witness)."""
    return witness / f"{hashlib.sha256(origin.encode('ascii')).hexdigest()[:24]}.checkpoints"


def read_checkpoints(path: Path) -> list[tuple[int, Checkpoint | None]]:
    """``(line number, checkpoint or None for a malformed line)``; empty when absent."""
    with contextlib.suppress(FileNotFoundError):
        return parse_checkpoints(path.read_text("ascii", "replace"))
    return []


def parse_checkpoints(text: str) -> list[tuple[int, Checkpoint | None]]:
    out: list[tuple[int, Checkpoint | None]] = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            out.append((number, Checkpoint.from_json(line)))
        except CheckpointError:
            out.append((number, None))
    return out
