"""After a crash everything is accounted for (issue 42, items 1, 2, 3 and 9): a real
`lakegate serve` is killed with SIGKILL at three moments, in three lives of one lakehouse
(a server start is the slow part: each life ends in a kill, no life is spent on one kind).

* Before the effect (life 1), with UPDATE, DELETE, MERGE, CREATE TABLE, DROP TABLE, ALTER
  TABLE, CREATE SCHEMA and CREATE CATALOG in flight: the test holds the catalog's write
  lock. The ALTER commits to Delta and waits to re-read the table into the catalog
  (governance is the catalog's: not landed); the catalog's statements have their intents
  on record and wait for the lock; UPDATE, DELETE and MERGE have theirs on record and wait
  in reading their tables, whose data files the test made FIFOs nobody writes (the
  statements of one process do not take turns, governance/execute/run.py
  `tagged_commits`): nothing of them happened. The restarted
  server records the outcomes (`phase=recovered`), and takes a token saved with
  `token create --save` at once (item 9).
* Between a CTAS's commit and its registration (life 2): the catalog's write lock held
  again, the CTAS's Delta commit is on disk and its registration in the catalog is not (the
  moment is exact); a CTAS's and an INSERT's intents reach the record meanwhile and wait in
  reading their source, held the same way. `audit query --pending` already judges each
  before any restart; the restarted server records outcomes that agree with the catalog
  and the Delta log, and the leftover, set aside by the next CREATE of the name, is what a
  later look at the intent names.
* After the effect (life 3): the eight kinds again, with the audit log's write lock held
  once every intent is on record: each statement makes its whole effect and waits to write
  its outcome. Killed then, `--pending` alone (no restart) says each landed.

Then `audit verify` shows nothing unknown and `doctor` passes (item 2), naming the leftover
and the command that removes it. The tables are made beforehand in this process, on the
shared SparkSession (the servers' cold JVMs took minutes over them).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from audit.landing import TAG_PREFIX
from catalog.catalog import Catalog
from catalog.store import open_store
from cli import main
from governance.tools.demo import write_config

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "crash-recovery-root-token-0123456789"

SETUP = [
    "CREATE CATALOG IF NOT EXISTS main",
    "CREATE SCHEMA IF NOT EXISTS main.sales",
    "CREATE TABLE main.sales.src AS SELECT 1 AS id",
    *(
        f"CREATE TABLE main.sales.{t} AS SELECT id, id * 10 AS v FROM range(3) AS r(id)"
        for t in ("upd", "del", "mrg", "alt", "drp")
    ),
]
ALTER = ("alter", "main.sales.alt")


def _kinds(n: str) -> dict[tuple[str, str], str]:
    """(cmd, name on the intent line) -> the statement, for moment `n` ("" or "2"); the
    tables' statements have no effect at the first moment, so the second reuses them."""
    return {
        ("update", "main.sales.upd"): "UPDATE main.sales.upd SET v = v + 1",
        ("delete", "main.sales.del"): "DELETE FROM main.sales.del WHERE id = 2",
        ("merge", "main.sales.mrg"): "MERGE INTO main.sales.mrg AS t USING (SELECT 1 AS id) "
        "AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 99",
        ("create", f"main.sales.plain{n}"): f"CREATE TABLE main.sales.plain{n} (id INT)",
        ("drop", "main.sales.drp"): "DROP TABLE main.sales.drp",
        ("create", f"main.more{n}"): f"CREATE SCHEMA main.more{n}",
        ("create", f"other{n}"): f"CREATE CATALOG other{n}",
        # the first commits `note` to Delta only; the second adds `note2` and the catalog
        # re-reads both (repeating an ALTER finishes one the catalog never took)
        ALTER: f"ALTER TABLE main.sales.alt ADD COLUMNS (note{n} STRING)",
    }


# the second moment's riders: their intents on record, waiting in reading main.sales.src
RIDERS = {
    ("create", "main.sales.copy3"): "CREATE TABLE main.sales.copy3 AS SELECT * FROM main.sales.src",
    ("insert", "main.sales.src"): "INSERT INTO main.sales.src SELECT id + 6 FROM main.sales.src",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("LAKEGATE_CONFIG", "LAKEGATE_USER")}
    env["PYTHONPATH"] = str(ROOT)
    log = (root / "server.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli",
            "--config",
            str(root / "lakegate.yaml"),
            "serve",
            "--port",
            str(port),
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _ready(port: int, proc: subprocess.Popen, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become ready")


def _start(root: Path) -> tuple[int, subprocess.Popen]:
    port = _free_port()
    proc = _serve(root, port)
    try:
        _ready(port, proc)
    except BaseException:
        _stop(proc)
        raise
    return port, proc


def _sql(port: int, statement: str, timeout: float = 300) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/lakegate/v1/statements",
        data=json.dumps({"statement": statement}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _lakegate(root: Path, capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["--config", str(root / "lakegate.yaml"), *argv])
    return code, capsys.readouterr().out


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()  # SIGKILL: no outcome line, no registration
    proc.wait()


def _try(call):  # the request dies with its server
    try:
        return call()
    except Exception as e:
        return e


def _hold_reads(catalog: Catalog, names: list[str]) -> list[tuple[Path, Path]]:
    """Each data file of the tables becomes a FIFO nobody writes: a statement reading them
    waits in open(2), before any commit of its own; `_release` puts the files back."""
    moved = []
    for name in names:
        where = Path(catalog.managed_location(*name.split(".")))
        for f in sorted(where.rglob("*.parquet")):
            if "_delta_log" not in f.parts:
                held = f.with_name(f.name + ".held")
                f.rename(held)
                os.mkfifo(f, 0o600)
                moved.append((f, held))
    assert moved, names
    return moved


def _release(moved: list[tuple[Path, Path]]) -> None:
    for f, held in moved:
        with contextlib.suppress(OSError):  # a read still waiting (a killed server's JVM on
            os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))  # its way out) reads EOF
        f.unlink()
        held.rename(f)


def _fire(port: int, statement: str) -> None:
    threading.Thread(target=lambda: _try(lambda: _sql(port, statement, 600)), daemon=True).start()


def _until(what: str, ok: Callable[[], bool], seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.02)


_FIELD = re.compile(r"\t(\w+)=([^\t]*)")


def _lines(root: Path) -> list[dict[str, str]]:
    return [
        dict(_FIELD.findall("\t" + line.split(": ", 1)[1]))
        for log in sorted((root / "audit").glob("audit.log*"))
        for line in log.read_text().splitlines()
        if ": " in line
    ]


def _intents(
    root: Path, wanted: set[tuple[str, str]], before: frozenset[str] = frozenset()
) -> dict[tuple[str, str], str]:
    """(cmd, name) -> query id of each wanted intent on record (but the queries `before`);
    the name is the line's dst, else its src."""
    found = {}
    for ln in _lines(root):
        dst = ln.get("dst")
        key = (ln.get("cmd", ""), dst if dst and dst != "null" else ln.get("src", ""))
        if ln.get("phase") == "intent" and key in wanted and ln.get("queryId") not in before:
            found[key] = ln["queryId"]
    return found


def _tagged(catalog: Catalog, name: str, query_id: str) -> bool:
    """The Delta log of `name` (its managed location) holds a commit of `query_id`."""
    where = Path(catalog.managed_location(*name.split(".")))
    tag = json.dumps(f"{TAG_PREFIX}{query_id}")
    return any(tag in p.read_text() for p in (where / "_delta_log").glob("*.json"))


def _said(root: Path, capsys) -> dict[str, str]:
    """`audit query --pending`'s landing of each pending intent, by query id."""
    code, out = _lakegate(root, capsys, "audit", "query", "--pending", "-o", "json")
    assert code == 0, out
    return {r["queryId"]: r["landing"] for r in json.loads(out)}


def _status(port: int, token: str) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/lakegate/v1/domains",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.timeout(2400)
def test_statements_killed_before_between_or_after_their_effect_get_agreeing_outcomes(
    tmp_path: Path, capsys, spark
) -> None:
    root = tmp_path
    # this process opens the catalog too (sqlite makes its -shm/-wal files): owner-only,
    # as every Lakegate process does (governance/files.py), or doctor names them
    old_umask = os.umask(0o077)
    try:
        _three_lives(root, capsys, spark)
    finally:
        os.umask(old_umask)


def _three_lives(root: Path, capsys, spark) -> None:
    from governance.session.governed import Lakegate

    config = write_config(root)
    cfg = yaml.safe_load(config.read_text())
    cfg["api"] = {
        "tokens": [{"user": "root", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}],
        "timeout": 600,  # a loaded test machine's first statements
    }
    config.write_text(yaml.safe_dump(cfg))
    config.chmod(0o600)  # it holds token hashes (doctor checks)
    db = cfg["catalog"] if os.path.isabs(cfg["catalog"]) else str(root / cfg["catalog"])
    warehouse = Path(cfg["warehouse"])
    catalog = Catalog(open_store(db), warehouse if warehouse.is_absolute() else root / warehouse)
    lg = Lakegate.open(config, spark=spark)
    try:
        admin = lg.session("root")
        for statement in SETUP:
            admin.sql(statement)
    finally:
        lg.close()

    # life 1, before the effect: the catalog's write lock held, nothing can change the catalog
    first = _kinds("")
    port, proc = _start(root)
    try:
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        _fire(port, first[ALTER])
        _until("the ALTER's intent", lambda: ALTER in _intents(root, {ALTER}))
        alter_qid = _intents(root, {ALTER})[ALTER]
        _until("the ALTER's commit", lambda: _tagged(catalog, "main.sales.alt", alter_qid))
        moved = _hold_reads(catalog, [n for c, n in first if c in ("update", "delete", "merge")])
        for key, statement in first.items():
            if key != ALTER:
                _fire(port, statement)
        _until("every intent", lambda: len(_intents(root, set(first))) == len(first))
        time.sleep(1)  # the statements run on: nothing of theirs may happen before the kill
        _kill(proc)
        lock.execute("ROLLBACK")
        lock.close()
    finally:
        _stop(proc)
    _release(moved)
    qids = _intents(root, set(first))
    # the premise: only the ALTER's Delta commit happened, the catalog is as before
    assert catalog.table("main", "sales", "alt").column("note") is None
    for (cmd, name), qid in qids.items():
        if cmd in ("update", "delete", "merge"):
            assert not _tagged(catalog, name, qid), name
    assert catalog.table("main", "sales", "drp") is not None
    assert catalog.table("main", "sales", "plain") is None
    assert not catalog.has_schema("main", "more") and not catalog.has_catalog("other")

    # life 2: the first moment recovered; then a CTAS killed between commit and registration
    target = root / "warehouse" / "main" / "sales" / "copy"
    port, proc = _start(root)
    try:
        # recovered at start: nothing pending, each outcome says not landed
        assert _said(root, capsys) == {}
        recovered = {ln["queryId"]: ln for ln in _lines(root) if ln.get("phase") == "recovered"}
        for key, qid in qids.items():
            line = recovered[qid]
            assert line["succeeded"] == "false", (key, line)
            assert "died: not landed" in line["reason"], (key, line)
        assert "but the catalog never re-read it" in recovered[qids[ALTER]]["reason"]
        # never registered; whether its Delta commit came first is a race (writes do not
        # take turns), and either way the catalog never had it
        assert "never registered" in recovered[qids[("create", "main.sales.plain")]]["reason"]

        # item 9: a token saved now is taken by the running server at once
        code, out = _lakegate(root, capsys, "token", "create", "-u", "root", "--save")
        assert code == 0
        saved = out.splitlines()[0]
        _until("the saved token's acceptance", lambda: _status(port, saved) == 200, 30)
        assert _status(port, saved + "x") == 401

        # the catalog's write lock: the CTAS commits to Delta, then waits to register
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        _fire(port, "CREATE TABLE main.sales.copy AS SELECT * FROM main.sales.src")
        _until("the CTAS's commit", lambda: bool(list((target / "_delta_log").glob("*.json"))))
        # two more kinds, killed once their intents are on record: they wait in reading src
        before = frozenset(ln["queryId"] for ln in _lines(root) if ln.get("phase") == "intent")
        moved = _hold_reads(catalog, ["main.sales.src"])
        for statement in RIDERS.values():
            _fire(port, statement)
        _until("the riders' intents", lambda: len(_intents(root, set(RIDERS), before)) == 2)
        time.sleep(1)  # the statements run on: nothing of theirs may happen before the kill
        _kill(proc)
        lock.execute("ROLLBACK")
        lock.close()
    finally:
        _stop(proc)
    _release(moved)
    recovered_before = {ln["queryId"] for ln in _lines(root) if ln.get("phase") == "recovered"}

    # before any restart: the intent is pending, and what it did is already known
    code, out = _lakegate(root, capsys, "audit", "query", "--pending", "-o", "json")
    assert code == 0
    rows = json.loads(out)
    assert rows and all("unknown" not in r["landing"] for r in rows), rows
    assert any("never registered" in r["landing"] for r in rows), rows
    said = {(r["cmd"], r.get("dst") or r["src"]): r["landing"] for r in rows}
    assert "main.sales.copy3" not in _lakegate(root, capsys, "catalog", "list", "-o", "json")[1]
    assert said[("create", "main.sales.copy3")].startswith("not landed"), said
    assert said[("insert", "main.sales.src")].startswith("not landed: no commit of it"), said

    # life 3: the CTAS recovered; then every kind killed after its effect
    second = _kinds("2")
    port, proc = _start(root)
    try:
        # recovered at start: nothing is pending, the outcome says not landed
        assert _said(root, capsys) == {}
        recovered_now = [
            ln
            for ln in _lines(root)
            if ln.get("phase") == "recovered" and ln["queryId"] not in recovered_before
        ]
        assert recovered_now, "no outcome was recovered"
        assert all(ln["succeeded"] == "false" for ln in recovered_now), recovered_now
        assert any("never registered" in ln["reason"] for ln in recovered_now), recovered_now
        code, out = _lakegate(root, capsys, "audit", "verify")
        assert code == 0 and "notice" not in out, out
        # the name is free: the next CREATE sets the leftover aside and succeeds
        status, body = _sql(port, "CREATE TABLE main.sales.copy AS SELECT * FROM main.sales.src")
        assert status == 200, body
        assert list(target.parent.glob("copy.orphan-*")), "the leftover was not set aside"

        # every intent on record, then the audit log's write lock held: each statement
        # makes its whole effect and waits to write its outcome
        done = frozenset(ln["queryId"] for ln in _lines(root) if ln.get("phase") == "intent")
        for statement in second.values():
            _fire(port, statement)
        _until("every intent", lambda: len(_intents(root, set(second), done)) == len(second))
        held = os.open(root / "audit" / "audit.lock", os.O_RDWR)
        fcntl.flock(held, fcntl.LOCK_EX)
        qids2 = _intents(root, set(second), done)

        def effects_done() -> bool:
            alt = catalog.table("main", "sales", "alt")
            return (
                all(
                    _tagged(catalog, name, qids2[(cmd, name)])
                    for cmd, name in second
                    if cmd in ("update", "delete", "merge")
                )
                and alt is not None
                and alt.column("note") is not None
                and alt.column("note2") is not None
                and catalog.table("main", "sales", "plain2") is not None
                and catalog.table("main", "sales", "drp") is None
                and catalog.has_schema("main", "more2")
                and catalog.has_catalog("other2")
            )

        _until("every effect", effects_done, 600)
        _kill(proc)
        fcntl.flock(held, fcntl.LOCK_UN)
        os.close(held)
    finally:
        _stop(proc)

    # without a restart, the judge alone: each of the eight kinds landed
    said = _said(root, capsys)
    assert {key: said.get(qid, "")[:7] for key, qid in qids2.items()} == {
        key: "landed:" for key in qids2
    }, said
    assert not [t for t in said.values() if t.startswith("unknown")], said
    code, out = _lakegate(root, capsys, "audit", "verify")
    assert code == 0 and "unknown" not in out, out
    # item 2: the recovered lakehouse passes doctor, which names the leftover and the one
    # command that removes it; after that command, nothing is left to name
    checks = {c["check"]: c for c in json.loads(_lakegate(root, capsys, "doctor", "-o", "json")[1])}
    assert not [c for c in checks.values() if c["status"] == "FAIL"], checks
    detail = checks["leftovers"]["detail"]  # the CTAS's, set aside; maybe the CREATE's too
    assert "copy.orphan-" in detail and "(set aside)" in detail, detail
    assert detail.endswith("'lakegate catalog leftovers --remove' removes them"), detail
    assert _lakegate(root, capsys, "catalog", "leftovers", "--remove", "--yes")[0] == 0
    checks = {c["check"]: c for c in json.loads(_lakegate(root, capsys, "doctor", "-o", "json")[1])}
    assert checks["leftovers"]["status"] == "ok", checks["leftovers"]
