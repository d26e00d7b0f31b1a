"""Mapping-table policies (issue 15, items 1 and 4), on a private lakehouse.

`m.s.sales` is filtered through `m.acl.user_regions` (user_name -> allowed_region): the
analysts hold no grant on `m.acl`, so every read of it is the policy's. One user per form:
alice (IN), bob (EXISTS), carol (scalar subquery), dave (is_member inside the subquery),
erin/frank (a custom mask reading `m.acl.vip`). Users that change the mapping table own their
rows in it (mover, tt, writer).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from governance import AccessDenied, LakegateError, Refused
from governance.verify.plan import verify_plan

IN_FORM = (
    "region IN (SELECT allowed_region FROM m.acl.user_regions WHERE user_name = current_user())"
)
POLICIES = f"""
groups:
  admins: [admin]
  auditors: [dave]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: analysts-read
    principals: [alice, bob, carol, dave, erin, frank, mover, tt, ghost, broken]
    privileges: [select]
    on: m.s.*
  - id: writer-writes
    principals: [writer]
    privileges: [select, modify]
    on: m.s.*
row_filters:
  - id: by-region
    on: m.s.sales
    principals: [alice, mover, tt, writer]
    kind: restrictive
    where: "{IN_FORM}"
  - id: by-region-exists
    on: m.s.sales
    principals: [bob]
    kind: restrictive
    where: >-
      EXISTS (SELECT 1 FROM m.acl.user_regions AS u
              WHERE u.user_name = current_user() AND u.allowed_region = region)
  - id: by-region-scalar
    on: m.s.sales
    principals: [carol]
    kind: restrictive
    where: >-
      region = (SELECT max(allowed_region) FROM m.acl.user_regions
                WHERE user_name = current_user())
  - id: by-region-member
    on: m.s.sales
    principals: [dave, alice]
    where: >-
      region IN (SELECT allowed_region FROM m.acl.user_regions
                 WHERE user_name = current_user() OR (is_member('auditors') AND user_name = '*'))
  - id: ghost-missing
    on: m.s.sales
    principals: [ghost]
    where: "region IN (SELECT allowed_region FROM m.acl.gone)"
  - id: broken-read
    on: m.s.sales
    principals: [broken]
    where: "region IN (SELECT allowed_region FROM m.acl.broken)"
column_masks:
  - id: amount-vip
    on: m.s.sales
    columns: [amount]
    mask: custom
    expression: >-
      CASE WHEN EXISTS (SELECT 1 FROM m.acl.vip WHERE user_name = current_user())
      THEN {{col}} END
    principals: [erin, frank]
"""
ROWS = "(1, 'EMEA', 10), (2, 'AMER', 20), (3, 'APAC', 30), (4, 'EMEA', 40)"
MAPPING = (
    "('alice', 'EMEA'), ('bob', 'AMER'), ('bob', 'APAC'), ('carol', 'APAC'), ('*', 'APAC'), "
    "('mover', 'EMEA'), ('tt', 'EMEA'), ('writer', 'EMEA')"
)


@pytest.fixture(scope="module")
def lg(make_lakegate):
    lg = make_lakegate(
        "mapping",
        POLICIES,
        [
            "CREATE CATALOG m",
            "CREATE SCHEMA m.s",
            "CREATE SCHEMA m.acl",
            "CREATE TABLE m.s.sales (id INT, region STRING, amount INT)",
            f"INSERT INTO m.s.sales VALUES {ROWS}",
            "CREATE TABLE m.acl.user_regions (user_name STRING, allowed_region STRING)",
            f"INSERT INTO m.acl.user_regions VALUES {MAPPING}",
            "CREATE TABLE m.acl.vip (user_name STRING)",
            "INSERT INTO m.acl.vip VALUES ('erin')",
        ],
    )
    return lg


def ids(lg, user: str, sql: str = "SELECT id FROM m.s.sales") -> list[int]:
    return sorted(r[0] for r in lg.session(user).sql(sql).collect())


def admin(lg, sql: str) -> None:
    lg.session("admin").sql(sql)


def test_user_sees_only_the_rows_the_mapping_table_grants(lg) -> None:
    assert ids(lg, "alice") == [1, 4]


def test_policy_reads_the_mapping_table_without_a_grant_the_user_lacks(lg) -> None:
    assert ids(lg, "alice") == [1, 4]
    with pytest.raises(AccessDenied, match=r"no SELECT privilege on table m\.acl\.user_regions"):
        lg.session("alice").sql("SELECT * FROM m.acl.user_regions").collect()


def test_mapping_content_changes_take_effect_at_the_next_statement(lg) -> None:
    assert ids(lg, "mover") == [1, 4]
    admin(lg, "INSERT INTO m.acl.user_regions VALUES ('mover', 'AMER')")
    try:
        assert ids(lg, "mover") == [1, 2, 4]
    finally:
        admin(
            lg,
            "DELETE FROM m.acl.user_regions WHERE user_name = 'mover' AND allowed_region = 'AMER'",
        )
    assert ids(lg, "mover") == [1, 4]


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("bob", [2, 3]),  # EXISTS, correlated on the row's region
        ("carol", [3]),  # scalar subquery
        ("dave", [3]),  # is_member('auditors') resolved inside the subquery: the '*' row
        ("alice", [1, 4]),  # not an auditor: the '*' row is not hers
    ],
)
def test_subquery_forms_and_identity_functions_filter_rows(
    lg, user: str, expected: list[int]
) -> None:
    assert ids(lg, user) == expected


def test_mask_reading_a_mapping_table_shows_values_only_to_mapped_users(lg) -> None:
    sql = "SELECT id, amount FROM m.s.sales"
    assert sorted(tuple(r) for r in lg.session("erin").sql(sql).collect()) == [
        (1, 10),
        (2, 20),
        (3, 30),
        (4, 40),
    ]
    assert {r[1] for r in lg.session("frank").sql(sql).collect()} == {None}


def test_time_travel_reads_todays_mapping_table(lg) -> None:
    """Version 1 of the sales table (its first INSERT) is filtered by today's mapping rows."""
    sql = "SELECT id FROM m.s.sales VERSION AS OF 1"
    assert ids(lg, "tt", sql) == [1, 4]
    admin(lg, "INSERT INTO m.acl.user_regions VALUES ('tt', 'APAC')")
    try:
        assert ids(lg, "tt", sql) == [1, 3, 4]
    finally:
        admin(
            lg, "DELETE FROM m.acl.user_regions WHERE user_name = 'tt' AND allowed_region = 'APAC'"
        )


def test_a_mapping_table_missing_from_the_catalog_refuses_the_statement(lg) -> None:
    with pytest.raises(Refused) as exc:
        lg.session("ghost").sql("SELECT id FROM m.s.sales").collect()
    assert str(exc.value) == (
        "policy ghost-missing on m.s.sales reads a mapping table that is not in the catalog; "
        "statement refused (run lakegate policy validate)"
    )


def _audit_lines(lg, user: str, sql: str) -> list[dict[str, str]]:
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size
    lg.session(user).sql(sql).collect()
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    return [
        dict(p.split("=", 1) for p in ln.split(": ", 1)[1].split("\t")) for ln in text.splitlines()
    ]


def test_audit_records_the_mapping_table_read_as_a_policy_read(lg) -> None:
    lines = _audit_lines(lg, "alice", "SELECT id FROM m.s.sales")
    by_cmd = {ln["cmd"]: ln for ln in lines}
    assert set(by_cmd) == {"select", "policyRead"}
    read = by_cmd["policyRead"]
    assert (read["src"], read["columns"], read["policies"], read["allowed"]) == (
        "m.acl.user_regions",
        "user_name,allowed_region",
        "by-region,by-region-member",
        "true",
    )
    assert read["queryId"] == by_cmd["select"]["queryId"]


# ----------------------------------------------------------------------------- the verifier


def _analyze(lg) -> Any:
    return lambda sql, fresh: lg.spark.sql(sql)._jdf.queryExecution().analyzed()


def test_verifier_accepts_the_policy_read_inside_the_generated_view(lg) -> None:
    """carol's scalar subquery stays a subquery (the IN and EXISTS lookups are inlined as
    literals: test_mapping_inline.py), so her view reads the mapping table raw."""
    session = lg.session("carol")
    session.sql("SELECT id FROM m.s.sales")
    planned = session.last_planned
    assert planned is not None and planned.expected.mapping_locations
    plan = lg.spark.sql(planned.sql)._jdf.queryExecution().analyzed()
    verify_plan(plan, planned.expected, _analyze(lg))


@pytest.mark.parametrize(
    "smuggle",
    [
        # a raw read of the mapping table's location in the user's own WHERE
        "SELECT * FROM ({sql}) AS q WHERE q.id IN (SELECT length(allowed_region) FROM {loc})",
        # ... in the user's projection
        "SELECT q.id, (SELECT max(allowed_region) FROM {loc}) AS r FROM ({sql}) AS q",
        # ... as a relation of its own
        "SELECT id FROM ({sql}) AS q UNION ALL SELECT length(user_name) FROM {loc}",
    ],
)
def test_verifier_refuses_a_raw_mapping_read_outside_the_view(lg, smuggle: str) -> None:
    session = lg.session("alice")
    session.sql("SELECT id FROM m.s.sales")
    planned = session.last_planned
    assert planned is not None and planned.sql is not None
    loc = f"delta.`{lg.catalog.table('m', 'acl', 'user_regions').location}`"
    plan = lg.spark.sql(smuggle.format(sql=planned.sql, loc=loc))._jdf.queryExecution().analyzed()
    with pytest.raises(Refused, match="read outside its governed view"):
        verify_plan(plan, planned.expected, _analyze(lg))


# ----------------------------------------------------------------------------- writes


def _sales(lg) -> list[tuple]:
    return sorted(tuple(r) for r in lg.session("admin").sql("SELECT * FROM m.s.sales").collect())


@pytest.mark.parametrize(
    ("cmd", "sql"),
    [
        ("INSERT", "INSERT INTO m.s.sales VALUES (90, 'AMER', 1)"),
        ("UPDATE", "UPDATE m.s.sales SET amount = amount / 0 WHERE id = 2"),
        ("DELETE", "DELETE FROM m.s.sales WHERE amount / 0 > 1"),
        (
            "MERGE",
            "MERGE INTO m.s.sales t USING (SELECT 2 AS id) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET amount = 0",
        ),
    ],
)
def test_row_changing_writes_under_a_mapping_filter_are_refused(lg, cmd: str, sql: str) -> None:
    """Delta evaluates no subquery in UPDATE/DELETE/MERGE conditions, so the filter could
    not guard the user's expressions (which would run on hidden rows), and an INSERT's row
    check is no view the verifier can match: refused before anything runs."""
    before = _sales(lg)
    with pytest.raises(Refused) as exc:
        lg.session("writer").sql(sql)
    assert str(exc.value) == (
        f"{cmd} on m.s.sales is not available: its row filter by-region reads mapping table "
        "m.acl.user_regions, and writes are not governed under mapping-table filters"
    )
    assert _sales(lg) == before


def test_a_failing_mapping_read_is_reported_without_spark_text(lg) -> None:
    """A mapping table whose files are gone: the Spark error is data, its path is not shown."""
    admin(lg, "CREATE TABLE m.acl.broken (user_name STRING, allowed_region STRING)")
    location = Path(lg.catalog.table("m", "acl", "broken").location)
    shutil.rmtree(location / "_delta_log")
    with pytest.raises(LakegateError) as exc:
        lg.session("broken").sql("SELECT id FROM m.s.sales").collect()
    assert str(location) not in str(exc.value) and "m.acl.broken" not in str(exc.value)
