"""A reload never serves a half-written policy set (issue 10, item 6): a changed directory is
loaded only after it settled, a git ref's committed tree is loaded instead of the working files,
and every audit line names the policy set that decided it (policyVersion)."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import replace

import pytest

from audit.query import query
from governance.errors import LakegateError
from governance.session.governed import Lakegate

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: carol-read, principals: [carol], privileges: [select], on: "r.s.*"}
"""
MASK = """column_masks:
  - {id: name-hash, on: r.s.c, columns: [name], mask: hash, principals: [carol]}
"""
READ = "SELECT name FROM r.s.c"


@pytest.fixture(scope="module")
def rlake(make_lakegate):
    lg = make_lakegate(
        "reload-snapshot",
        POLICIES,
        ["CREATE CATALOG r", "CREATE SCHEMA r.s", "CREATE TABLE r.s.c (id INT, name STRING)"],
    )
    (lg.config.policies / "mask.yaml").write_text(MASK)
    assert lg.reload_policies()
    return lg


def masked(lg: Lakegate) -> bool:
    planned = lg.session("carol")._planner().plan(READ)
    return ("name", "hash") in planned.audit_lines()[0]["masked"]


def test_deleting_and_recreating_a_mask_file_never_plans_without_the_mask(rlake):
    mask = rlake.config.policies / "mask.yaml"
    stop = threading.Event()
    unmasked: list[int] = []
    plans = [0]

    def reader() -> None:
        while not stop.is_set():
            rlake.maybe_reload(min_interval=0)
            plans[0] += 1
            if not masked(rlake):
                unmasked.append(plans[0])

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(15):  # what git checkout does: delete, then write again
        mask.unlink()
        time.sleep(0.05)
        mask.write_text(MASK)
        time.sleep(0.05)
    time.sleep(rlake.config.policies_settle + 0.3)
    stop.set()
    for t in threads:
        t.join()
    assert plans[0] > 20 and unmasked == []
    assert masked(rlake)


def test_a_settled_change_is_loaded(rlake):
    f = rlake.config.policies / "extra.yaml"
    f.write_text("groups: {readers: [zed]}\n")
    before = rlake.policy_version
    rlake.maybe_reload(min_interval=0)
    assert rlake.policy_version == before  # seen, not yet settled
    time.sleep(rlake.config.policies_settle + 0.1)
    rlake.maybe_reload(min_interval=0)
    assert rlake.policy_version != before
    f.unlink()
    assert rlake.reload_policies()


def test_every_audit_line_names_the_policy_version(rlake):
    s = rlake.session("carol")
    s.sql(READ).collect()
    with pytest.raises(LakegateError):
        s.sql("SELECT * FROM r.s.nothing")
    rlake.session("admin").sql("INSERT INTO r.s.c VALUES (1, 'x')")
    assert rlake.reload_policies()
    records = query(rlake.config.audit).records
    assert records and all(
        r.policy_version and r.policy_version.startswith("sha256:") for r in records
    )
    assert records[-1].cmd == "policyReload"
    assert records[-1].policy_version == rlake.policy_version


def git(cwd, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_git_mode_loads_the_committed_tree_not_the_working_files(rlake, spark):
    pol = rlake.config.policies
    git(pol, "init", "-q", "-b", "main")
    git(pol, "add", ".")
    git(pol, "commit", "-qm", "policies")
    commit = git(pol, "rev-parse", "HEAD")
    lg = Lakegate(
        replace(rlake.config, policies_ref="main", audit=rlake.config.audit.parent / "audit-git"),
        spark=spark,
    )
    try:
        assert lg.policy_version == f"git:{commit}"
        (pol / "mask.yaml").unlink()  # a working-tree change, never committed
        lg.maybe_reload(min_interval=0)
        time.sleep(lg.config.policies_settle + 0.1)
        lg.maybe_reload(min_interval=0)
        assert masked(lg) and lg.policy_version == f"git:{commit}"
        git(pol, "commit", "-qam", "drop the mask")
        lg.maybe_reload(min_interval=0)
        time.sleep(lg.config.policies_settle + 0.1)
        lg.maybe_reload(min_interval=0)
        assert not masked(lg) and lg.policy_version == f"git:{git(pol, 'rev-parse', 'HEAD')}"
    finally:
        lg.close()
        (pol / "mask.yaml").write_text(MASK)
        rlake.reload_policies()
