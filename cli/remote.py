"""`lakegate sql --gateway`: one statement through a running `lakegate connect` gateway.

The client side only: the stock `pyspark.sql.connect` client over TLS with a bearer token,
so no local Spark starts and no catalog or policy is read here; the gateway authenticates the
token, decides as the token's user and answers a refusal with one gRPC status line, which
becomes the same line and exit code a local `lakegate sql` gives. The statement is parsed
here first (sqlglot only) so a statement that does not parse exits 4 in both modes without a
round trip; the gateway parses and decides again.
"""

from __future__ import annotations

import os
import socket
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.kit import (
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    fail,
    print_rows,
)

DEFAULT_PORT = 15002
CONNECT_TIMEOUT = 10.0  # seconds to reach the gateway and finish the TLS handshake
USER_AGENT = "lakegate-cli"

# A refusal's gRPC status (api/connect/service.py `_fail`) -> the local mode's exit code.
# UNAUTHENTICATED: the token was refused, an access denial like a policy's; UNAVAILABLE:
# the gateway cannot serve (its audit log is down), like a Spark that cannot start.
_EXIT_OF_STATUS = {
    "UNAUTHENTICATED": EXIT_DENIED,
    "PERMISSION_DENIED": EXIT_DENIED,
    "UNAVAILABLE": EXIT_UNAVAILABLE,
}


class GatewayUsage(Exception):
    """A mistake in how the gateway was named or reached (exit 2); the message is one line
    and never holds the token."""


@dataclass(frozen=True)
class Gateway:
    """Where the gateway listens and how to trust it; the token never leaves this object
    except as the call credential."""

    host: str
    port: int
    token: str
    ca: bytes | None  # PEM roots; None: the system's

    def __repr__(self) -> str:  # never the token, whatever prints this
        return f"Gateway({self.host}:{self.port})"


def parse_url(url: str) -> tuple[str, int]:
    """`sc://host[:port]` only: parameters such as `;token=` are refused, since a token in a
    URL shows in `ps` and shell history (the token comes from a file or LAKEGATE_TOKEN)."""
    if not url.startswith("sc://"):
        raise GatewayUsage("--gateway must be sc://host:port")
    parts = urllib.parse.urlsplit("http://" + url[len("sc://") :])
    if parts.path not in ("", "/") or parts.query or parts.fragment or ";" in url:
        raise GatewayUsage(
            "--gateway takes sc://host:port only; give the token with --token-file or "
            "LAKEGATE_TOKEN and the CA with --ca-file"
        )
    if parts.username is not None or not parts.hostname:
        raise GatewayUsage("--gateway must be sc://host:port")
    try:
        port = parts.port
    except ValueError:
        raise GatewayUsage("--gateway port must be a number from 1 to 65535") from None
    if port == 0:
        raise GatewayUsage("--gateway port must be a number from 1 to 65535")
    return parts.hostname, port or DEFAULT_PORT


def read_token(token_file: str | None) -> str:
    """The bearer token from `token_file`, else LAKEGATE_TOKEN; one line when absent or when
    it holds characters no bearer token has (it goes into an HTTP/2 header)."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
            raise GatewayUsage(f"cannot read the token file {token_file}: {why}") from None
        where = f"the token file {token_file}"
    else:
        token = os.environ.get("LAKEGATE_TOKEN", "").strip()
        where = "LAKEGATE_TOKEN"
    if not token:
        raise GatewayUsage(
            "--gateway needs a token: --token-file FILE or LAKEGATE_TOKEN "
            "(`lakegate token create` on the gateway's host makes one)"
        )
    if not all(33 <= ord(c) <= 126 for c in token):
        raise GatewayUsage(f"{where} is not a bearer token (spaces or control characters)")
    return token


def read_ca(ca_file: str | None) -> bytes | None:
    if ca_file is None:
        return None
    try:
        return Path(ca_file).read_bytes()
    except OSError as e:
        raise GatewayUsage(f"cannot read the CA file {ca_file}: {e.strerror}") from None


def check_reachable(gw: Gateway) -> str | None:
    """None when a TLS handshake with the gateway succeeds, else the one line saying why.

    Done with Python's ssl before gRPC connects, because gRPC reports a refused port and an
    untrusted certificate alike (UNAVAILABLE) and its client retries those for minutes."""
    where = f"{gw.host}:{gw.port}"
    ctx = ssl.create_default_context()
    if gw.ca is not None:
        try:
            ctx.load_verify_locations(cadata=gw.ca.decode("ascii", "replace"))
        except ssl.SSLError:
            return "the CA file holds no PEM certificate"
    ctx.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection((gw.host, gw.port), timeout=CONNECT_TIMEOUT) as sock,
            ctx.wrap_socket(sock, server_hostname=gw.host),
        ):
            return None
    except ssl.SSLCertVerificationError as e:
        return (
            f"TLS: the gateway at {where} has a certificate this client does not trust "
            f"({e.verify_message}); --ca-file names the CA that signed it"
        )
    except ssl.SSLError as e:
        return f"TLS handshake with the gateway at {where} failed ({e.reason or 'SSLError'})"
    except TimeoutError:
        return f"gateway {where} did not answer within {CONNECT_TIMEOUT:.0f} s"
    except OSError as e:
        return f"cannot reach the gateway at {where} ({e.strerror or type(e).__name__})"


def configured_gateway(
    config: Path, token_file: str | None, ca_file: str | None
) -> tuple[Gateway | None, str]:
    """The gateway `lakegate sql` uses when none is named: the config's `connect:` section
    (TLS configured), with a token at hand (--token-file or LAKEGATE_TOKEN) and answering a
    TLS handshake. (None, why) otherwise, the why said before Spark starts here instead.

    The CA is --ca-file, else the `ca.pem` that `lakegate certs` wrote beside the server
    certificate, else the system's."""
    from governance.config import Config

    if not config.is_file():
        return None, f"no {config}"
    connect = Config.load(config).connect
    if connect.tls_cert is None:
        return None, "the config's connect: section has no TLS certificate"
    try:
        token = read_token(token_file)
    except GatewayUsage:
        return None, "no gateway token (--token-file or LAKEGATE_TOKEN)"
    beside = connect.tls_cert.parent / "ca.pem"
    try:
        ca = read_ca(ca_file) if ca_file else (beside.read_bytes() if beside.is_file() else None)
    except (GatewayUsage, OSError):
        return None, "the gateway's CA cannot be read"
    host = "127.0.0.1" if connect.host in ("0.0.0.0", "::", "") else connect.host
    gw = Gateway(host, connect.port, token, ca)
    why = check_reachable(gw)
    return (gw, "") if why is None else (None, why)


def _channel_builder(gw: Gateway) -> Any:
    """The stock client's ChannelBuilder with our credentials: the CA's roots (not the
    process-wide GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) and the token as call credentials, so the
    token is in no URL."""
    import grpc
    from pyspark.sql.connect.client import core

    from governance.spark_line import LINE

    class Builder(getattr(core, LINE.connect_channel_builder)):  # type: ignore[misc]
        def toChannel(self) -> grpc.Channel:
            creds = grpc.composite_channel_credentials(
                grpc.ssl_channel_credentials(root_certificates=gw.ca),
                grpc.access_token_call_credentials(gw.token),
            )
            return grpc.secure_channel(self.endpoint, creds, options=self._channel_options)

    host = f"[{gw.host}]" if ":" in gw.host else gw.host
    return Builder(f"sc://{host}:{gw.port}/;use_ssl=true;user_agent={USER_AGENT}")


def _status(e: BaseException) -> tuple[str, str] | None:
    """The gRPC status (code name, message) behind a client exception: PySpark raises its
    own exception while handling the grpc.RpcError, which stays on the context chain."""
    import grpc

    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, grpc.RpcError) and isinstance(seen, grpc.Call):
            return seen.code().name, seen.details() or ""
        seen = seen.__cause__ or seen.__context__
    return None


def run_remote(gw: Gateway, statement: str) -> tuple[list[str], list[tuple], int, str | None]:
    """(columns, rows, exit code, error line): the statement's rows, or a refusal's line."""
    reason = check_reachable(gw)
    if reason is not None:
        return [], [], EXIT_UNAVAILABLE, reason
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    from governance.spark_line import LINE

    spark = RemoteSession.builder.channelBuilder(_channel_builder(gw)).create()
    # PySpark 3.5 retries UNAVAILABLE for ten minutes; the gateway's UNAVAILABLE (audit log
    # down) is an answer for a one-shot command (the line's client says how to turn it off)
    LINE.connect_no_retries(spark.client)
    # one statement, read at once: nothing to reattach to, and no ReleaseExecute afterwards
    # (its failure after a refusal is a warning on stderr, which holds one line)
    spark.client.disable_reattachable_execute()
    try:
        df = spark.sql(statement)
        rows = [tuple(r) for r in df.collect()]
        return list(df.columns), rows, 0, None
    except Exception as e:
        status = _status(e)
        if status is None:  # a client-side failure: its class only, never its text
            return [], [], EXIT_FAILED, f"unexpected error ({type(e).__name__})"
        code, message = status
        line = message.splitlines()[0] if message.strip() else f"gateway answered {code}"
        return [], [], _EXIT_OF_STATUS.get(code, EXIT_FAILED), line
    finally:
        spark.stop()


def sql_via_gateway(
    url: str,
    token_file: str | None,
    ca_file: str | None,
    statement: str,
    output: str,
) -> int:
    """The `lakegate sql --gateway` command body: exit code, rows printed as locally."""
    try:
        host, port = parse_url(url)
        gw = Gateway(host, port, read_token(token_file), read_ca(ca_file))
    except GatewayUsage as e:
        fail(str(e))
        return EXIT_USAGE
    return sql_on(gw, statement, output)


def sql_on(gw: Gateway, statement: str, output: str) -> int:
    """One statement on a gateway already reached: exit code, rows printed as locally."""
    from governance.sql.parse import parse_statement

    parse_statement(statement)  # SqlParseError: exit 4, as in the local mode
    columns, rows, code, line = run_remote(gw, statement)
    if line is not None:
        fail(line)
        return code
    print_rows(columns, rows, output)
    return code
