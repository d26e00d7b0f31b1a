"""Governed SQL over HTTP: same decisions and messages as the Python API, row limit, timeout."""

from __future__ import annotations

import uuid

import pytest
from api_testkit import LG, read_audit

from governance.errors import AccessDenied


def _sql(client, statement: str, **kw) -> tuple[int, dict]:
    r = client.post(
        f"{LG}/statements",
        json={"statement": statement, **kw},
        headers={"X-Lakegate-Caller-Context": f"sql-{uuid.uuid4().hex}"},
    )
    return r.status_code, r.json()


def test_rows_come_back_filtered_and_masked(as_user) -> None:
    status, body = _sql(
        as_user("carol"), "SELECT id, region, amount, order_date FROM main.sales.orders ORDER BY id"
    )
    assert status == 200, body
    assert [c["name"] for c in body["columns"]] == ["id", "region", "amount", "order_date"]
    assert body["columns"][2]["type_text"] == "decimal(10,2)"
    assert {r[1] for r in body["rows"]} == {"EMEA"}
    assert [r[0] for r in body["rows"]] == [1, 4, 8]  # EMEA, test order 5 filtered out
    assert body["rows"][0][2:] == ["120.00", "2026-01-05"]
    status, body = _sql(as_user("carol"), "SELECT phone FROM main.sales.customers ORDER BY id")
    assert status == 200
    assert body["rows"][0] == ["**********4567"]  # +49 30 1234567, last four only


def test_row_limit_truncates(as_user) -> None:
    status, body = _sql(as_user("root"), "SELECT id FROM main.sales.orders ORDER BY id")
    assert status == 200
    assert (body["row_count"], body["truncated"]) == (5, True)  # server row_limit is 5
    status, body = _sql(
        as_user("root"), "SELECT id FROM main.sales.orders ORDER BY id", row_limit=2
    )
    assert [r[0] for r in body["rows"]] == [1, 2] and body["truncated"] is True
    status, body = _sql(as_user("root"), "SELECT 1 AS one", row_limit=50)
    assert (body["rows"], body["truncated"]) == ([[1]], False)


@pytest.mark.parametrize(
    ("user", "statement"),
    [
        ("alice", "SELECT salary FROM main.hr.employees"),
        ("bob", "SELECT phone FROM main.sales.customers"),
        ("alice", "SELECT * FROM main.marketing.campaigns"),
        ("alice", "DROP TABLE main.sales.orders"),
    ],
)
def test_denied_is_403_with_the_python_api_message(
    as_user, api_lakegate, user: str, statement: str
) -> None:
    with pytest.raises(AccessDenied) as expected:
        api_lakegate.session(user).sql(statement)
    status, body = _sql(as_user(user), statement)
    assert status == 403
    assert body == {"error_code": "PERMISSION_DENIED", "message": str(expected.value)}


def test_parse_errors_and_spark_errors_are_400(as_user) -> None:
    status, body = _sql(as_user("alice"), "SELEC nonsense FROM")
    assert status == 400 and body["error_code"] == "INVALID_ARGUMENT"
    status, body = _sql(as_user("alice"), "SELECT no_such_column FROM main.sales.orders")
    assert status in (400, 403) and "no_such_column" in body["message"]


def test_statement_audit_lines(as_user, api_lakegate) -> None:
    ctx = f"nb-{uuid.uuid4().hex}"
    r = as_user("alice").post(
        f"{LG}/statements",
        json={"statement": "SELECT count(*) FROM main.sales.orders"},
        headers={"X-Lakegate-Caller-Context": ctx},
    )
    assert r.status_code == 200 and r.json()["rows"] == [[7]]
    lines = [ln for ln in read_audit(api_lakegate) if ln.get("callerContext") == ctx]
    session_line = next(ln for ln in lines if ln["cmd"] == "select")
    request_line = next(ln for ln in lines if ln["cmd"] == "executeStatement")
    for ln in (session_line, request_line):
        assert (ln["ugi"], ln["proto"], ln["ip"]) == ("alice (auth:TOKEN)", "rest", "/127.0.0.1")
    assert session_line["src"] == "main.sales.orders"
    assert "no-test-orders" in session_line["rowFilters"]
    assert session_line["stmtHash"] == request_line["stmtHash"]


def test_timeout_cancels_and_is_504(as_user) -> None:
    # 8^12 rows to count: minutes of work, so the 1 s deadline always comes first (8^10, a
    # billion, once finished inside the second on a quiet machine)
    joins = ", ".join(f"main.sales.orders o{i}" for i in range(12))
    status, body = _sql(as_user("root"), f"SELECT count(*) FROM {joins}", timeout_seconds=1)
    assert status == 504, body
    assert body["error_code"] == "DEADLINE_EXCEEDED"
    status, body = _sql(as_user("root"), "SELECT count(*) FROM main.sales.orders")
    assert status == 200 and body["rows"] == [[8]]  # the server is still serving


def test_a_statement_failing_after_its_504_is_not_reported_by_asyncio() -> None:
    """A timed-out statement's future is not awaited any more; its later failure (Spark's
    text) must not surface as "Future exception was never retrieved" on stderr."""
    import asyncio
    import gc

    from api.statements import _retrieved

    reported: list[dict] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        for wired in (False, True):
            future = loop.create_future()
            if wired:
                future.add_done_callback(_retrieved)
            future.set_exception(RuntimeError("customer Anna's row"))
            await asyncio.sleep(0)  # callbacks run
            del future
            gc.collect()

    asyncio.run(main())
    assert len(reported) == 1  # only the unwired future was reported


def test_more_statements_than_the_old_eight_threads_run_at_once_when_configured(
    api_lakegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`api.statement_threads` is the app's statement pool: with 12, ten statements are in
    flight together (each holds its thread at a ten-party barrier before running; with
    eight threads the barrier could never fill and every statement would fail), and the
    pool is the app's, ended by its close."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    import httpx
    from api_testkit import serve, token_of

    from api.app import create_app

    app = create_app(api_lakegate, replace(api_lakegate.config.api, statement_threads=12))
    svc = app.state.service
    assert svc.statements._max_workers == 12
    barrier = threading.Barrier(10, timeout=120)  # a bound against a hang, not a timing
    session = api_lakegate.session

    def held(*args, **kwargs):  # the real session once all ten statements hold a thread
        barrier.wait()
        return session(*args, **kwargs)

    monkeypatch.setattr(api_lakegate, "session", held)
    headers = {"Authorization": f"Bearer {token_of('root')}"}
    with serve(app) as url, httpx.Client(base_url=url, timeout=300, headers=headers) as c:

        def one(i: int) -> tuple[int, dict]:
            r = c.post(f"{LG}/statements", json={"statement": f"SELECT {i} AS i"})
            return r.status_code, r.json()

        with ThreadPoolExecutor(10) as callers:
            answers = list(callers.map(one, range(10)))
    assert [(s, b["rows"]) for s, b in answers] == [(200, [[i]]) for i in range(10)]
    assert not barrier.broken
    svc.close()
    with pytest.raises(RuntimeError):
        svc.statements.submit(print)


def test_a_statement_that_waited_out_its_timeout_for_a_thread_never_runs(
    api_lakegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its caller is answered 504 "it did not run": it must not run later when a thread
    frees (a write would land after its caller was told it did not)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    import httpx
    from api_testkit import serve, token_of

    from api.app import create_app

    app = create_app(api_lakegate, replace(api_lakegate.config.api, statement_threads=1))
    release, holding = threading.Event(), threading.Event()
    session, opened = api_lakegate.session, []

    def held(user, *args, **kwargs):  # the first statement keeps the only thread
        opened.append(user)
        if len(opened) == 1:
            holding.set()
            release.wait(120)  # a bound against a hang, not a timing
        return session(user, *args, **kwargs)

    monkeypatch.setattr(api_lakegate, "session", held)
    headers = {"Authorization": f"Bearer {token_of('root')}"}
    try:
        with serve(app) as url, httpx.Client(base_url=url, timeout=300, headers=headers) as c:
            with ThreadPoolExecutor(1) as first_caller:
                first = first_caller.submit(
                    c.post, f"{LG}/statements", json={"statement": "SELECT 1 AS i"}
                )
                assert holding.wait(120)
                late = c.post(
                    f"{LG}/statements", json={"statement": "SELECT 2 AS i", "timeout_seconds": 1}
                )
                release.set()
                assert first.result().status_code == 200
            assert late.status_code == 504
            assert "it did not run" in late.json()["message"]
            app.state.service.statements.submit(lambda: None).result()  # the queue drained
    finally:
        release.set()
        app.state.service.close()
    assert opened == ["root"]  # the late statement never opened a session
