"""`lakegate policy impact` (governance/tools/impact.py) on the demo lakehouse: each side's counts
checked against the same Delta tables read by plain Spark and filtered by hand, the columns
that change state, the --fail-on grammar and exit code, counts only in the output, and the
admin act on the audit log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cli import main
from governance.policy.analysis import load_policies
from governance.tools.impact import Impact, Threshold, policy_impact


def _raw(lakehouse: Any, table: str, where: str | None = None) -> int:
    """Rows of the Delta table under a hand-written condition, read by plain Spark."""
    c, s, t = table.split(".")
    df = lakehouse.spark.read.format("delta").load(lakehouse.catalog.table(c, s, t).location)
    return (df.filter(where) if where else df).count()


def _edit(new: Path, name: str, old: str, replacement: str) -> None:
    """Replace one passage of a policy file (text: YAML 1.1 would read `on:` as true)."""
    path = new / name
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, replacement))


@pytest.fixture
def dirs(lakehouse: Any, tmp_path: Path) -> tuple[Path, Path]:
    """OLD: a copy of the lakehouse's policies; NEW: another copy, for a test to edit."""
    old, new = tmp_path / "old", tmp_path / "new"
    for d in (old, new):
        shutil.copytree(lakehouse.config.policies, d, ignore=shutil.ignore_patterns("tests"))
    return old, new


def _impact(lakehouse: Any, old: Path, new: Path, **kw: Any) -> Impact:
    return policy_impact(lakehouse, load_policies(str(old)), load_policies(str(new)), **kw)


def _entry(impact: Impact, who: str, table: str) -> Any:
    found = [e for e in impact.entries if e.who == who and e.table == table]
    assert len(found) == 1, impact.to_json()
    return found[0]


ZOE = (
    "grants:\n",
    "grants:\n  - id: zoe-reads-customers\n    principals: [zoe]\n"
    "    privileges: [select]\n    on: main.sales.customers\n",
)


def test_a_new_grant_counts_every_row_and_shows_pii_masked(lakehouse, dirs):
    old, new = dirs
    _edit(new, "sales.yaml", *ZOE)
    impact = _impact(lakehouse, old, new)
    assert {(e.who, e.table) for e in impact.entries} == {("zoe", "main.sales.customers")}
    e = impact.entries[0]
    assert (e.before.rows, e.before.note) == (None, "no access")
    assert e.after.rows == _raw(lakehouse, "main.sales.customers") == 6
    assert e.gained_rows == 6 and "pii" in e.tags
    assert e.columns == [
        ("id", "hidden", "clear"),
        ("name", "hidden", "clear"),
        ("email", "hidden", "masked (hash)"),
        ("phone", "hidden", "masked (hash)"),
        ("ssn", "hidden", "masked (hash)"),
        ("country", "hidden", "clear"),
    ]


def test_a_narrowed_row_filter_counts_the_rows_the_new_condition_keeps(lakehouse, dirs):
    old, new = dirs
    _edit(
        new,
        "sales.yaml",
        """    where: "region = 'EMEA'"\n""",
        """    where: "region = 'EMEA' AND amount > 100"\n""",
    )
    impact = _impact(lakehouse, old, new)
    # carol: emea-analysts (emea-only) and analysts (restrictive no-test-orders)
    e = _entry(impact, "carol", "main.sales.orders")
    assert e.before.rows == _raw(lakehouse, "main.sales.orders", "region = 'EMEA' AND NOT is_test")
    assert e.after.rows == _raw(
        lakehouse, "main.sales.orders", "region = 'EMEA' AND amount > 100 AND NOT is_test"
    )
    assert (e.before.rows, e.after.rows, e.lost_rows, e.columns) == (3, 1, 2, [])
    assert {x.who for x in impact.entries} == {"carol"}


def test_a_removed_mask_shows_columns_going_clear_with_rows_unchanged(lakehouse, dirs):
    old, new = dirs
    _edit(
        new,
        "sales.yaml",
        "  - id: hide-pii\n    on: main.*.*\n    tags: [pii]\n    mask: hash\n"
        '    principals: ["*"]\n    except: [group:pii-readers]\n',
        "",
    )
    impact = _impact(lakehouse, old, new)
    alice = _entry(impact, "alice", "main.sales.customers")
    rows = _raw(lakehouse, "main.sales.customers")
    assert (alice.before.rows, alice.after.rows) == (rows, rows)
    # analysts-no-ssn hides ssn; bob-no-phone is bob's alone
    assert alice.columns == [
        ("email", "masked (hash)", "clear"),
        ("phone", "masked (hash)", "clear"),
    ]
    carol = _entry(impact, "carol", "main.sales.customers")
    mine = _raw(lakehouse, "main.sales.customers", "country IN ('DE', 'FR', 'UK')")
    assert (carol.before.rows, carol.after.rows) == (mine, mine) == (3, 3)
    # phone-last4 (priority 10) still masks carol's phone
    assert carol.columns == [("email", "masked (hash)", "clear")]
    assert all(e.who != "dana" for e in impact.entries)  # a pii-reader sees no change
    assert Threshold.parse("unmask-columns>1:tag=pii").exceeded(impact)
    # the sales domain owner (and the admin) read ssn too: all three pii columns go clear
    erin = _entry(impact, "erin", "main.sales.customers")
    assert erin.unmasked == ["email", "phone", "ssn"]
    assert Threshold.parse("unmask-columns>2:who=erin").exceeded(impact) == [erin]
    over = Threshold.parse("unmask-columns>2").exceeded(impact)
    assert {e.who for e in over} == {"erin", "root"}
    assert not Threshold.parse("unmask-columns>3").exceeded(impact)


def test_a_sample_estimates_counts_and_says_so(lakehouse, dirs):
    old, new = dirs
    _edit(new, "sales.yaml", *ZOE)
    impact = _impact(lakehouse, old, new, sample=0.5, time_limit=300)
    assert impact.estimated and "sample 0.5" in impact.method and "300 s" in impact.method
    assert impact.to_json()["estimated"] is True
    e = impact.entries[0]
    assert e.after.rows is not None and e.after.rows % 2 == 0  # sampled rows / 0.5
    assert "~" in impact.to_markdown()


@pytest.mark.parametrize(
    "text",
    [
        "gain-rows",
        "gain-rows>-1",
        "gain-rows>=3",
        "rows>3",
        "gain-rows>3:colour=red",
        "gain-rows>3:tag=",
        "gain-rows>3;rm -rf",
    ],
)
def test_fail_on_refuses_what_the_grammar_does_not_say(text):
    with pytest.raises(ValueError, match="expected METRIC>N"):
        Threshold.parse(text)


@pytest.fixture
def in_process(lakehouse, spark):
    """Run `lakegate` in this process; undo the session conf its Spark builder sets."""
    keep = spark.conf.get("spark.sql.shuffle.partitions")

    def run(*argv: str) -> int:
        return main(["--config", str(lakehouse.config.path), *argv])

    yield run
    spark.conf.set("spark.sql.shuffle.partitions", keep)


def test_fail_on_exits_1_when_a_group_gains_more_pii_rows_than_allowed(
    lakehouse, dirs, in_process, capsys
):
    old, new = dirs
    _edit(new, "sales.yaml", *ZOE)
    argv = ("policy", "impact", str(old), str(new), "-o", "json")
    assert in_process(*argv, "--fail-on", "gain-rows>5:tag=pii") == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["impact"][0]["after"] == {"rows": 6}
    assert err.strip() == (
        "lakegate: policy impact: zoe on main.sales.customers exceeds --fail-on gain-rows>5:tag=pii"
    )
    assert in_process(*argv, "--fail-on", "gain-rows>6:tag=pii") == 0
    assert in_process(*argv, "--fail-on", "gain-rows>0:tag=confidential") == 0
    assert in_process(*argv, "--fail-on", "gain-rows>>0") == 2


def test_the_output_has_counts_and_never_a_value(lakehouse, dirs, in_process, capsys):
    old, new = dirs
    _edit(new, "sales.yaml", *ZOE)
    assert in_process("policy", "impact", str(old), str(new)) == 0
    out = capsys.readouterr().out
    assert "| zoe | main.sales.customers | no access | 6 |" in out
    values = lakehouse.spark.read.format("delta").load(
        lakehouse.catalog.table("main", "sales", "customers").location
    )
    for row in values.collect():
        for v in row[1:]:  # names, e-mails, phones, SSNs, countries
            assert str(v) not in out


def test_an_impact_run_is_an_audited_admin_act(lakehouse, dirs, in_process, capsys):
    old, new = dirs
    log = lakehouse.config.audit / "audit.log"
    seen = len(log.read_text().splitlines())
    assert in_process("policy", "impact", str(old), str(new)) == 0
    assert "no change" in capsys.readouterr().out
    lines = [ln for ln in log.read_text().splitlines()[seen:] if "cmd=policyImpact" in ln]
    assert len(lines) == 2
    assert "phase=intent" in lines[0] and "phase=outcome" in lines[1]
    assert all("proto=cli" in ln for ln in lines)


def test_a_count_over_the_time_limit_says_timed_out_and_counts_as_no_change(lakehouse, dirs):
    old, new = dirs
    _edit(new, "sales.yaml", *ZOE)
    impact = _impact(lakehouse, old, new, time_limit=0.001)
    e = impact.entries[0]
    assert (e.after.rows, e.after.note) == (None, "timed out")
    assert e.before.note == "no access"  # denied at planning: nothing to time
    assert e.gained_rows == 0 and "time limit 0.001 s" in impact.method
    assert not Threshold.parse("gain-rows>0").exceeded(impact)


def test_a_provider_group_is_counted_as_a_member_of_that_group_alone(lakehouse, dirs):
    old, new = dirs
    _edit(
        new,
        "sales.yaml",
        *(
            "grants:\n",
            "grants:\n  - id: contractors-read-orders\n    principals: [group:contractors]\n"
            "    privileges: [select]\n    on: main.sales.orders\n",
        ),
    )
    groups = ["contractors"]
    impact = policy_impact(
        lakehouse,
        load_policies(str(old), provider_groups=groups),
        load_policies(str(new), provider_groups=groups),
        provider_groups=groups,
    )
    e = _entry(impact, "group:contractors", "main.sales.orders")
    # no row filter names the group: every row, test orders included
    assert (e.before.note, e.after.rows) == ("no access", _raw(lakehouse, "main.sales.orders"))
    assert e.after.rows == 8
    assert [x.who for x in impact.entries] == ["group:contractors"]
    assert "counted as `zz-nobody-zz`" in impact.to_markdown()
