"""One analyst of benchmarks/load.py: a stock Spark Connect client in its own process,
running the mixed workload for a fixed time and keeping its own log of every request.

The spec comes as JSON in argv[1]; the client connects, runs each operation once untimed,
prints `ready`, waits for a line on stdin (all clients start together), runs for
`seconds`, and writes its figures as JSON to `out`: each operation's latencies, its errors
(gRPC code and the message's first line), and the SHA-256 of every request it sent, by RPC
method, which is what the gateway's audit lines carry as `stmt_hash` (service.py hashes
the request as received): load.py checks every request against the audit log with it.

`threads` > 1 runs that many analysts in this one process (one session each), for when
the machine cannot hold a process per client; load.py says so in its figures. With
`analysts` (a list of per-analyst specs: url, user, name, names, views, offset) each of
them is its own user too.

`kind: rest` makes the analysts REST clients (api/statements.py's POST /statements, over
httpx): the same mix as SQL texts (the DataFrame operation as the SQL of the same
aggregate, REST has no DataFrames), and as their own log every request's statement hash
with the request id the server answered (`x-request-id`), which its audit line carries as
its query id. `tpcds` (a list of texts) puts TPC-DS queries in the mix (`mix` says where).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc

# the mix: short lookups, joins with an aggregate, DataFrame operations, writes
SQL = {
    "lookup": "SELECT id, region, amount FROM {orders} WHERE id = {k}",
    "join": "SELECT c.country, count(*) AS n, sum(o.amount) AS total FROM {orders} o "
    "JOIN {customers} c ON o.customer_id = c.id GROUP BY c.country",
    "write": "INSERT INTO {writes} VALUES ({k}, '{client}', 1.5)",
    # the DataFrame operation's aggregate as SQL, for REST (which has no DataFrames)
    "dataframe": "SELECT region, sum(amount) AS total, count(*) AS n FROM {orders} "
    "WHERE amount > 50 GROUP BY region",
}
MIX = ("lookup", "join", "lookup", "dataframe", "lookup", "write")
# with TPC-DS at sf 1 as the heavy part: a TPC-DS query where the join was
MIX_TPCDS = ("lookup", "tpcds", "lookup", "dataframe", "lookup", "write")
REST_PATH = "/api/lakegate/v1/statements"


class Recorder(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Every request's method and SHA-256, as the gateway hashes it for its audit line."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _record(self, details: Any, request: Any) -> None:
        digest = "sha256:" + hashlib.sha256(request.SerializeToString()).hexdigest()
        with self._lock:
            self.sent.append((details.method.rsplit("/", 1)[-1], digest))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self._record(details, request)
        return continuation(details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        self._record(details, request)
        return continuation(details, request)


def session(url: str, recorder: Recorder) -> Any:
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    try:  # pyspark 4; 3.5's ChannelBuilder is the default one
        from pyspark.sql.connect.client.core import DefaultChannelBuilder as Builder
    except ImportError:
        from pyspark.sql.connect.client import ChannelBuilder as Builder

    if hasattr(Builder, "add_interceptor"):
        builder = Builder(url)
        builder.add_interceptor(recorder)
    else:  # pyspark 3.5's builder takes no interceptors: wrap the channel it makes

        class Recorded(Builder):  # type: ignore[misc, valid-type]
            def toChannel(self) -> Any:  # pyspark's name
                return grpc.intercept_channel(super().toChannel(), recorder)

        builder = Recorded(url)
    return RemoteSession.builder.channelBuilder(builder).create()


class Analyst:
    """One client: its session, its texts, its figures."""

    def __init__(self, spec: dict[str, Any], index: int) -> None:
        self.spec, self.index = spec, index
        self.name = f"{spec['name']}-{index}"
        self.recorder = Recorder()
        self.s = session(spec["url"], self.recorder)
        names = spec["names"]
        for view, path in spec.get("views", {}).items():  # plain: the raw Delta tables
            self.s.read.format("delta").load(path).createOrReplaceTempView(view)
        for view, sql in spec.get("view_sql", {}).items():  # the floor: the governed views
            self.s.sql(sql).createOrReplaceTempView(view)
        self.names = names
        self.mix: tuple[str, ...] = tuple(spec.get("mix") or MIX)
        self.tpcds: list[str] = list(spec.get("tpcds") or ())
        self.k = 0
        self.times: dict[str, list[float]] = {op: [] for op in set(self.mix)}
        self.errors: list[dict[str, Any]] = []
        self.ops: list[tuple[float, str, float, bool]] = []  # end, op, ms, ok
        self.until: float | None = None  # the run's deadline (`loop`)

    def run_op(self, op: str) -> None:
        from pyspark.sql.connect import functions as F

        self.k += 1
        if op == "dataframe":
            df = (
                self.s.table(self.names["orders"])
                .where(F.col("amount") > 50)
                .groupBy("region")
                .agg(F.sum("amount").alias("total"), F.count("*").alias("n"))
            )
            df.collect()
            return
        text = self.text(op)
        if op == "write":
            self.s.sql(text)  # a command runs eagerly
        else:
            self.s.sql(text).collect()

    def text(self, op: str) -> str:
        """The SQL of one operation of the mix (a TPC-DS query in turn for `tpcds`)."""
        if op == "tpcds":
            return self.tpcds[(self.k // len(self.mix)) % len(self.tpcds)]
        return SQL[op].format(**self.names, k=self.k % 9 + 1, client=self.name)

    def timed(self, op: str) -> None:
        t0 = time.perf_counter()
        ok = True
        try:
            self.run_op(op)
        except Exception as e:  # an error is a figure of the load run, counted by kind
            ok = False
            code = getattr(e, "getErrorClass", lambda: None)() or type(e).__name__
            first = (str(e).strip().splitlines() or [""])[0][:300]
            self.errors.append({"op": op, "kind": str(code), "message": first})
        ms = (time.perf_counter() - t0) * 1000
        self.ops.append((time.time(), op, ms, ok))
        if ok:
            self.times[op].append(ms)

    def warm(self) -> None:
        for op in dict.fromkeys(self.mix):
            self.run_op(op)

    def loop(self, until: float) -> None:
        self.until = until
        i = self.index + self.spec.get("offset", 0)  # clients start at different points
        while time.time() < until:
            self.timed(self.mix[i % len(self.mix)])
            i += 1

    def close(self) -> None:
        self.s.stop()

    def figures(self) -> dict[str, Any]:
        return {
            **self._counted(),
            "sent": self.recorder.sent,
            "session_id": self.s.client._session_id,
        }

    def _counted(self) -> dict[str, Any]:
        """What every kind of analyst reports: who, and each statement's time or error."""
        return {
            "client": self.name,
            "user": self.spec["user"],
            "times": self.times,
            "errors": self.errors,
            "ops": self.ops,
            "until": self.until,
        }


class RestError(Exception):
    """A REST answer other than 200: its kind is the status and the error code."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def getErrorClass(self) -> str:  # as pyspark's errors: Analyst.timed reads it
        return self.kind


class RestAnalyst(Analyst):
    """One REST client: the same mix as SQL texts over api/statements.py, one HTTP
    connection of its own; its log is (request id, statement hash, status) per request."""

    def __init__(self, spec: dict[str, Any], index: int) -> None:
        import httpx

        self.spec, self.index = spec, index
        self.name = f"{spec['name']}-{index}"
        self.http = httpx.Client(
            base_url=spec["url"],
            headers={"Authorization": f"Bearer {spec['token']}"},
            timeout=httpx.Timeout(1800.0, connect=60.0),
        )
        self.names = spec["names"]
        self.mix = tuple(spec.get("mix") or MIX)
        self.tpcds = list(spec.get("tpcds") or ())
        self.k = 0
        self.times = {op: [] for op in set(self.mix)}
        self.errors = []
        self.ops = []
        self.until = None
        self.requests: list[tuple[str | None, str, int]] = []  # request id, hash, status

    def run_op(self, op: str) -> None:
        self.k += 1
        text = self.text(op)
        digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
        try:
            r = self.http.post(REST_PATH, json={"statement": text})
        except Exception:
            self.requests.append((None, digest, 0))  # sent, no answer: no request id
            raise
        self.requests.append((r.headers.get("x-request-id"), digest, r.status_code))
        if r.status_code != 200:
            try:
                body = r.json()
            except ValueError:
                body = {}
            code = body.get("error_code") or ""
            raise RestError(f"HTTP {r.status_code} {code}".strip(), str(body.get("message", "")))

    def close(self) -> None:
        self.http.close()

    def figures(self) -> dict[str, Any]:
        return {**self._counted(), "requests": self.requests}


def analysts_of(spec: dict[str, Any]) -> list[Analyst]:
    """The analysts of one process: `threads` of the spec's user, or one per entry of
    `analysts` (each its own user)."""
    cls = RestAnalyst if spec.get("kind") == "rest" else Analyst
    own = spec.get("analysts")
    if own:
        return [cls({**spec, **one}, i) for i, one in enumerate(own)]
    return [cls(spec, i) for i in range(spec.get("threads", 1))]


def run_process(spec: dict[str, Any], analysts: list[Any], *, close: bool = True) -> int:
    """A client process's part (load.py and load_kill.py drive it): warm up, say `ready`,
    start at the driver's line, run every analyst until the deadline, close them (Spark 4
    releases its session; `close=False`: left to the process's end), write their figures
    to `spec["out"]`."""
    for a in analysts:
        a.warm()
    print("ready", flush=True)
    sys.stdin.readline()
    until = time.time() + spec["seconds"]
    workers = [threading.Thread(target=a.loop, args=(until,)) for a in analysts]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for a in analysts if close else ():
        a.close()
    Path(spec["out"]).write_text(json.dumps([a.figures() for a in analysts]))
    return 0


def main() -> int:
    spec = json.loads(sys.argv[1])
    return run_process(spec, analysts_of(spec))


if __name__ == "__main__":
    sys.exit(main())
