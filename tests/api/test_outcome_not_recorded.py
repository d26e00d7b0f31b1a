"""A write that committed but whose outcome line could not be written is not a refusal
(issue 27): the REST reply says the statement ran, with its query id, so a client does not
retry and duplicate the row; a statement whose intent cannot be written is still refused.

The audit log is made to fail by wrapping its `write` (a failure-handling test): lines of
the intent phase pass, every later line fails, as a disk that fills up mid-statement does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from audit import AuditWriteError

TOKEN = "outcome-test-token-0123456789"
STATEMENTS = "/api/lakegate/v1/statements"


@pytest.fixture
def lakehouse_app(spark, tmp_path: Path) -> Iterator:
    from api.app import create_app
    from governance.config import ApiConfig, ApiToken
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    lg = Lakegate.open(write_config(tmp_path), spark=spark)
    s = lg.session("root")
    for sql in (
        "CREATE CATALOG IF NOT EXISTS main",
        "CREATE SCHEMA IF NOT EXISTS main.sales",
        "CREATE TABLE main.sales.orders (id INT, customer_id INT, region STRING, "
        "amount DECIMAL(10,2), order_date DATE, is_test BOOLEAN)",
    ):
        s.sql(sql)
    api = ApiConfig(tokens=(ApiToken("root", hashlib.sha256(TOKEN.encode()).hexdigest()),))
    yield lg, TestClient(create_app(lg, api))
    lg.close()


def _fail_after_intent(lg, monkeypatch: pytest.MonkeyPatch) -> None:
    write = lg.audit.write

    def failing(events, *args, **kwargs):
        if all(e.phase == "intent" for e in events):
            return write(events, *args, **kwargs)
        raise AuditWriteError("No space left on device")

    monkeypatch.setattr(lg.audit, "write", failing)


INSERT = "INSERT INTO main.sales.orders VALUES (1, 1, 'EMEA', 9.50, DATE'2026-05-01', false)"


def test_a_committed_write_without_its_outcome_line_says_it_ran_with_its_query_id(
    lakehouse_app, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg, client = lakehouse_app
    _fail_after_intent(lg, monkeypatch)
    r = client.post(
        STATEMENTS, json={"statement": INSERT}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    monkeypatch.undo()
    intents = [
        line
        for line in (lg.config.audit / "audit.log").read_text().splitlines()
        if "\tcmd=insert\t" in line and "phase=intent" in line
    ]
    assert len(intents) == 1
    query_id = intents[0].split("queryId=")[1].split("\t")[0]
    assert r.status_code == 500
    assert r.json() == {
        "error_code": "OUTCOME_NOT_RECORDED",
        "message": f"the statement ran (query {query_id}) but neither its outcome nor this "
        "request could be written to the audit log; do not retry",
    }
    rows = lg.session("root").sql("SELECT count(*) FROM main.sales.orders").collect()
    assert rows[0][0] == 1  # it did run: a retry would have made it two


def test_a_write_whose_intent_cannot_be_written_is_refused_and_does_not_run(
    lakehouse_app, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg, client = lakehouse_app

    def failing(events, *args, **kwargs):
        raise AuditWriteError("No space left on device")

    monkeypatch.setattr(lg.audit, "write", failing)
    r = client.post(
        STATEMENTS, json={"statement": INSERT}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    monkeypatch.undo()
    assert (r.status_code, r.json()) == (
        503,
        {
            "error_code": "TEMPORARILY_UNAVAILABLE",
            "message": "audit log unavailable: request refused",
        },
    )
    rows = lg.session("root").sql("SELECT count(*) FROM main.sales.orders").collect()
    assert rows[0][0] == 0
