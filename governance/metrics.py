"""Prometheus metrics (served at `/metrics` by `lakegate serve`): statements by kind and
outcome, how long planning, verification and execution take, audit lines written and lost,
policy reloads, cache lookups (the hit ratio of the plan, access and tag caches), open
Connect sessions, REST requests by route and status and Connect RPCs by method and status
(each with a latency histogram), and the garbage collector's pauses (governance/runtime/heap.py).

Every label value comes from a closed set (statement kinds are the planner's command names,
outcomes are ok/denied/failed, routes are the app's templates, RPC methods the service's),
never from what a caller sent, so a caller cannot grow the series without bound.
"""

from __future__ import annotations

import gc
import math
import threading
import weakref
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

STATEMENTS = Counter(
    "lakegate_statements", "Governed statements, by kind and outcome", ["kind", "outcome"]
)
PHASE_SECONDS = Histogram(
    "lakegate_statement_phase_seconds",
    "Time per statement phase: plan (parse, decide, rewrite), verify (Spark's analysed plan "
    "against the policies), execute (Spark, verification included)",
    ["phase"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
AUDIT_LINES = Counter("lakegate_audit_lines", "Audit lines written")
AUDIT_FAILURES = Counter(
    "lakegate_audit_failures", "Audit batches that could not be written (access refused)"
)
POLICY_RELOADS = Counter("lakegate_policy_reloads", "Policy set loads, by outcome", ["outcome"])
CACHE_LOOKUPS = Counter(
    "lakegate_cache_lookups",
    "Cache lookups by cache (plan, access, tags) and result (hit, miss); the hit ratio is "
    "hit / (hit + miss)",
    ["cache", "result"],
)
CONNECT_SESSIONS = Gauge("lakegate_connect_sessions", "Open Spark Connect sessions")
#: Latency buckets of a request or RPC: a discovery GET takes a millisecond, a statement
#: up to minutes.
_REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
HTTP_REQUESTS = Counter(
    "lakegate_http_requests",
    "REST requests by method, route (the route's template, 'unmatched' for any other path) "
    "and status",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "lakegate_http_request_seconds",
    "REST request latency, first byte received to last byte sent, by method and route",
    ["method", "route"],
    buckets=_REQUEST_BUCKETS,
)
CONNECT_RPCS = Counter(
    "lakegate_connect_rpcs",
    "Spark Connect RPCs by method (the service's own) and gRPC status",
    ["method", "status"],
)
CONNECT_RPC_SECONDS = Histogram(
    "lakegate_connect_rpc_seconds",
    "Spark Connect RPC latency, to the last streamed answer, by method",
    ["method"],
    buckets=_REQUEST_BUCKETS,
)
#: HTTP methods counted by name; any other (a caller's invention) is counted as "other".
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
GC_PAUSE_SECONDS = Histogram(
    "lakegate_gc_pause_seconds",
    "Garbage collector pauses by generation (2: full collections), timed from the "
    "collector's own callbacks once a server settled its heap (governance/runtime/heap.py)",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
GC_FROZEN = Gauge(
    "lakegate_gc_frozen_objects",
    "Objects alive at a server's start-up, frozen out of every collection "
    "(governance/runtime/heap.py)",
)

# What a soak watches (issue 39 item 4), scraped live: each bounded cache against its bound,
# the Python objects and threads of the process, the driver JVM's heap. process_* (RSS,
# fds, CPU) are prometheus_client's own.
CACHE_ENTRIES = Gauge(
    "lakegate_cache_entries",
    "Entries a bounded cache holds: plan (query plans), connect_sessions (open Connect "
    "sessions), connect_kept (verified Datasets the gateway keeps in the backend)",
    ["cache"],
)
CACHE_BOUND = Gauge(
    "lakegate_cache_bound", "The configured bound of each lakegate_cache_entries cache", ["cache"]
)
PYTHON_OBJECTS = Gauge(
    "lakegate_python_objects",
    "Objects the Python collector tracks (len(gc.get_objects()), frozen ones included): "
    "level under a steady load",
)
PYTHON_OBJECTS.set_function(lambda: len(gc.get_objects()) + gc.get_freeze_count())
THREADS = Gauge("lakegate_threads", "Python threads alive in the process")
THREADS.set_function(threading.active_count)
JVM_HEAP = Gauge(
    "lakegate_jvm_heap_used_bytes",
    "Heap in use in the Spark driver's JVM (NaN until Spark has started)",
)


def watch_caches(lg: Any) -> None:
    """The gauges of `lg`'s plan cache and JVM heap, read at each scrape (weakly: a closed
    Lakegate is not kept alive by its gauges; the newest one registered is the one shown)."""
    ref = weakref.ref(lg)

    def entries() -> float:
        obj = ref()
        return math.nan if obj is None else float(len(obj.plans))

    def heap() -> float:
        obj = ref()
        if obj is None or not obj.spark_started:
            return math.nan
        rt = obj.spark._jvm.java.lang.Runtime.getRuntime()
        return float(rt.totalMemory() - rt.freeMemory())

    CACHE_ENTRIES.labels("plan").set_function(entries)
    CACHE_BOUND.labels("plan").set(lg.plans.size)
    JVM_HEAP.set_function(heap)


#: The outcome label of a statement.
OK, DENIED, FAILED = "ok", "denied", "failed"


def counted(planner: Any, outcome: str) -> None:
    """One statement, by the planner's command once it got that far."""
    kind = getattr(planner, "cmd", None) or "unparsed"
    STATEMENTS.labels(kind, outcome).inc()


# (cache, hit) -> its labelled counter: `labels()` per lookup was a measurable share of
# planning (the access cache is looked up once per table read)
_LOOKUP_COUNTERS: dict[tuple[str, bool], Any] = {}


def cache_lookup(cache: str, hit: bool) -> None:
    """One lookup of a named cache (a closed set: plan, access, tags)."""
    counter = _LOOKUP_COUNTERS.get((cache, hit))
    if counter is None:
        counter = CACHE_LOOKUPS.labels(cache, "hit" if hit else "miss")
        _LOOKUP_COUNTERS[(cache, hit)] = counter
    counter.inc()


# identity.ldap (api/ldap_sync.py): a stale group set is visible as an old last success
LDAP_SYNC_LAST_SUCCESS = Gauge(
    "lakegate_ldap_sync_last_success_timestamp_seconds",
    "When the last LDAP group sync was applied (Unix time); 0: none yet",
)
LDAP_SYNC_GROUPS = Gauge("lakegate_ldap_sync_groups", "Groups in the last applied LDAP sync")
LDAP_SYNC_SKIPPED = Gauge(
    "lakegate_ldap_sync_skipped", "Member values and entries the last LDAP sync skipped"
)
LDAP_SYNC_ERRORS = Counter(
    "lakegate_ldap_sync_errors", "LDAP group syncs that failed (the last good set was kept)"
)
