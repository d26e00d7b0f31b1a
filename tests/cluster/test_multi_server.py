"""Several servers, one catalog, one audit trail: two `lakegate serve` processes share a
PostgreSQL catalog (a real server the tests start) and one audit directory. Concurrent
governed statements and DDL through both lose nothing, every audit chain verifies, both
agree on the catalog, and a policy change is picked up by both."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from audit.query import query
from audit.verify import verify
from governance.runtime.local_cluster import free_port, stop_groups
from governance.session.governed import Lakegate
from governance.tools.demo import SETUP, write_config

LAKEGATE = str(Path(sys.executable).with_name("lakegate"))
USERS = ("alice", "carol", "erin")
UC = "/api/2.1/unity-catalog"
LG = "/api/lakegate/v1"


def token_of(user: str) -> str:
    return f"tok-{user}-{hashlib.sha256(user.encode()).hexdigest()[:12]}"


@pytest.fixture(scope="module")
def servers(spark, new_postgres_database, tmp_path_factory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("servers")
    cfg_path = write_config(root)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["catalog"] = new_postgres_database()
    cfg["api"] = {
        "tokens": [
            {"user": u, "sha256": hashlib.sha256(token_of(u).encode()).hexdigest()} for u in USERS
        ],
        "timeout": 600,
    }  # the test is about correctness: a loaded CI box is slow
    cfg_path.write_text(yaml.safe_dump(cfg))
    lg = Lakegate.open(cfg_path, spark=spark)
    admin = lg.session("root")
    for stmt in SETUP:
        admin.sql(stmt)
    lg.close()
    procs, bases = [], []
    for i in range(2):
        port = free_port()
        log = (root / f"server{i}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [LAKEGATE, "--config", str(cfg_path), "serve", "--port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        bases.append(f"http://127.0.0.1:{port}")
    try:
        for base, p in zip(bases, procs, strict=True):
            _wait_up(base, p, root)
        yield {"root": root, "config": cfg_path, "bases": bases}
    finally:
        stop_groups(procs)


def _wait_up(base: str, proc: subprocess.Popen, root: Path) -> None:
    deadline = time.monotonic() + 600  # each server starts Spark before opening its port
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            logs = "".join(f.read_text()[-3000:] for f in root.glob("server*.log"))
            pytest.fail(f"a server exited:\n{logs}")
        try:
            if _client(base, "alice").get(f"{UC}/catalogs").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail("a server did not come up in 600 s")


def _client(base: str, user: str) -> httpx.Client:
    return httpx.Client(
        base_url=base, timeout=300, headers={"Authorization": f"Bearer {token_of(user)}"}
    )


def _sql(base: str, user: str, statement: str) -> httpx.Response:
    with _client(base, user) as c:
        return c.post(f"{LG}/statements", json={"statement": statement})


@pytest.fixture(scope="module")
def load(servers: dict) -> dict:
    """Concurrent reads, INSERTs into one table and CREATE TABLEs spread over both servers
    (the INSERTs once failed with TABLE_OR_VIEW_NOT_FOUND: a pool thread had no active
    Spark session when the verifier analysed the write)."""
    bases = servers["bases"]
    work: list[tuple[str, str, str]] = []
    for i in range(6):
        base = bases[i % 2]
        work += [
            (base, "carol", "SELECT id, region FROM main.sales.orders ORDER BY id"),
            (base, "erin", f"CREATE TABLE main.sales.srv_{i} (a INT)"),
            (base, "alice", "SELECT count(*) AS n FROM main.sales.customers"),
            (
                base,
                "carol",
                f"INSERT INTO main.sales.orders VALUES ({1000 + i}, 1, 'EMEA', "
                f"1.00, DATE'2026-02-01', false)",
            ),
        ]
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda w: _sql(*w), work))
    return {"work": work, "responses": responses}


def test_each_server_froze_its_start_up_objects_before_serving(servers: dict) -> None:
    """governance/runtime/heap.py: what start-up left alive is out of every full collection, and the
    collector's pauses are timed (a collection has run since: the servers answered)."""
    for base in servers["bases"]:
        text = httpx.get(f"{base}/metrics", timeout=60).text
        frozen = [ln for ln in text.splitlines() if ln.startswith("lakegate_gc_frozen_objects ")]
        assert len(frozen) == 1 and float(frozen[0].split()[1]) > 0, base
        assert 'lakegate_gc_pause_seconds_count{generation="0"}' in text, base


def test_every_concurrent_statement_succeeded_on_both_servers(load: dict) -> None:
    statuses = [
        (w[1], w[2][:20], r.status_code, r.text[:200])
        for w, r in zip(load["work"], load["responses"], strict=True)
        if r.status_code != 200
    ]
    assert statuses == []


def test_concurrent_inserts_through_both_servers_all_landed(servers: dict, load: dict) -> None:
    for base in servers["bases"]:
        r = _sql(base, "carol", "SELECT count(*) AS n FROM main.sales.orders WHERE id >= 1000")
        assert r.status_code == 200 and r.json()["rows"] == [[6]], r.text


def test_both_servers_agree_on_the_catalog(servers: dict, load: dict) -> None:
    listings = []
    for base in servers["bases"]:
        with _client(base, "erin") as c:
            body = c.get(
                f"{UC}/tables", params={"catalog_name": "main", "schema_name": "sales"}
            ).json()
        listings.append(sorted(t["name"] for t in body["tables"]))
    assert listings[0] == listings[1]
    assert {f"srv_{i}" for i in range(6)} <= set(listings[0])


def test_every_request_is_in_the_shared_audit_log_and_every_chain_verifies(
    servers: dict, load: dict
) -> None:
    audit_dir = servers["root"] / "audit"
    report = verify(audit_dir)
    assert report.ok, report
    assert len(report.writers) >= 3  # the builder and both servers each keep a chain
    rest = [r for r in query(audit_dir).records if r.proto == "rest"]
    request_ids = Counter(r.query_id for r in rest if r.cmd == "executeStatement")
    ids = [r.headers["x-request-id"] for r in load["responses"]]
    assert all(request_ids[i] == 1 for i in ids), "a request's audit line is missing"
    created = {r.src for r in rest if r.cmd == "create" and r.succeeded}
    assert {f"main.sales.srv_{i}" for i in range(6)} <= created


def test_a_policy_change_is_picked_up_by_both_servers(servers: dict, load: dict) -> None:
    extra = servers["root"] / "policies" / "zz-erin-apac.yaml"
    extra.write_text(
        "row_filters:\n  - id: erin-apac-only\n    on: main.sales.orders\n"
        "    principals: [erin]\n    where: \"region = 'APAC'\"\n"
    )
    try:
        for base in servers["bases"]:
            deadline = time.monotonic() + 60
            regions: set[str] = set()
            while time.monotonic() < deadline:
                r = _sql(base, "erin", "SELECT DISTINCT region FROM main.sales.orders")
                regions = {row[0] for row in r.json()["rows"]}
                if regions == {"APAC"}:
                    break
                time.sleep(1)
            assert regions == {"APAC"}, base
    finally:
        extra.unlink()
