"""An intent without an outcome is resolved (issue 28, item 4): every Delta commit a governed
write makes names its query in the commit's userMetadata, so `audit query --pending` and
`audit verify` say whether the write landed, and a restarted server records the missing
outcome as `phase=recovered`. Real Delta tables; the crashed server is an audit writer that
wrote intents and stopped (its writer lock free), one of whose three writes committed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from audit import AuditEvent, AuditLog
from audit.landing import COMMIT_TAG_CONF, TAG_PREFIX
from audit.query import query
from audit.verify import verify
from cli.audit import audit
from cli.kit import EXIT_OK
from cli.kit import run as run_cli
from governance.execute.run import tagged_commits
from governance.session.recovery import recover_outcomes
from governance.verify.guard import analyzed_command, run_analyzed

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: u-all, principals: [u], privileges: [select, modify, create], on: "l.s.*"}
  - {id: v-all, principals: [v], privileges: [select, modify, create], on: "l.s.*"}
"""


@pytest.fixture(scope="module")
def llake(make_lakegate):
    return make_lakegate(
        "audit-landing",
        POLICIES,
        ["CREATE CATALOG l", "CREATE SCHEMA l.s", "CREATE TABLE l.s.t (id INT)"],
    )


def table_dir(lg) -> Path:
    location = lg.catalog.table("l", "s", "t").location
    return Path(location.removeprefix("file:"))


def last_commit(lg) -> tuple[int, dict]:
    newest = max((table_dir(lg) / "_delta_log").glob("*.json"), key=lambda p: int(p.stem))
    for line in newest.read_text().splitlines():
        if '"commitInfo"' in line:
            return int(newest.stem), json.loads(line)["commitInfo"]
    raise AssertionError(f"no commitInfo in {newest}")


@pytest.mark.parametrize(
    "sql",
    ["INSERT INTO l.s.t VALUES (1), (2)", "UPDATE l.s.t SET id = id + 1", "DELETE FROM l.s.t"],
)
def test_a_governed_write_names_its_query_in_its_delta_commit(llake, sql):
    s = llake.session("u")
    s.sql(sql)
    _, info = last_commit(llake)
    assert info["userMetadata"] == f"{TAG_PREFIX}{s.last_query_id}"
    assert llake.spark.conf.get(COMMIT_TAG_CONF, None) is None  # the tag is gone again


def test_a_read_leaves_no_tag_in_the_session(llake):
    s = llake.session("u")
    s.sql("SELECT id FROM l.s.t").collect()
    assert llake.spark.conf.get(COMMIT_TAG_CONF, None) is None


def commit_tags(lg, table: str) -> list[str | None]:
    """Each commit's userMetadata in the Delta log of l.s.<table>, oldest first."""
    where = Path(lg.catalog.table("l", "s", table).location.removeprefix("file:"))
    out = []
    for log in sorted((where / "_delta_log").glob("*.json"), key=lambda p: int(p.stem)):
        for line in log.read_text().splitlines():
            if '"commitInfo"' in line:
                out.append(json.loads(line)["commitInfo"].get("userMetadata"))
    return out


def test_parallel_writes_of_two_users_each_tag_their_own_commits(llake):
    """Writes of one process no longer take turns (the tag is set in a clone of the session
    per command, governance/verify/guard.py `commands_with`): two users write two tables at
    the same moment, again and again, and every commit names the statement that made it."""
    admin = llake.session("admin")
    for name in ("pa", "pb"):
        admin.sql(f"CREATE TABLE l.s.{name} (id INT)")
    before = {name: len(commit_tags(llake, name)) for name in ("pa", "pb")}
    statements = [
        "INSERT INTO l.s.{t} VALUES (1), (2), (3)",
        "UPDATE l.s.{t} SET id = id + 10 WHERE id > 1",
        "DELETE FROM l.s.{t} WHERE id = 1",
        "MERGE INTO l.s.{t} AS x USING (SELECT 12 AS id) AS y ON x.id = y.id "
        "WHEN MATCHED THEN DELETE",
    ]
    start = threading.Barrier(2, timeout=600)
    ran: dict[str, list[str]] = {"pa": [], "pb": []}
    errors: list[BaseException] = []

    def writer(user: str, table: str) -> None:
        try:
            s = llake.session(user)
            for sql in statements:
                start.wait()  # both statements start together
                s.sql(sql.format(t=table))
                ran[table].append(s.last_query_id)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=writer, args=args) for args in (("u", "pa"), ("v", "pb"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name in ("pa", "pb"):
        tags = commit_tags(llake, name)[before[name] :]
        assert tags == [f"{TAG_PREFIX}{q}" for q in ran[name]], name
    assert llake.spark.conf.get(COMMIT_TAG_CONF, None) is None  # never set in the session
    for name in ("pa", "pb"):  # 1,2,3 -> 1,12,13 -> 12,13 -> 13: each write took effect
        assert [r.id for r in admin.sql(f"SELECT id FROM l.s.{name}").collect()] == [13]


def test_a_write_does_not_wait_for_another_statements_tagged_commits(llake):
    """While one statement's commits are tagged (its thread inside `tagged_commits`), a
    write of another thread runs to its end with its own tag; the first's command then
    still carries the first's."""
    admin = llake.session("admin")
    admin.sql("CREATE TABLE l.s.held (id INT)")
    inside, release = threading.Event(), threading.Event()
    where = Path(llake.catalog.table("l", "s", "held").location.removeprefix("file:"))

    def held() -> None:
        with tagged_commits("q-held"):
            inside.set()
            release.wait(600)
            insert = f"INSERT INTO delta.`{where}` VALUES (7)"
            run_analyzed(llake.spark, analyzed_command(llake.spark, insert))

    t = threading.Thread(target=held)
    t.start()
    try:
        assert inside.wait(60)
        s = llake.session("u")
        s.sql("INSERT INTO l.s.held VALUES (1)")  # the old process-wide lock blocked here
        assert commit_tags(llake, "held")[-1] == f"{TAG_PREFIX}{s.last_query_id}"
    finally:
        release.set()
        t.join()
    assert commit_tags(llake, "held")[-1] == f"{TAG_PREFIX}q-held"


def intent(query_id: str, src: str = "l.s.t", cmd: str = "insert") -> AuditEvent:
    return AuditEvent(allowed=True, user="u", auth="TOKEN", cmd=cmd, src=src,
                      query_id=query_id, policy_version="sha256:test", phase="intent",
                      proto="rest")  # fmt: skip


def test_intents_of_a_crashed_server_say_whether_they_landed_and_are_recovered(
    llake, capsys: pytest.CaptureFixture[str]
):
    directory = llake.config.audit
    with AuditLog(directory, writer_id="crashed-server") as crashed:
        crashed.write([intent("q-landed")])
        with tagged_commits("q-landed"):  # the write ran; its outcome was lost
            insert = f"INSERT INTO delta.`{table_dir(llake)}` VALUES (42)"
            run_analyzed(llake.spark, analyzed_command(llake.spark, insert))
        crashed.write([intent("q-lost-1")])
        crashed.write([intent("q-lost-2")])
    version, _ = last_commit(llake)
    with AuditLog(directory, writer_id="busy-server") as busy:
        busy.write([intent("q-running")])  # its writer is alive: it may still finish

        pending = [r.query_id for r in query(directory, pending=True).records]
        assert pending[-4:] == ["q-landed", "q-lost-1", "q-lost-2", "q-running"]
        argv = ["--config", str(llake.config.path), "query", "--pending", "-o", "json"]
        assert run_cli(audit, argv, prog="lakegate audit") == EXIT_OK
        said = {r["queryId"]: r["landing"] for r in json.loads(capsys.readouterr().out)}
        assert said["q-landed"] == f"landed: l.s.t version {version}"
        assert said["q-lost-1"] == "not landed: no commit of it in l.s.t"
        assert said["q-running"] == "not landed: no commit of it in l.s.t"

        resolved = recover_outcomes(llake)
        assert sorted((r.intent.query_id, r.landing.state) for r in resolved) == [
            ("q-landed", "landed"),
            ("q-lost-1", "not landed"),
            ("q-lost-2", "not landed"),
        ]
        records = query(directory).records
        recovered = [(r.query_id, r.succeeded, r.user) for r in records if r.phase == "recovered"]
        assert recovered == [("q-landed", True, "u"), ("q-lost-1", False, "u"),
                             ("q-lost-2", False, "u")]  # fmt: skip
        landed = next(r for r in records if r.phase == "recovered" and r.query_id == "q-landed")
        assert landed.reason == (
            f"recovered after its writer crashed-server died: landed: l.s.t version {version}"
        )
        assert [r.query_id for r in query(directory, pending=True).records] == ["q-running"]
        assert recover_outcomes(llake) == []  # nothing left to recover
    assert verify(directory).ok

    argv = ["--config", str(llake.config.path), "verify"]
    run_cli(audit, argv, prog="lakegate audit")
    out = capsys.readouterr().out
    assert "(query q-running, insert l.s.t): not landed: no commit of it in l.s.t" in out


def test_a_write_to_a_table_dropped_since_is_dropped_and_create_catalog_is_the_catalogs(
    llake, capsys: pytest.CaptureFixture[str]
):
    """Issue 42 (b): no intent stays `unknown` when its table's Delta log went with a DROP,
    nor a CREATE CATALOG (its line names the catalog)."""
    admin = llake.session("admin")
    for name in ("gone", "again", "unregistered"):
        admin.sql(f"CREATE TABLE l.s.{name} (id INT)")
    directory = llake.config.audit
    with AuditLog(directory, writer_id="crashed-before-drops") as crashed:
        crashed.write(
            [
                intent("q-gone", "l.s.gone"),
                intent("q-again", "l.s.again", "update"),
                intent("q-unregistered", "l.s.unregistered", "merge"),
                intent("q-catalog", "l2", "create"),
                intent("q-no-catalog", "l3", "create"),
            ]
        )
    admin.sql("DROP TABLE l.s.gone")
    admin.sql("DROP TABLE l.s.again")
    drop_again = admin.last_query_id
    admin.sql("CREATE TABLE l.s.again (id INT)")  # a new table under the name
    assert llake.catalog.drop_table("l", "s", "unregistered")  # outside any statement
    admin.sql("CREATE CATALOG l2")
    made = [r for r in query(directory).records if r.query_id == admin.last_query_id]
    assert {(r.cmd, r.src, r.phase) for r in made} == {
        ("create", "l2", "intent"),
        ("create", "l2", "outcome"),
    }

    argv = ["--config", str(llake.config.path), "query", "--pending", "-o", "json"]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_OK
    said = {r["queryId"]: r["landing"] for r in json.loads(capsys.readouterr().out)}
    assert said["q-again"] == (
        f"dropped: l.s.again was dropped after it (query {drop_again}), its Delta log with it: "
        "whether it landed cannot be told, and nothing it wrote is left in a registered table"
    )
    assert said["q-unregistered"].startswith(
        "dropped: l.s.unregistered is no longer in the catalog and no Delta log of it is left"
    )
    assert said["q-catalog"] == "landed: l2 is in the catalog"
    assert said["q-no-catalog"] == "not landed: l3 is not in the catalog"

    resolved = {
        r.intent.query_id: r.landing.state
        for r in recover_outcomes(llake)
        if r.intent.writer == "crashed-before-drops"
    }
    assert resolved == {
        "q-gone": "dropped",
        "q-again": "dropped",
        "q-unregistered": "dropped",
        "q-catalog": "landed",
        "q-no-catalog": "not landed",
    }
    records = query(directory).records
    recovered = {r.query_id: r.succeeded for r in records if r.phase == "recovered"}
    assert {q: recovered[q] for q in resolved} == {
        "q-gone": False,
        "q-again": False,
        "q-unregistered": False,
        "q-catalog": True,
        "q-no-catalog": False,
    }
    assert not [r for r in query(directory, pending=True).records if r.query_id in resolved]
    assert verify(directory).ok
