"""The Spark Connect backend: Spark's own Connect service inside Lakegate's driver JVM.

Spark 3.5's Connect plugin binds every interface and has no authentication, so Lakegate
does not use it. `ConnectBackend.java` (one source for both lines, with the line's
`LineSessions` adapter appended, as governance/spark_line.py chooses; compiled by Janino in
the driver, like the plan walker) serves Spark's `SparkConnectService` on 127.0.0.1 on a
free port, behind the line's token check (Spark 4's own pre-shared token interceptor) that
refuses every call without this process's random secret as its bearer token. Only the
gateway holds the secret, so only the gateway reaches the backend. Running in the same JVM
also lets the verifier analyse a rewritten plan in the exact session the backend runs it in.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from governance.runtime.java import compiled
from governance.spark_line import LINE
from governance.verify.guard import checked, jvm_guard, refuse_drift

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The metadata key the gateway's forwarded calls carry its secret in, as a bearer token
#: (Spark Connect's own token header; see ConnectBackend.java).
SECRET_HEADER = "authorization"
MAX_MESSAGE_BYTES = 128 * 1024 * 1024  # Spark Connect's own default inbound limit
BACKEND = "backend session"  # where a changed governed setting was found

_lock = threading.Lock()


class BackendUnavailable(RuntimeError):
    """The driver JVM has no Spark Connect server classes (see governance/runtime/spark.py)."""


class Backend:
    """One in-JVM Spark Connect server on loopback, reachable only with `secret`."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.secret = secrets.token_urlsafe(32)
        with _lock:
            self._java = _compile(spark)
            self._server = self._java.start(
                spark._jsparkSession, self.secret, MAX_MESSAGE_BYTES, jvm_guard(spark)
            )
        self.port = int(self._server.getPort())

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metadata(self) -> list[tuple[str, str]]:
        """What every call the gateway forwards carries: the secret as the bearer token."""
        return [(SECRET_HEADER, f"Bearer {self.secret}")]

    def analyze(self, relation: bytes, user: str, session_id: str) -> Any:
        """Spark's analyzed plan of `relation` in the backend session (user, session_id),
        parsed and analysed as that session runs it (SettingChanged: its governed settings
        had been changed; they are put back)."""
        return checked(self._java.analyze(bytearray(relation), user, session_id), BACKEND)

    def keep(self, relation: bytes, user: str, session_id: str, key: str) -> Any:
        """`analyze`, with the relation's Dataset kept in the backend session under `key`
        (a `CachedRemoteRelation` of `key` runs that very Dataset: no second analysis, and
        the plan run is the plan verified); `forget` drops it."""
        return checked(self._java.keep(bytearray(relation), user, session_id, key), BACKEND)

    def forget(self, user: str, session_id: str, key: str) -> None:
        """Drop the Dataset kept under `key` (after its execution, or when it will not run)."""
        self._java.forget(user, session_id, key)

    def kept(self, user: str, session_id: str, key: str) -> bool:
        """Whether the backend session (user, session_id) keeps a Dataset under `key`."""
        return bool(self._java.kept(user, session_id, key))

    def dataset(self, relation: bytes, user: str, session_id: str) -> Any:
        """`relation` as a (JVM) Dataset of the backend session (user, session_id): a
        governed DataFrame write verifies its analyzed plan and writes that same Dataset."""
        return checked(self._java.dataset(bytearray(relation), user, session_id), BACKEND)

    def secure(self, user: str, session_id: str) -> None:
        """The backend session's governed settings in place (when plans are not verified,
        or a verified query runs again: api/connect/verified.py)."""
        refuse_drift(str(self._java.secure(user, session_id)), BACKEND)

    def release(self, user: str, session_id: str) -> None:
        """Drop the backend session (user, session_id): Spark's SessionHolder and its
        settings go, its running operations are interrupted."""
        self._java.release(user, session_id)

    def holds(self, user: str, session_id: str) -> bool:
        """Whether the backend holds a session for (user, session_id)."""
        return bool(self._java.holds(user, session_id))

    def cancel(self, user: str, session_id: str, operation_id: str) -> None:
        """Cancel the Spark jobs of one backend operation (Spark Connect's job tag)."""
        self._java.cancel(user, session_id, operation_id)

    def stop(self) -> None:
        self._server.shutdownNow()


def _compile(spark: SparkSession) -> Any:
    """The JVM's one ConnectBackend (`governance.runtime.java`), once Spark Connect's server
    classes are known to be on the driver's class path."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    assert jvm is not None and gateway is not None

    def source() -> str:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        try:
            loader.loadClass("org.apache.spark.sql.connect.service.SparkConnectService")
        except Exception:
            raise BackendUnavailable(
                "the Spark Connect server classes are not on the driver's class path; start "
                "Spark through governance.runtime.spark.build_spark (it adds spark-connect on "
                "Spark 3.5)"
            ) from None
        here = Path(__file__).parent
        imports = "".join(f"import {c};\n" for c in LINE.session_classes)
        adapter = (here / LINE.connect_sessions_source).read_text()
        return imports + (here / "ConnectBackend.java").read_text() + adapter

    return compiled(jvm, gateway, "ConnectBackend", source)
