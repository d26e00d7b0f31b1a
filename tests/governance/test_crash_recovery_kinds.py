"""After a crash every statement kind is accounted for (issue 42, item 1): a real `lakegate
serve` is killed with SIGKILL at two moments, with UPDATE, DELETE, MERGE, CREATE TABLE,
DROP TABLE, ALTER TABLE, CREATE SCHEMA and CREATE CATALOG in flight, and every intent gets
an outcome that agrees with the catalog and the Delta logs; `audit query --pending` and
`audit verify` show nothing unknown, and `doctor` passes (item 2).

* Before the effect: the test holds the catalog's write lock. The ALTER commits to Delta
  and waits to re-read the table into the catalog (governance is the catalog's: not
  landed); the catalog's statements have their intents on record and wait for the lock;
  UPDATE, DELETE and MERGE have theirs on record and wait in reading their tables, whose
  data files the test made FIFOs nobody writes (the statements of one process do not take
  turns, governance/execute/run.py `tagged_commits`): nothing of them happened. The
  restarted server records the outcomes (`phase=recovered`).
* After the effect: the test holds the audit log's write lock once every intent is on
  record: each statement makes its whole effect and waits to write its outcome. Killed
  then, `--pending` alone (no restart) says each landed.

The restarted server also takes a token saved with `token create --save` at once (item 9).
Helpers are test_crash_recovery.py's (the CTAS moment lives there).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from test_crash_recovery import TOKEN, _free_port, _lakegate, _ready, _serve, _sql, _stop, _try

from audit.landing import TAG_PREFIX
from catalog.catalog import Catalog
from catalog.store import open_store
from governance.tools.demo import write_config

SETUP = [
    "CREATE CATALOG IF NOT EXISTS main",
    "CREATE SCHEMA IF NOT EXISTS main.sales",
    *(
        f"CREATE TABLE main.sales.{t} AS SELECT id, id * 10 AS v FROM range(3) AS r(id)"
        for t in ("upd", "del", "mrg", "alt", "drp")
    ),
]


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
        ("alter", "main.sales.alt"): f"ALTER TABLE main.sales.alt ADD COLUMNS (note{n} STRING)",
    }


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
    """(cmd, src) -> query id of each wanted intent on record (but the queries `before`)."""
    return {
        (ln["cmd"], ln["src"]): ln["queryId"]
        for ln in _lines(root)
        if ln.get("phase") == "intent"
        and (ln.get("cmd"), ln.get("src")) in wanted
        and ln.get("queryId") not in before
    }


def _tagged(catalog: Catalog, name: str, query_id: str) -> bool:
    """The Delta log of `name` (its managed location) holds a commit of `query_id`."""
    where = Path(catalog.managed_location(*name.split(".")))
    tag = json.dumps(f"{TAG_PREFIX}{query_id}")
    return any(tag in p.read_text() for p in (where / "_delta_log").glob("*.json"))


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


def _until(what: str, ok, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.02)


def _said(root: Path, capsys) -> dict[str, str]:
    """`audit query --pending`'s landing of each pending intent, by query id."""
    code, out = _lakegate(root, capsys, "audit", "query", "--pending", "-o", "json")
    assert code == 0, out
    return {r["queryId"]: r["landing"] for r in json.loads(out)}


@pytest.mark.timeout(2400)
def test_every_statement_kind_killed_before_or_after_its_effect_gets_an_agreeing_outcome(
    tmp_path: Path, capsys
) -> None:
    root = tmp_path
    # this process opens the catalog too (sqlite makes its -shm/-wal files): owner-only,
    # as every Lakegate process does (governance/files.py), or doctor names them
    old_umask = os.umask(0o077)
    try:
        _crash_at_two_moments(root, capsys)
    finally:
        os.umask(old_umask)


def _crash_at_two_moments(root: Path, capsys) -> None:
    config = write_config(root)
    cfg = yaml.safe_load(config.read_text())
    cfg["api"] = {
        "tokens": [{"user": "root", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}],
        "timeout": 600,
    }
    config.write_text(yaml.safe_dump(cfg))
    config.chmod(0o600)
    db = cfg["catalog"] if os.path.isabs(cfg["catalog"]) else str(root / cfg["catalog"])
    warehouse = Path(cfg["warehouse"])
    catalog = Catalog(open_store(db), warehouse if warehouse.is_absolute() else root / warehouse)
    first, alter = _kinds(""), ("alter", "main.sales.alt")

    port = _free_port()
    proc = _serve(root, port)
    try:
        _ready(port, proc)
        for statement in SETUP:
            status, body = _sql(port, statement)
            assert status == 200, (statement, body)
        # moment 1: the catalog's write lock held, nothing can change the catalog
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        _fire(port, first[alter])  # first: it holds the others' turn while it waits
        _until("the ALTER's intent", lambda: alter in _intents(root, {alter}))
        alter_qid = _intents(root, {alter})[alter]
        _until("the ALTER's commit", lambda: _tagged(catalog, "main.sales.alt", alter_qid))
        dml = [name for cmd, name in first if cmd in ("update", "delete", "merge")]
        moved = _hold_reads(catalog, dml)
        for key, statement in first.items():
            if key != alter:
                _fire(port, statement)
        _until("every intent", lambda: len(_intents(root, set(first))) == len(first))
        time.sleep(1)  # the statements run on: nothing of theirs may happen before the kill
        proc.kill()
        proc.wait()
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

    port = _free_port()
    proc = _serve(root, port)
    second = _kinds("2")
    try:
        _ready(port, proc)
        # recovered at start: nothing pending, each outcome says not landed
        assert _said(root, capsys) == {}
        recovered = {ln["queryId"]: ln for ln in _lines(root) if ln.get("phase") == "recovered"}
        for key, qid in qids.items():
            line = recovered[qid]
            assert line["succeeded"] == "false", (key, line)
            assert "died: not landed" in line["reason"], (key, line)
        assert "but the catalog never re-read it" in recovered[qids[alter]]["reason"]
        assert "was never registered" in recovered[qids[("create", "main.sales.plain")]]["reason"]

        # item 9: a token saved now is taken by the running server at once
        code, out = _lakegate(root, capsys, "token", "create", "-u", "root", "--save")
        assert code == 0
        saved = out.splitlines()[0]
        _until("the saved token's acceptance", lambda: _status(port, saved) == 200, 30)
        assert _status(port, saved + "x") == 401

        # moment 2: every intent on record, then the audit log's write lock held: each
        # statement makes its whole effect and waits to write its outcome
        for statement in second.values():
            _fire(port, statement)
        done = frozenset(qids.values())
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
        proc.kill()
        proc.wait()
        fcntl.flock(held, fcntl.LOCK_UN)
        os.close(held)
    finally:
        _stop(proc)

    # without a restart: each of the second moment's intents landed, the judge alone says so
    said = _said(root, capsys)
    assert {key: said.get(qid, "")[:7] for key, qid in qids2.items()} == {
        key: "landed:" for key in qids2
    }, said
    assert not [t for t in said.values() if t.startswith("unknown")], said
    code, out = _lakegate(root, capsys, "audit", "verify")
    assert code == 0 and "unknown" not in out, out
    checks = {c["check"]: c for c in json.loads(_lakegate(root, capsys, "doctor", "-o", "json")[1])}
    assert not [c for c in checks.values() if c["status"] == "FAIL"], checks


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
