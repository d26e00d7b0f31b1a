"""One gRPC call as the gateway records it (its own module: the service and the commands
it answers both take it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from api.connect.sessions import Entry
from governance.identity import NO_CLAIMS, IdpClaims
from governance.verify.readable import Seen


@dataclass
class Call:
    """One gRPC call: who, from where, its queryId and the plan's hash for the audit."""

    cmd: str
    user: str
    ip: str
    session_id: str
    query_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.perf_counter)
    stmt_hash: str | None = None
    entry: Entry | None = None  # the admitted session (sessions.py)
    seen: Callable[[], Seen] | None = None  # what an error may name (governance/verify/readable.py)
    kept: str | None = None  # the backend key of the verified Dataset it runs (service.py)
    auth: str = "TOKEN"  # the ugi's method (Principal.audit_method)
    claims: IdpClaims = NO_CLAIMS  # what the identity provider said about the user
