"""A live governed Spark Connect gateway over a copy of the demo lakehouse, one token each.

The gateway serves TLS on 127.0.0.1 (free port) with a throwaway CA; the backend runs in
the shared test JVM. The catalog is a copy (with `main.sales.orders` re-registered on a
copy of its Delta files, so write tests never touch the shared lakehouse), and the audit
directory is the gateway's own. Clients are the stock `pyspark.sql.connect` session.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from connect_testkit import PERSONAS, close_clients, kept, make_tls, token_of
from stock_clients import CLIENT_LINES, ensure_clients

MAPPING_POLICY = """
grants:
  - id: mira-reads-orders
    principals: [mira]
    privileges: [select]
    on: main.sales.orders
row_filters:
  - id: mira-by-mapping
    on: main.sales.orders
    principals: [mira]
    where: >-
      region IN (SELECT m.region FROM main.acl.user_regions m
                 WHERE m.user_name = current_user())
"""


@pytest.fixture(scope="session", autouse=True)
def _no_client_left_open() -> Iterator[None]:
    """Set up first, torn down last: every stock client closed before the run exits."""
    yield
    close_clients()


#: `wes` writes orders without seeing customer_id (test_connect_writes: hidden columns)
WRITER_POLICY = """
grants:
  - id: wes-writes-orders
    principals: [wes]
    privileges: [select, modify]
    on: main.sales.orders
  - id: wes-no-customer-id
    principals: [wes]
    effect: deny
    privileges: [select]
    on: main.sales.orders
    columns: [customer_id]
"""
# `agnes` (a persona of her own) reads the orders only in aggregates over 3+ rows (small
# groups suppressed), the customers likewise but a small group refuses the statement
AGGREGATE_POLICY = """
grants:
  - id: agnes-reads-orders
    principals: [agnes]
    privileges: [select]
    on: main.sales.orders
  - id: agnes-reads-customers
    principals: [agnes]
    privileges: [select]
    on: main.sales.customers
aggregation_policies:
  - id: agnes-orders-k3
    on: main.sales.orders
    principals: [agnes]
    min_group_size: 3
  - id: agnes-customers-k3-refuse
    on: main.sales.customers
    principals: [agnes]
    min_group_size: 3
    on_small_group: refuse
"""


#: `main.lab` (made by the test that uses it): `dana` (a PII reader) copies tagged columns,
#: `wes` reads the copy under `hide-pii` (hash) and a `pci` mask of higher priority (last4)
LAB_POLICY = """
tags:
  main.lab.people.email: [pii]
  main.lab.people.card: [pci]
grants:
  - {id: dana-copies-lab, principals: [dana], privileges: [select, modify], on: main.lab.*}
  - {id: wes-reads-lab, principals: [wes], privileges: [select], on: main.lab.*}
column_masks:
  - {id: lab-pci-last4, on: main.lab.*, match_columns: {tag: pci}, mask: last4, priority: 10,
     principals: [wes]}
"""


@pytest.fixture(scope="session")
def connect_lakegate(lakehouse, spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from governance.config import ApiConfig, ApiToken, ConnectConfig
    from governance.session.governed import Lakegate

    root = tmp_path_factory.mktemp("connect")
    src = sqlite3.connect(lakehouse.config.catalog)
    dst = sqlite3.connect(root / "catalog.db")
    src.backup(dst)
    src.close()
    dst.close()
    # the demo's policies plus one mapping-table filter for `mira` (a persona of her own, so
    # no other test's expectations move): she reads the orders of the regions mapped to her;
    # and `wes`, another persona of his own, for the hidden-column write rules (and the
    # reader of a tagged copy: LAB_POLICY)
    policies = root / "policies"
    shutil.copytree(lakehouse.config.policies, policies)
    (policies / "mapping.yaml").write_text(MAPPING_POLICY)
    (policies / "writer.yaml").write_text(WRITER_POLICY)
    (policies / "lab.yaml").write_text(LAB_POLICY)
    (policies / "aggregate.yaml").write_text(AGGREGATE_POLICY)
    ca, cert, key = make_tls(root)
    api = ApiConfig(
        tokens=tuple(
            ApiToken(u, hashlib.sha256(token_of(u).encode()).hexdigest()) for u in PERSONAS
        )
    )
    cfg = replace(
        lakehouse.config,
        catalog=str(root / "catalog.db"),
        policies=policies,
        audit=root / "audit",
        warehouse=root / "warehouse",
        api=api,
        connect=ConnectConfig(port=0, tls_cert=cert, tls_key=key),
    )
    lg = Lakegate(cfg, spark=spark)
    orders = lg.catalog.table("main", "sales", "orders")
    shutil.copytree(orders.location, root / "orders")
    lg.register_table("main.sales.orders", str(root / "orders"), replace=True)
    spark.createDataFrame(
        [("mira", "EMEA"), ("mira", "APAC"), ("someone", "AMER")], "user_name string, region string"
    ).write.format("delta").save(str(root / "user_regions"))
    lg.catalog.create_schema("main", "acl")
    lg.register_table("main.acl.user_regions", str(root / "user_regions"))
    lg.ca = ca  # type: ignore[attr-defined]
    yield lg
    lg.close()


@pytest.fixture(scope="session")
def gateway(connect_lakegate) -> Iterator[Any]:
    from api.connect.server import Gateway

    gw = Gateway(connect_lakegate, host="127.0.0.1", port=0)
    gw.start()
    saved = os.environ.get("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(connect_lakegate.ca)
    yield gw
    gw.stop()
    if saved is None:
        os.environ.pop("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", None)
    else:
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = saved


@pytest.fixture(scope="session")
def remote(gateway) -> Iterator[Callable[..., Any]]:
    """`remote(user)`: a new stock Spark Connect session with that user's token (or
    `token=` any text); every session made is stopped at the end."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    made: list[Any] = []

    def connect(user: str | None = None, *, token: str | None = None, extra: str = "") -> Any:
        tok = token if token is not None else token_of(user or "")
        url = f"sc://127.0.0.1:{gateway.port}/;use_ssl=true;token={tok}{extra}"
        s = kept(RemoteSession.builder.remote(url).create())
        made.append(s)
        return s

    yield connect
    for s in made:
        with contextlib.suppress(Exception):  # a session the test already stopped
            s.stop()


@pytest.fixture(scope="session")
def embedded(connect_lakegate) -> Callable[[str, str], list[tuple]]:
    """What `s.sql` gives a user on the same data and policies, as sorted tuples."""

    def run(user: str, sql: str) -> list[tuple]:
        return sorted(
            (tuple(r) for r in connect_lakegate.session(user).sql(sql).collect()), key=repr
        )

    return run


@pytest.fixture
def audit_dir(connect_lakegate) -> Path:
    return connect_lakegate.config.audit


@pytest.fixture
def limited_gateway(gateway, connect_lakegate) -> Iterator[Callable[..., Any]]:
    """`limited_gateway(**connect_settings)`: a second gateway over the same lakehouse whose
    `connect:` section has these limits, and a `connect(user)` for it: (gateway, connect).
    Stopped (with its sessions' clients) at the end of the test."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    from api.connect.server import Gateway

    made: list[Any] = []
    gateways: list[Any] = []

    def make(**limits: Any) -> tuple[Any, Callable[[str], Any]]:
        saved = connect_lakegate.config
        connect_lakegate.config = replace(saved, connect=replace(saved.connect, **limits))
        try:
            gw = Gateway(connect_lakegate, host="127.0.0.1", port=0)
        finally:
            connect_lakegate.config = saved
        gw.start()
        gateways.append(gw)

        def connect(user: str) -> Any:
            url = f"sc://127.0.0.1:{gw.port}/;use_ssl=true;token={token_of(user)}"
            s = kept(RemoteSession.builder.remote(url).create())
            made.append(s)
            return s

        return gw, connect

    yield make
    for s in made:
        with contextlib.suppress(Exception):
            s.stop()
    for gw in gateways:
        gw.stop()


@pytest.fixture(scope="session")
def stock_clients() -> dict[str, Path]:
    """Every stock client line's interpreter (stock_clients.py), installed once per machine
    and cached; the install times go to the log (pytest -rA shows them)."""
    got = ensure_clients(list(CLIENT_LINES))
    for line, (_, secs) in got.items():
        print(f"stock client {line}: " + (f"installed in {secs:.0f} s" if secs else "cached"))
    return {line: py for line, (py, _) in got.items()}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, str]]]:
    """Every (user, session id, key) the gateway kept a verified Dataset under for one call
    (forgotten when the call ends); not those `spark.sql` keeps for the session's later
    runs of its query (api/connect/verified.py)."""
    import threading

    from api.connect.backend import Backend
    from api.connect.commands import GatewayCommands

    seen: list[tuple[str, str, str]] = []
    real, real_query = Backend.keep, GatewayCommands._verify_query
    in_spark_sql = threading.local()

    def keep(self: Backend, relation: bytes, user: str, session_id: str, key: str) -> Any:
        if not getattr(in_spark_sql, "on", False):
            seen.append((user, session_id, key))
        return real(self, relation, user, session_id, key)

    def verify_query(self: Any, call: Any, query: Any) -> None:
        in_spark_sql.on = True
        try:
            real_query(self, call, query)
        finally:
            in_spark_sql.on = False

    monkeypatch.setattr(Backend, "keep", keep)
    monkeypatch.setattr(GatewayCommands, "_verify_query", verify_query)
    yield seen
