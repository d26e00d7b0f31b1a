"""The gateway's public port: TLS goes on to the gRPC server, plaintext gets one clear line.

A Spark Connect client without `use_ssl=true` (PySpark 4 no longer turns TLS on for a token)
speaks plaintext HTTP/2 to a TLS port; gRPC's server drops it during the handshake, the
client reads that as UNAVAILABLE and retries silently for minutes. So the public port is
this listener: it looks at the first bytes of each connection (without consuming them). A
TLS record (0x16) is relayed byte for byte to the TLS gRPC server on loopback, which does
the handshake itself (the relay never sees plaintext). A plaintext HTTP/2 connection is
answered, on each stream it opens, with a gRPC status FAILED_PRECONDITION (not retried by
any client) saying to add `use_ssl=true`, then closed; anything else is closed. Nothing a
plaintext client sent is read beyond the frame headers, or kept.

The relay's loopback connections are mapped to the clients' own addresses (`client_of`),
so the audit names the analyst's address, not the relay's.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import struct
import threading
import time
from urllib.parse import quote

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PLAINTEXT_MESSAGE = (
    "this Lakegate gateway accepts Spark Connect over TLS only: add ;use_ssl=true to the "
    "sc:// URL (sc://host:port/;use_ssl=true;token=...) and trust the gateway's CA "
    "(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH); the request just sent, token included, was not "
    "encrypted"
)
_HTTP1_BODY = b"Lakegate Spark Connect gateway: gRPC over TLS (use_ssl=true)"
HTTP1_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    + f"Content-Length: {len(_HTTP1_BODY)}\r\n\r\n".encode()
    + _HTTP1_BODY
)
FIRST_BYTES_SECONDS = 10.0  # a connection that sends nothing is closed
PLAINTEXT_SECONDS = 5.0  # how long a plaintext connection is answered before it is closed
MAX_CONNECTIONS = 1024
_BUFFER = 256 * 1024
_FAILED_PRECONDITION = 9
_SETTINGS, _HEADERS, _PING, _GOAWAY = 4, 1, 6, 7


class Front:
    """Listens on (host, port); relays TLS connections to `upstream` (a loopback port)."""

    def __init__(self, host: str, port: int, upstream: int) -> None:
        self.upstream = upstream
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=128)
        self.port = int(self._sock.getsockname()[1])
        self._clients: dict[int, str] = {}  # relay's loopback port -> client address
        self._lock = threading.Lock()
        self._open = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="lakegate-front", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)

    def client_of(self, relay_port: int) -> str | None:
        """The client address behind one of the relay's loopback connections, if any."""
        with self._lock:
            return self._clients.get(relay_port)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, addr = self._sock.accept()
            except OSError:
                return
            with self._lock:
                full = self._open >= MAX_CONNECTIONS
                if not full:
                    self._open += 1
            if full:
                conn.close()
                continue
            threading.Thread(
                target=self._serve, args=(conn, addr[0]), name="lakegate-front-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket, ip: str) -> None:
        try:
            conn.settimeout(FIRST_BYTES_SECONDS)
            head = conn.recv(len(PREFACE), socket.MSG_PEEK)
            if head[:1] == b"\x16":
                conn.settimeout(None)
                self._relay(conn, ip)
            elif PREFACE.startswith(head[:4]) and head:
                _answer_plaintext(conn)
            elif head:
                conn.sendall(HTTP1_ANSWER)
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self._open -= 1

    def _relay(self, conn: socket.socket, ip: str) -> None:
        up = socket.create_connection(("127.0.0.1", self.upstream))
        # gRPC writes small HTTP/2 frames and turns Nagle's algorithm off on its own
        # sockets; a relay that kept it on would hold each frame back for the peer's
        # delayed ACK (tens of ms per round trip)
        for s in (conn, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        port = int(up.getsockname()[1])
        with self._lock:
            self._clients[port] = ip
        back = threading.Thread(target=_pump, args=(up, conn), daemon=True)
        back.start()
        try:
            _pump(conn, up)
            back.join()
        finally:
            with self._lock:
                self._clients.pop(port, None)
            up.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until src ends, then end dst's sending side."""
    buf = bytearray(_BUFFER)
    view = memoryview(buf)
    try:
        while True:
            n = src.recv_into(buf)
            if not n:
                break
            dst.sendall(view[:n])
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags])
    return head + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out, value = [limit], value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes([*out, value])


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing (no Huffman coding)."""
    return b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value


def _trailers_only() -> bytes:
    """A gRPC trailers-only response block: status 200, FAILED_PRECONDITION, the message,
    and the same as a google.rpc.Status (PySpark reads its message from there)."""
    message = quote(PLAINTEXT_MESSAGE, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode()
    text = PLAINTEXT_MESSAGE.encode()
    status = bytes([0x08, _FAILED_PRECONDITION, 0x12]) + _varint(len(text)) + text
    return (
        b"\x88"  # :status 200 (static table entry 8)
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"grpc-status", str(_FAILED_PRECONDITION).encode())
        + _literal(b"grpc-message", message)
        + _literal(b"grpc-status-details-bin", base64.b64encode(status).rstrip(b"="))
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes([*out, value])


def _answer_plaintext(conn: socket.socket) -> None:
    """Read frame headers only; answer each new stream with the status, then GOAWAY."""
    conn.settimeout(PLAINTEXT_SECONDS)
    deadline = time.monotonic() + PLAINTEXT_SECONDS  # a trickling client is cut here too
    _read_exactly(conn, len(PREFACE))
    conn.sendall(_frame(_SETTINGS, 0, 0))
    block, last = _trailers_only(), 0
    try:
        while time.monotonic() < deadline:
            length, kind, flags, stream = _read_header(conn)
            payload = _read_exactly(conn, length) if kind in (_SETTINGS, _PING) else None
            if payload is None:
                _discard(conn, length)
            if kind == _SETTINGS and not flags & 1:
                conn.sendall(_frame(_SETTINGS, 1, 0))
            elif kind == _PING and not flags & 1 and payload is not None:
                conn.sendall(_frame(_PING, 1, 0, payload))
            elif kind == _HEADERS and stream > last:
                last = stream
                conn.sendall(_frame(_HEADERS, 0x5, stream, block))  # END_STREAM|HEADERS
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError):
        goaway = struct.pack(">II", last, 0)
        conn.sendall(_frame(_GOAWAY, 0, 0, goaway))


def _read_header(conn: socket.socket) -> tuple[int, int, int, int]:
    head = _read_exactly(conn, 9)
    length = int.from_bytes(head[:3], "big")
    if length > 1 << 20:
        raise ValueError("frame too large")
    return length, head[3], head[4], int.from_bytes(head[5:], "big") & 0x7FFFFFFF


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    return data


def _discard(conn: socket.socket, n: int) -> None:
    while n > 0:
        chunk = conn.recv(min(n, _BUFFER))
        if not chunk:
            raise ValueError("connection closed")
        n -= len(chunk)
