"""`on_small_group: refuse` on the REST statements API (issue 40): `frank` reads
`main.sales.customers` only in aggregates over groups of 3+ rows, and a smaller group refuses
the statement. Spark finds the small group while it makes the rows; the server answers 403
with the refusal's one line, the request's audit line says `allowed=false` with the reason,
and the guard's marker (the run-time error's text) never reaches the caller."""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from api_testkit import LG, api_lakegate_on, read_audit, serve, token_of

REFUSE_POLICY = """
grants:
  - id: frank-reads-customers
    principals: [frank]
    privileges: [select]
    on: main.sales.customers
aggregation_policies:
  - id: frank-customers-k3-refuse
    on: main.sales.customers
    principals: [frank]
    min_group_size: 3
    on_small_group: refuse
"""
BY_COUNTRY = "SELECT country, count(*) AS n FROM main.sales.customers GROUP BY country"
REFUSAL = (
    "refused: a group of the result has fewer rows of an aggregate-only table than its "
    "aggregation policy's min_group_size"
)


@pytest.fixture(scope="module")
def refuse_lakegate(lakehouse, spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    root = tmp_path_factory.mktemp("api-agg-refuse")
    policies = root / "policies"
    shutil.copytree(lakehouse.config.policies, policies, ignore=shutil.ignore_patterns("tests"))
    (policies / "frank-aggregates.yaml").write_text(REFUSE_POLICY)
    lg = api_lakegate_on(lakehouse, spark, root, policies=policies)
    yield lg
    lg.close()


@pytest.fixture(scope="module")
def refuse_server(refuse_lakegate) -> Iterator[str]:
    from api.app import create_app

    with serve(create_app(refuse_lakegate)) as url:
        yield url


def _post(base: str, sql: str, ctx: str) -> httpx.Response:
    return httpx.post(
        f"{base}{LG}/statements",
        json={"statement": sql},
        headers={"Authorization": f"Bearer {token_of('frank')}", "X-Lakegate-Caller-Context": ctx},
        timeout=300,
    )


def test_a_small_group_is_403_with_the_refusal_on_record(refuse_server, refuse_lakegate) -> None:
    customers = refuse_lakegate.catalog.table("main", "sales", "customers")
    raw = refuse_lakegate.spark.read.format("delta").load(customers.location).collect()
    assert min(Counter(r["country"] for r in raw).values()) < 3  # by hand: a small group exists
    ctx = f"agg-refuse-{uuid.uuid4().hex}"
    r = _post(refuse_server, BY_COUNTRY, ctx)
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["error_code"] == "PERMISSION_DENIED"
    assert body["message"].startswith(REFUSAL)
    assert "(query " in body["message"]
    assert "__lg_small_group_" not in r.text  # the guard's marker never reaches a caller
    assert "Exception" not in r.text and "at org." not in r.text  # nor Spark's text
    lines = read_audit(refuse_lakegate)
    request = [ln for ln in lines if ln.get("callerContext") == ctx]
    # the table's read line is on record before Spark runs; the request's line is the refusal
    assert [(ln["cmd"], ln["allowed"]) for ln in request] == [
        ("select", "true"),
        ("executeStatement", "false"),
    ], request
    refusal = request[-1]
    assert refusal["succeeded"] == "false"
    assert refusal["reason"].startswith(REFUSAL)
    assert {ln["ugi"].split()[0] for ln in request} == {"frank"}
    assert request[0]["src"] == "main.sales.customers"
    assert not [ln for ln in lines if "__lg_small_group_" in str(ln)]  # nor the log's reader


def test_a_large_enough_aggregate_is_answered(refuse_server, refuse_lakegate) -> None:
    customers = refuse_lakegate.catalog.table("main", "sales", "customers")
    total = refuse_lakegate.spark.read.format("delta").load(customers.location).count()
    assert total >= 3
    r = _post(refuse_server, "SELECT count(*) FROM main.sales.customers", f"agg-{uuid.uuid4()}")
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [[total]]


def test_the_rows_themselves_are_refused_before_anything_runs(refuse_server) -> None:
    r = _post(refuse_server, "SELECT country FROM main.sales.customers", f"agg-{uuid.uuid4()}")
    assert r.status_code == 403
    assert "aggregation policy frank-customers-k3-refuse" in r.json()["message"]
