"""AnalyzePlan through the gateway (`df.schema`, `df.columns`, `printSchema`, `isLocal`,
`isStreaming`, `sameSemantics`, `semanticHash`, ...), and the kept verified Datasets that
both it and ExecutePlan forward.

Every plan an analyze request carries is governed and verified, and the Dataset the
verifier's analysis made in the backend session is kept there under a fresh unguessable key
(one per plan per call); the request then names that Dataset (`CachedRemoteRelation`), so
the backend answers about the very plan that was checked and analyses nothing again. The
keys are forgotten when the call ends, however it ends. The RPC handling around it is
service.py's (token, session) and outcomes.py's (audit, errors).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from api.connect import compat
from api.connect.call import Call
from governance.errors import AccessDenied

if TYPE_CHECKING:
    from api.connect.backend import Backend
    from api.connect.limits import Statement, StatementLimits
    from governance.session.governed import Lakegate

#: AnalyzePlan requests refused: Spark's cache is one for every user of the backend, so a
#: user would see (storageLevel) and drop (unpersist) another user's cached DataFrame.
_CACHE_REFUSED = (
    "persist/cache, unpersist and storageLevel are refused through the gateway: Spark's "
    "cache is shared by every user of the backend"
)


def kept_key() -> str:
    """A fresh name for a kept Dataset: 128 random bits, so no caller can guess one (and
    clients can never name a `CachedRemoteRelation` anyway: relations.py refuses it)."""
    return f"lakegate-{secrets.token_hex(16)}"


def kept_relation(key: str) -> relations_pb2.Relation:
    """The relation naming the Dataset kept under `key` in the backend session."""
    return relations_pb2.Relation(
        cached_remote_relation=relations_pb2.CachedRemoteRelation(relation_id=key)
    )


class GatewayAnalysis:
    """AnalyzePlan, mixed into the ConnectService (which provides these)."""

    backend: Backend
    limits: StatementLimits
    lg: Lakegate
    stub: Any
    _begin: Callable[[str, Any, grpc.ServicerContext], Call]
    _statement: Callable[[Call, str, Any], Statement]
    _ended: Callable[[Statement | None, BaseException], BaseException]
    _clear_group: Callable[[], None]
    _allow: Callable[[Call, grpc.ServicerContext], None]
    _fail: Callable[[Call, grpc.ServicerContext, BaseException], NoReturn]
    _backend_error: Callable[[Call, grpc.ServicerContext, grpc.RpcError], NoReturn]
    _meta: Callable[[], list[tuple[str, str]]]
    _govern: Callable[..., Any]

    def AnalyzePlan(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Answered about the Datasets the call's verification kept (`_verified`); every key
        kept is forgotten when the call ends, answered, refused or failed."""
        call = self._begin("analyzePlan", request, context)
        kept: list[str] = []
        try:
            return self._analyze(call, request, context, kept)
        finally:
            for key in kept:
                self.backend.forget(call.user, call.session_id, key)

    def _analyze(
        self, call: Call, request: Any, context: grpc.ServicerContext, kept: list[str]
    ) -> Any:
        stmt: Statement | None = None
        try:
            kind = request.WhichOneof("analyze")
            if kind is None:
                raise AccessDenied("an empty analyze request is refused")
            if kind in ("persist", "unpersist", "get_storage_level"):
                raise AccessDenied(_CACHE_REFUSED)
            if kind == "explain":
                raise AccessDenied(
                    "explain is refused through the gateway: it shows the "
                    "governed views' storage locations and policy expressions"
                )
            if kind == "input_files":
                raise AccessDenied("input_files is refused: it shows storage locations")
            if kind == "ddl_parse":  # Spark parses the schema text: its settings first
                self.backend.secure(call.user, call.session_id)
            elif kind != "spark_version":
                stmt = self._statement(call, str(uuid.uuid4()), ())
                self._govern_fields(call, getattr(request, kind), kept)
        except Exception as e:
            self._fail(call, context, self._ended(stmt, e))
        finally:
            self._clear_group()
        try:
            self._allow(call, context)
            answer = self.stub.AnalyzePlan(
                request, metadata=self._meta(), timeout=self.limits.timeout
            )
            compat.answer(answer)
            return answer
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                self._fail(call, context, self.limits.timed_out())
            self._backend_error(call, context, e)
        finally:
            if stmt is not None:
                self.limits.finish(stmt)

    def _govern_fields(self, call: Call, msg: Any, kept: list[str]) -> None:
        """Every plan or relation an analyze request carries, replaced in place by its
        verified Dataset (`_verified`)."""
        for fd, value in msg.ListFields():
            if isinstance(value, base_pb2.Plan):
                if value.WhichOneof("op_type") != "root":
                    raise AccessDenied("only query plans can be analysed")
                value.root.CopyFrom(self._verified(call, value.root, kept))
            elif isinstance(value, relations_pb2.Relation):
                value.CopyFrom(self._verified(call, value, kept))
            elif fd.message_type is not None and fd.message_type.name not in (
                "DataType",
                "StorageLevel",
            ):
                raise AccessDenied(f"analyze field {fd.name} is not governed; refused")

    def _verified(self, call: Call, rel: Any, kept: list[str]) -> relations_pb2.Relation:
        """The relation the backend answers about: the Dataset the verifier accepted, kept
        under a fresh key (in `kept` before the analysis, for the caller to forget whether
        or not it is accepted); the governed relation when plans are not verified (there
        is no verified Dataset, and the backend analyses it)."""
        if not self.lg.config.verify_plans:
            return self._govern(call, rel, reads=False)
        key = kept_key()
        kept.append(key)
        self._govern(call, rel, reads=False, keep=key)
        return kept_relation(key)
