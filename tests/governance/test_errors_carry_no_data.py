"""Errors never carry data (issue 10, item 1b): a failure while running a statement reaches
the caller as its error class and the query id of its audit lines; the full text, which may
quote values, goes to the server log only. Allow-listed analysis errors stay readable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from audit.query import query
from cli import main
from governance.session.governed import StatementFailed, route_error_log

# to_number fails on every name and Spark's message quotes the value it could not parse
QUOTING = "SELECT to_number(name, '9') AS n FROM main.sales.customers"
NAMES = ("Anna", "Ben", "Chen", "Dominique", "Schmidt", "Carter")
CLASS_AND_ID = re.compile(r"statement failed: \[[A-Z][A-Z_.]*\] \(query ([0-9a-f]{32})\)")


def no_names(text: str) -> bool:
    return not any(n in text for n in NAMES)


@pytest.fixture(scope="module")
def server_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("errlog") / "lakegate-server.log"
    route_error_log(path)
    return path


def test_a_runtime_error_at_collect_is_class_and_query_id_only(lakehouse, server_log):
    s = lakehouse.session("alice")
    df = s.sql(QUOTING)
    with pytest.raises(StatementFailed) as caught:
        df.collect()
    message = str(caught.value)
    m = CLASS_AND_ID.fullmatch(message)
    assert m and no_names(message), message
    assert m.group(1) == s.last_query_id
    assert s.last_query_id in {r.query_id for r in query(lakehouse.config.audit).records}
    logged = server_log.read_text()
    assert s.last_query_id in logged and not no_names(logged)  # full text: server side only


def test_every_action_of_a_governed_frame_is_class_and_query_id_only(lakehouse):
    s = lakehouse.session("alice")
    with pytest.raises(StatementFailed) as caught:
        s.sql(QUOTING).take(1)
    assert CLASS_AND_ID.fullmatch(str(caught.value)) and no_names(str(caught.value))


def test_an_allow_listed_analysis_error_stays_readable(lakehouse):
    s = lakehouse.session("alice")
    with pytest.raises(StatementFailed, match=r"UNRESOLVED_COLUMN.*no_such_col"):
        s.sql("SELECT no_such_col FROM main.sales.orders")
    reason = [
        r.reason for r in query(lakehouse.config.audit).records if r.query_id == s.last_query_id
    ]
    assert reason and "no_such_col" in reason[0]


def test_the_cli_prints_class_and_query_id_only(lakehouse, capsys):
    config = str(lakehouse.config.path)
    assert main(["--config", config, "sql", "--user", "alice", QUOTING]) == 1
    err = capsys.readouterr().err
    m = CLASS_AND_ID.search(err)
    assert m and no_names(err), err
    log = Path(config).parent / "lakegate-server.log"
    assert m.group(1) in log.read_text() and not no_names(log.read_text())
    assert m.group(1) in {r.query_id for r in query(lakehouse.config.audit).records}
