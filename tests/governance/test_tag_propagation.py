"""Tags follow the data (issue 25, item 5): CTAS and INSERT ... SELECT carry each source
column's tags to the target columns computed from it, on real Delta tables.

`copier` reads everything in clear and may create and write in `g.s`; `analyst` gets the
tag-driven `hash` mask on `pii` columns and the tag-driven filter on `region` columns;
`steward` manages `g.s` without any tag right, `pii-steward` may apply `pii`.
"""

from __future__ import annotations

import hashlib

import pytest

from governance.errors import AccessDenied

POLICIES = """
groups:
  admins: [admin]
tags:
  g.s.people.email: [pii]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: copier-writes, principals: [copier], privileges: [select, create, modify], on: g.s.*}
  - {id: analyst-reads, principals: [analyst], privileges: [select], on: g.s.*}
  - {id: steward-manages, principals: [steward, pii-steward], privileges: [manage], on: g.s.*}
  - {id: pii-tags, principals: [pii-steward], privileges: [apply_tag], on: g.s.*, tags: [pii]}
  - {id: admin-tags, principals: [admin], privileges: [apply_tag], on: "*.*.*"}
row_filters:
  - id: region-by-tag
    on: g.*.*
    match_columns: {tag: region, as: r}
    principals: [analyst]
    where: "r = 'EMEA'"
column_masks:
  - id: pii-hash
    on: g.*.*
    match_columns: {tag: pii}
    mask: hash
    principals: [analyst]
"""


def h(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture(scope="module")
def lg(make_lakegate):
    return make_lakegate(
        "tag_propagation",
        POLICIES,
        [
            "CREATE CATALOG g",
            "CREATE SCHEMA g.s",
            "CREATE TABLE g.s.people (id INT, email STRING, home STRING)",
            "INSERT INTO g.s.people VALUES (1, 'a@x.de', 'EMEA'), (2, 'b@x.com', 'AMER')",
            "ALTER TABLE g.s.people SET TBLPROPERTIES ('lakegate.tags.home' = 'region')",
        ],
    )


def rows(lg, user: str, sql: str) -> list[tuple]:
    return [tuple(r) for r in lg.session(user).sql(sql).collect()]


def test_ctas_carries_tags_and_the_mask_keeps_applying_to_the_copy(lg) -> None:
    lg.session("copier").sql("CREATE TABLE g.s.copy1 AS SELECT id, email, home FROM g.s.people")
    assert rows(lg, "copier", "SELECT email FROM g.s.copy1 ORDER BY id") == [
        ("a@x.de",),
        ("b@x.com",),
    ]
    assert rows(lg, "analyst", "SELECT id, email FROM g.s.copy1 ORDER BY id") == [(1, h("a@x.de"))]


def test_a_column_computed_from_a_tagged_column_keeps_the_tag(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.copy2 AS WITH p AS (SELECT id, upper(email) AS mail FROM g.s.people) "
        "SELECT id, concat('<', mail, '>') AS contact FROM p"
    )
    assert rows(lg, "analyst", "SELECT contact FROM g.s.copy2 WHERE id = 1") == [(h("<A@X.DE>"),)]


def test_the_tags_own_mask_drops_the_tag(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.copy3 AS SELECT id, sha2(cast(email AS string), 256) AS digest "
        "FROM g.s.people"
    )
    assert rows(lg, "analyst", "SELECT digest FROM g.s.copy3 ORDER BY id") == [
        (h("a@x.de"),),
        (h("b@x.com"),),
    ]


def test_a_column_read_only_in_where_carries_nothing(lg) -> None:
    lg.session("copier").sql("CREATE TABLE g.s.copy4 AS SELECT id FROM g.s.people WHERE home <> ''")
    assert rows(lg, "analyst", "SELECT id FROM g.s.copy4 ORDER BY id") == [(1,), (2,)]


def test_insert_select_into_an_existing_table_carries_tags(lg) -> None:
    copier = lg.session("copier")
    copier.sql("CREATE TABLE g.s.sink (id INT, contact STRING, zone STRING)")
    copier.sql("INSERT INTO g.s.sink SELECT id, email, home FROM g.s.people")
    assert rows(lg, "analyst", "SELECT id, contact FROM g.s.sink ORDER BY id") == [(1, h("a@x.de"))]


def test_propagation_is_on_the_statements_audit_lines(lg) -> None:
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size
    lg.session("copier").sql("CREATE TABLE g.s.copy5 AS SELECT email AS e FROM g.s.people")
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    lines = [
        dict(p.split("=", 1) for p in ln.split(": ", 1)[1].split("\t")) for ln in text.splitlines()
    ]
    carried = [ln for ln in lines if ln["cmd"] == "tagPropagate"]
    assert {(ln["src"], ln["dst"], ln["columns"], ln["policies"]) for ln in carried} == {
        ("g.s.people", "g.s.copy5", "email", "tag:pii")
    }
    create = [ln for ln in lines if ln["cmd"] == "create"]
    assert {ln["queryId"] for ln in carried} <= {ln["queryId"] for ln in create}


def test_a_propagated_tag_is_removed_only_with_the_right(lg) -> None:
    lg.session("copier").sql("CREATE TABLE g.s.copy6 AS SELECT id, email FROM g.s.people")
    clear = "ALTER TABLE g.s.copy6 SET TBLPROPERTIES ('lakegate.tags.email' = '')"
    with pytest.raises(AccessDenied) as exc:
        lg.session("steward").sql(clear)
    assert str(exc.value) == (
        "access denied: user steward may not remove tag pii from column email of g.s.copy6 "
        "(needs APPLY_TAG on tag pii; MANAGE is not enough)"
    )
    assert rows(lg, "analyst", "SELECT email FROM g.s.copy6 WHERE id = 1") == [(h("a@x.de"),)]
    lg.session("pii-steward").sql(clear)
    assert rows(lg, "analyst", "SELECT email FROM g.s.copy6 WHERE id = 1") == [("a@x.de",)]


def test_explain_shows_the_propagated_tags(lg) -> None:
    from governance.policy.analysis import effective_access

    lg.session("copier").sql("CREATE TABLE g.s.copy7 AS SELECT id, email FROM g.s.people")
    acc = effective_access(lg.enforcer, "analyst", lg.catalog.table("g", "s", "copy7"))
    assert acc.governed_tags == (("email", ("pii",)),)
    assert acc.tag_matches == (("pii-hash", "email", "pii"),)
