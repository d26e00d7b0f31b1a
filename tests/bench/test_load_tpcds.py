"""The load benchmark's TPC-DS policies (benchmarks/load_tpcds.py) beside the demo's: the
product's validator accepts the two sets together, every load user may read the TPC-DS
tables, and they read them under different filters. No Spark: the enforcer alone."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks are not part of the installed distribution
    sys.path.insert(0, str(ROOT))

from benchmarks import load_tpcds, tpcds  # noqa: E402
from benchmarks.load_server import USERS  # noqa: E402


def test_load_users_read_tpcds_under_their_own_filters() -> None:
    from governance.policy.enforcer import PolicyEnforcer
    from governance.policy.loader import load_policy_text
    from governance.policy.validate import format_problems, validate_policy_text
    from governance.tools.demo import REFERENCE_POLICIES

    files = {p.name: p.read_text() for p in REFERENCE_POLICIES.glob("*.yaml")}
    files["tpcds.yaml"] = load_tpcds.policy_yaml(Path("/lake"))
    problems = validate_policy_text(files)
    assert not problems, format_problems(problems)
    enforcer = PolicyEnforcer(load_policy_text(files))
    tables = {t.name: t for t in tpcds.tpcds_tables("/lake", load_tpcds.CATALOG, load_tpcds.SCHEMA)}
    filters = {}
    for user in USERS:
        access = enforcer.table_access(enforcer.identity(user), tables["store_sales"])
        assert access.can_select, user
        assert access.masks, user
        filters[user] = len(access.row_filters)
    assert filters["alice"] > 0 and filters["erin"] == 0, filters
    assert set(load_tpcds.tables_read()) >= {"store_sales", "date_dim", "item"}


def test_each_load_analyst_reads_as_the_persona_it_is_named_after(tmp_path: Path) -> None:
    """load_server.add_analysts: alice07 is a user of her own with alice's access, on the
    demo's tables and the TPC-DS ones (each client its own user, issue 39)."""
    import shutil

    from benchmarks.load_server import ANALYSTS, LOAD_POLICY, add_analysts
    from governance.policy.enforcer import PolicyEnforcer
    from governance.policy.loader import load_policy_text
    from governance.policy.validate import format_problems, validate_policy_text
    from governance.tools.demo import REFERENCE_POLICIES

    shutil.copytree(
        REFERENCE_POLICIES, tmp_path / "p", ignore=shutil.ignore_patterns("schema.json")
    )
    (tmp_path / "p" / "load.yaml").write_text(LOAD_POLICY)
    (tmp_path / "p" / "tpcds.yaml").write_text(load_tpcds.policy_yaml(Path("/lake")))
    add_analysts(tmp_path / "p")
    files = {p.name: p.read_text() for p in (tmp_path / "p").glob("*.yaml")}
    assert not (problems := validate_policy_text(files)), format_problems(problems)
    enforcer = PolicyEnforcer(load_policy_text(files))
    tables = list(tpcds.tpcds_tables("/lake", load_tpcds.CATALOG, load_tpcds.SCHEMA))
    assert len(set(ANALYSTS)) == 64
    for i, user in enumerate(ANALYSTS):
        persona = USERS[i % len(USERS)]
        assert user.startswith(persona) and user != persona
        for table in tables:
            mine = enforcer.table_access(enforcer.identity(user), table)
            theirs = enforcer.table_access(enforcer.identity(persona), table)
            assert (mine.can_select, len(mine.row_filters), sorted(mine.masks)) == (
                theirs.can_select,
                len(theirs.row_filters),
                sorted(theirs.masks),
            ), (user, table.name)
