"""A reference HTTP witness (``lakegate audit witness-serve --dir D --port P``): keeps every
checkpoint POSTed to it, append-only, one file per log, and hands them back with GET.

It takes only well-formed checkpoint lines of the log the path names, checks their
signature when given the public key, never takes a checkpoint of fewer lines than the
newest it holds for that log (a rolled-back writer is told no), and never rewrites a file.
Run it on another host (or as another user) than the audit writer, behind TLS where the
network is not trusted; it is small on purpose so that it can be read in full.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit.checkpoint import Checkpoint, CheckpointError, append_line, parse_checkpoints
from audit.witness_http import MAX_BODY, log_id

_PATH = re.compile(r"/v1/logs/([0-9a-f]{24})/checkpoints")
_log = logging.getLogger("lakegate.witness")


class WitnessStore:
    """The checkpoint files of a witness directory, one writer (this process) at a time."""

    def __init__(self, directory: Path, public: Ed25519PublicKey | None = None) -> None:
        self.directory = directory
        self.public = public
        self._lock = threading.Lock()
        #: per log: the newest size held and the digests of the lines held (read once)
        self._held: dict[str, tuple[int, set[bytes]]] = {}
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, log: str) -> Path:
        return self.directory / f"{log}.checkpoints"

    def read(self, log: str) -> str | None:
        try:
            return self.path(log).read_text("ascii", "replace")
        except FileNotFoundError:
            return None

    def add(self, log: str, body: bytes) -> tuple[HTTPStatus, str]:
        """Store one checkpoint line; the status and one line saying why."""
        try:
            line = body.decode("ascii").strip()
            checkpoint = Checkpoint.from_json(line)
        except (UnicodeDecodeError, CheckpointError):
            return HTTPStatus.BAD_REQUEST, "not a checkpoint line"
        if "\n" in line or log_id(checkpoint.origin) != log:
            return HTTPStatus.BAD_REQUEST, "not a checkpoint of this log"
        if self.public is not None:
            try:
                checkpoint.check(self.public)
            except CheckpointError as exc:
                return HTTPStatus.FORBIDDEN, f"checkpoint refused: {exc}"
        text = checkpoint.to_json()
        digest = hashlib.sha256(text.encode("ascii")).digest()
        with self._lock:
            newest, seen = self._held.get(log) or self._load(log)
            if digest in seen:
                return HTTPStatus.OK, "already held"
            if checkpoint.size < newest:
                return HTTPStatus.CONFLICT, f"roll-back: this log had {newest} lines"
            append_line(self.path(log), text, fsync=True)
            seen.add(digest)
            self._held[log] = (checkpoint.size, seen)
        return HTTPStatus.CREATED, "stored"

    def _load(self, log: str) -> tuple[int, set[bytes]]:
        held = [c for _, c in parse_checkpoints(self.read(log) or "") if c is not None]
        lines = {hashlib.sha256(c.to_json().encode("ascii")).digest() for c in held}
        return max((c.size for c in held), default=0), lines


def _handler(store: WitnessStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "lakegate-witness"
        sys_version = ""
        # headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and
        # the client's delayed ACK hold every answer ~40 ms (under the audit write lock)
        disable_nagle_algorithm = True

        def _answer(self, status: HTTPStatus, text: str, kind: str = "text/plain") -> None:
            data = text.encode("ascii", "replace")
            self.send_response(status)
            self.send_header("Content-Type", f"{kind}; charset=us-ascii")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _log(self) -> str | None:
            match = _PATH.fullmatch(self.path)
            return match.group(1) if match else None

        def do_GET(self) -> None:
            log = self._log()
            text = store.read(log) if log else None
            if text is None:
                self._answer(HTTPStatus.NOT_FOUND, "no checkpoints of this log\n")
            else:
                self._answer(HTTPStatus.OK, text)

        def do_POST(self) -> None:
            log = self._log()
            if log is None:
                self._answer(HTTPStatus.NOT_FOUND, "no such path\n")
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._answer(HTTPStatus.LENGTH_REQUIRED, "Content-Length required\n")
                return
            if not 0 < length <= MAX_BODY:
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "one checkpoint line\n")
                return
            status, why = store.add(log, self.rfile.read(length))
            self._answer(status, why + "\n")

        def log_message(self, format: str, *args: object) -> None:
            _log.info("%s %s", self.address_string(), format % args)

    return Handler


def make_server(
    directory: Path, host: str, port: int, public: Ed25519PublicKey | None = None
) -> ThreadingHTTPServer:
    """The witness server bound to ``host:port`` (port 0: any free port)."""
    return ThreadingHTTPServer((host, port), _handler(WitnessStore(directory, public)))
