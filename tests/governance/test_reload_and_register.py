"""Hot reload swaps in a new policy set; a broken one keeps the last good set in force.
Registering an existing Delta table reads its schema from the Delta log."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from catalog.delta import NotADeltaTable
from governance import AccessDenied, Lakegate
from governance.tools.demo import write_config

GRANT = """
groups:
  readers: [alice]
grants:
  - id: readers-read-ext
    principals: [group:readers]
    privileges: [select]
    on: ext.raw.*
"""


@pytest.fixture(scope="module")
def lg(spark, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("reload")
    pol = root / "src-policies"
    pol.mkdir()
    (pol / "p.yaml").write_text(GRANT)
    data = root / "external" / "events"
    spark.range(5).selectExpr("id", "cast(id AS string) AS label").write.format("delta").save(
        str(data)
    )
    lg = Lakegate.open(write_config(root / "lh", pol), spark=spark)
    lg.register_table("ext.raw.events", str(data))
    yield lg
    lg.close()


def _write_policy(lg: Lakegate, text: str) -> None:
    f = lg.config.policies / "p.yaml"
    f.write_text(text)
    later = time.time() + 2
    os.utime(f, (later, later))  # mtime must move even within the clock's resolution


def _settled_reload(lg: Lakegate) -> None:
    """A changed directory is loaded once it stayed unchanged for the settle interval."""
    lg.maybe_reload(min_interval=0)
    time.sleep(lg.config.policies_settle + 0.05)
    lg.maybe_reload(min_interval=0)


def _reload_lines(lg: Lakegate) -> list[str]:
    log = (lg.config.audit / "audit.log").read_text().splitlines()
    return [ln for ln in log if "cmd=policyReload" in ln]


def test_register_reads_schema_from_the_delta_log(lg: Lakegate) -> None:
    info = lg.catalog.table("ext", "raw", "events")
    assert [(c.name, c.type_text) for c in info.columns] == [("id", "bigint"), ("label", "string")]
    assert Path(info.location).is_absolute()


def test_register_refuses_a_path_without_delta_log(lg: Lakegate, tmp_path: Path) -> None:
    with pytest.raises(NotADeltaTable, match="not a Delta table"):
        lg.register_table("ext.raw.nothing", str(tmp_path))
    assert lg.catalog.table("ext", "raw", "nothing") is None


def _register_lines(lg: Lakegate) -> list[str]:
    log = (lg.config.audit / "audit.log").read_text().splitlines()
    return [ln for ln in log if "cmd=registerTable" in ln]


def test_registering_is_audited(lg: Lakegate, tmp_path: Path) -> None:
    """Both outcomes of a registration made in this test are on record (no reliance on
    what earlier tests registered)."""
    before = len(_register_lines(lg))
    lg.register_table(
        "ext.raw.events", lg.catalog.table("ext", "raw", "events").location, replace=True
    )
    with pytest.raises(NotADeltaTable):
        lg.register_table("ext.raw.audited_nothing", str(tmp_path))
    lines = _register_lines(lg)[before:]
    intents = [ln for ln in lines if "phase=intent" in ln]
    new = [ln for ln in lines if "phase=outcome" in ln]
    assert len(intents) == 2 and len(new) == 2  # audit before effect: intent, then outcome
    assert "src=ext.raw.events" in intents[0] and "src=ext.raw.audited_nothing" in intents[1]
    assert "src=ext.raw.events" in new[0] and "succeeded=true" in new[0]
    assert "proto=cli" in new[0]
    assert "src=ext.raw.audited_nothing" in new[1] and "succeeded=false" in new[1]


def test_hot_reload_applies_changed_policies_and_keeps_last_good(lg: Lakegate, caplog) -> None:
    s = lg.session("alice")
    assert s.sql("SELECT count(*) AS n FROM ext.raw.events").first().n == 5

    _write_policy(
        lg,
        GRANT
        + """
row_filters:
  - id: small-ids
    on: ext.raw.events
    principals: [alice]
    where: "id < 2"
""",
    )
    _settled_reload(lg)
    assert s.sql("SELECT count(*) AS n FROM ext.raw.events").first().n == 2

    good_hash = lg.enforcer.policy_set.content_hash
    _write_policy(lg, "grants: [ {principals: [alice], privileges: [selekt], on: x.y.z} ]\n")
    with caplog.at_level("WARNING", logger="lakegate.errors"):
        assert lg.reload_policies() is False
    assert lg.enforcer.policy_set.content_hash == good_hash  # never open, never empty
    assert any(
        "policy reload rejected" in r.getMessage() and "selekt" in r.getMessage()
        for r in caplog.records
    )  # the server's own log says so too
    assert s.sql("SELECT count(*) AS n FROM ext.raw.events").first().n == 2
    last = _reload_lines(lg)[-1]
    assert "allowed=false" in last and "selekt" in last

    _write_policy(lg, "groups: {readers: [bob]}\n")
    _settled_reload(lg)
    with pytest.raises(AccessDenied, match=r"no SELECT privilege on table ext\.raw\.events"):
        s.sql("SELECT * FROM ext.raw.events")
    assert "allowed=true" in _reload_lines(lg)[-1]
    assert "stmtHash=sha256:" in _reload_lines(lg)[-1]
