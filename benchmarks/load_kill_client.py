"""One analyst of benchmarks/load_kill.py: load_client.py's stock Spark Connect client and
mixed workload, with a list of gateway addresses to fail over to.

The spec (JSON in argv[1]) is load_client.py's plus `urls` (its own server first) and
`retries` (the stock client's retry policy for UNAVAILABLE, shortened: its default waits at
least 10 minutes for a server to come back before it raises). An operation that fails with
UNAVAILABLE makes the client open a new session on the next address and go on (the failed
operation is not run again: a write whose reply was lost may have committed); every
operation is logged with its outcome, its gRPC code and details, the server it went to and
the SHA-256 of every request it sent (what the gateway's audit lines carry as `stmt_hash`).
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

from load_client import MIX, SQL, Analyst, run_process, session


def short_retries(s: Any, retries: int) -> None:
    """The stock client's DefaultPolicy with `retries` attempts from 200 ms, at most 1 s
    apart: a dead server is an error in seconds, not after 10 minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    s.client.set_retry_policies(
        [DefaultPolicy(max_retries=retries, initial_backoff=200, max_backoff=1000)]
    )


def grpc_of(e: BaseException) -> tuple[str, str]:
    """(gRPC status code name, its details) of a stock client's error."""
    code = getattr(e, "getGrpcStatusCode", lambda: None)()
    text = str(e)
    found = re.search(r'details = "([^"]*)"', text)
    details = found.group(1) if found else (text.strip().splitlines() or [""])[0]
    return (code.name if code is not None else type(e).__name__), details[:300]


class Failover(Analyst):
    def __init__(self, spec: dict[str, Any], index: int) -> None:
        self.urls: list[str] = spec["urls"]
        self.at = 0
        super().__init__(dict(spec, url=self.urls[0]), index)
        short_retries(self.s, spec.get("retries", 3))
        self.log: list[dict[str, Any]] = []
        self.reconnects: list[dict[str, Any]] = []

    def timed(self, op: str) -> None:
        n0 = len(self.recorder.sent)
        t0 = time.time()
        entry: dict[str, Any] = {"t": t0, "op": op, "server": self.at, "ok": True}
        if op == "write":  # its text, as run_op makes it (the intent line carries its hash)
            k = (self.k + 1) % 9 + 1
            entry["text"] = SQL[op].format(**self.names, k=k, client=self.name)
        try:
            self.run_op(op)
        except Exception as e:  # every outcome is a figure
            entry["ok"] = False
            entry["code"], entry["details"] = grpc_of(e)
            entry["kind"] = getattr(e, "getErrorClass", lambda: None)() or entry["code"]
        entry["ms"] = (time.time() - t0) * 1000
        entry["sent"] = self.recorder.sent[n0:]
        self.log.append(entry)
        if not entry["ok"] and entry["code"] == "UNAVAILABLE":
            self.fail_over()

    def warm(self) -> None:
        """Each operation once, logged like the rest (a warm-up write commits too)."""
        for op in dict.fromkeys(MIX):
            self.timed(op)

    def fail_over(self) -> None:
        """A new session on the next address (after the one that failed), until one answers."""
        t0 = time.time()
        for _ in range(4 * len(self.urls)):
            self.at = (self.at + 1) % len(self.urls)
            try:
                s = session(self.urls[self.at], self.recorder)
                short_retries(s, self.spec.get("retries", 3))
                s.sql("SELECT 1").collect()
            except Exception as e:  # this address is down too: the next
                self.reconnects.append({"t": time.time(), "to": self.at, "error": grpc_of(e)})
                continue
            self.s = s
            self.reconnects.append(
                {"t": time.time(), "to": self.at, "ms": (time.time() - t0) * 1e3}
            )
            return
        raise RuntimeError("no server answers")

    def figures(self) -> dict[str, Any]:
        return {
            "client": self.name,
            "user": self.spec["user"],
            "home": self.spec["home"],
            "log": self.log,
            "reconnects": self.reconnects,
        }


def main() -> int:
    spec = json.loads(sys.argv[1])
    # not closed: a session on a killed gateway would retry its release
    failover = [Failover(spec, i) for i in range(spec.get("threads", 1))]
    return run_process(spec, failover, close=False)


if __name__ == "__main__":
    sys.exit(main())
