"""Tags land on the columns that hold the data (issue 38): a copy's tags are matched to the
columns Spark's query makes by lineage, each branch of a set operation is traced on its own,
conflicting tags on a column give the strongest mask, UPDATE and MERGE carry tags, and a
table's governed tags are not dropped by a manager without the right; real Spark and Delta.

`people.secret` is hidden from everyone but admin; `copier` reads the rest in clear and
writes in `g.s`; `analyst` sees `pii` hashed and `pci` as its last four characters (a mask
of higher priority: priority decides only between masks reached through one tag).
"""

from __future__ import annotations

import hashlib

import pytest

from governance.errors import AccessDenied, Refused

POLICIES = """
groups:
  admins: [admin]
tags:
  g.s.people.email: [pii]
  g.s.people.card: [pci]
  g.s.notes.email: [pii]
  g.s.authored.num: [pii, pci]
  g.s.places.addr: [loc]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: copier-writes, principals: [copier], privileges: [select, create, modify], on: g.s.*}
  - {id: no-secret, principals: [copier, analyst], effect: deny, privileges: [select],
     on: g.s.people, columns: [secret]}
  - {id: analyst-reads, principals: [analyst], privileges: [select], on: g.s.*}
  - {id: steward-manages, principals: [steward, pii-steward], privileges: [manage], on: g.s.*}
  - {id: pii-tags, principals: [pii-steward], privileges: [apply_tag], on: g.s.*, tags: [pii]}
column_masks:
  - id: pii-hash
    on: g.*.*
    match_columns: {tag: pii}
    mask: hash
    principals: [analyst]
  - id: pci-last4
    on: g.*.*
    match_columns: {tag: pci}
    mask: last4
    priority: 10
    principals: [analyst]
  - id: loc-domain
    on: g.*.*
    match_columns: {tag: loc}
    mask: email_domain
    priority: 5
    principals: [analyst]
"""


def h(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture(scope="module")
def lg(make_lakegate):
    return make_lakegate(
        "tag_lineage",
        POLICIES,
        [
            "CREATE CATALOG g",
            "CREATE SCHEMA g.s",
            "CREATE TABLE g.s.people (id INT, secret STRING, email STRING, name STRING, "
            "card STRING)",
            "INSERT INTO g.s.people VALUES (1, 's1', 'a@x.de', 'Ann', '4111222233334444')",
            "CREATE TABLE g.s.notes (id INT, email STRING, note STRING)",
            "INSERT INTO g.s.notes VALUES (1, 'a@x.de', 'hello')",
            "CREATE TABLE g.s.authored (id INT, num STRING)",
            "INSERT INTO g.s.authored VALUES (1, '4111222233334444')",
            "CREATE TABLE g.s.places (id INT, addr STRING)",
            "INSERT INTO g.s.places VALUES (1, 'a@home.de')",
        ],
    )


def rows(lg, user: str, sql: str) -> list[tuple]:
    return [tuple(r) for r in lg.session(user).sql(sql).collect()]


def governed(lg, table: str) -> dict:
    from governance.policy.tag_state import governed_state

    return {c: set(t) for c, t in governed_state(lg.catalog.table("g", "s", table)).items()}


# ---- item 1: tags follow Spark's output, not the parsed column list -------------------


def test_ctas_star_with_hidden_column_tags_by_lineage_not_position(lg) -> None:
    lg.session("copier").sql("CREATE TABLE g.s.star AS SELECT * FROM g.s.people")
    assert governed(lg, "star") == {"email": {"pii"}, "card": {"pci"}}
    assert rows(lg, "analyst", "SELECT id, email, name FROM g.s.star") == [(1, h("a@x.de"), "Ann")]


def test_ctas_table_star_in_a_join_tags_the_column_it_copies(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.joined AS SELECT p.*, e.id AS x FROM g.s.people p "
        "JOIN g.s.people e ON p.id = e.id"
    )
    assert governed(lg, "joined") == {"email": {"pii"}, "card": {"pci"}}


def test_ctas_generator_in_the_select_list_shifts_no_tag(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.gen AS SELECT posexplode(array(name)), email, id FROM g.s.people"
    )
    assert governed(lg, "gen") == {"email": {"pii"}}
    lg.session("copier").sql(
        "CREATE TABLE g.s.gen2 AS SELECT explode(map(id, email)), name FROM g.s.people"
    )
    assert governed(lg, "gen2") == {"key": {"pii"}, "value": {"pii"}}
    lg.session("copier").sql(
        "CREATE TABLE g.s.gen3 AS SELECT id, inline(array(struct(name, card))), email "
        "FROM g.s.people"
    )
    assert governed(lg, "gen3") == {"name": {"pci"}, "card": {"pci"}, "email": {"pii"}}


def test_ctas_struct_star_shifts_no_tag(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.st AS SELECT q.s.*, q.email FROM "
        "(SELECT named_struct('a', id, 'b', name) AS s, email FROM g.s.people) q"
    )
    assert governed(lg, "st") == {"email": {"pii"}}
    assert rows(lg, "analyst", "SELECT a, b, email FROM g.s.st") == [(1, "Ann", h("a@x.de"))]


# ---- item 2: each branch of a set operation is traced on its own ---------------------


def test_a_branch_applying_the_mask_does_not_drop_the_tag_of_another_branch(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.uni AS SELECT id, sha2(cast(email AS string), 256) AS h "
        "FROM g.s.people UNION ALL SELECT id, email FROM g.s.people"
    )
    assert governed(lg, "uni") == {"h": {"pii"}}
    assert rows(lg, "analyst", "SELECT h FROM g.s.uni ORDER BY h") == sorted(
        [(h(h("a@x.de")),), (h("a@x.de"),)]
    )


def test_every_branch_applying_the_mask_drops_the_tag(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.uni2 AS SELECT sha2(cast(email AS string), 256) AS h "
        "FROM g.s.people UNION SELECT sha2(cast(email AS string), 256) FROM g.s.people"
    )
    assert governed(lg, "uni2") == {}


# ---- item 6: INSERT ... SELECT * tags only what it copies -----------------------------


def test_insert_star_over_hidden_column_tags_only_the_columns_it_copies(lg) -> None:
    copier = lg.session("copier")
    copier.sql("CREATE TABLE g.s.sink (id INT, email STRING, name STRING, card STRING)")
    copier.sql("INSERT INTO g.s.sink SELECT * FROM g.s.people")
    assert governed(lg, "sink") == {"email": {"pii"}, "card": {"pci"}}
    assert rows(lg, "analyst", "SELECT id, email, name FROM g.s.sink") == [(1, h("a@x.de"), "Ann")]


def test_insert_generator_in_the_select_list_tags_the_column_it_copies(lg) -> None:
    copier = lg.session("copier")
    copier.sql("CREATE TABLE g.s.gsink (pos INT, v STRING, contact STRING)")
    copier.sql("INSERT INTO g.s.gsink SELECT posexplode(array(name)), email FROM g.s.people")
    assert governed(lg, "gsink") == {"contact": {"pii"}}
    assert rows(lg, "analyst", "SELECT pos, v, contact FROM g.s.gsink") == [(0, "Ann", h("a@x.de"))]


# ---- item 3: conflicting tags never weaken a mask -------------------------------------


def test_a_column_copied_from_two_tags_gets_the_strongest_mask_not_the_highest_priority(
    lg,
) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.both AS SELECT concat(email, card) AS c FROM g.s.people"
    )
    assert governed(lg, "both") == {"c": {"pii", "pci"}}
    assert rows(lg, "analyst", "SELECT c FROM g.s.both") == [(h("a@x.de4111222233334444"),)]


def test_a_generator_below_the_output_is_traced_in_sparks_plan(lg) -> None:
    """Only `v` holds the tagged values; the strongest of its masks applies to it."""
    copier = lg.session("copier")
    copier.sql("CREATE TABLE g.s.over (id INT, v STRING)")
    copier.sql(
        "INSERT INTO g.s.over SELECT id, v FROM "
        "(SELECT id, explode(array(email, card)) AS v FROM g.s.people)"
    )
    assert governed(lg, "over") == {"v": {"pii", "pci"}}
    assert sorted(rows(lg, "analyst", "SELECT id, v FROM g.s.over")) == sorted(
        [(1, h("a@x.de")), (1, h("4111222233334444"))]
    )


def test_ctas_star_over_a_using_join_tags_by_lineage(lg) -> None:
    """Spark's `*` over USING puts the join key once, first: matched by lineage."""
    lg.session("copier").sql(
        "CREATE TABLE g.s.usingj AS SELECT * FROM g.s.authored JOIN g.s.people USING (id)"
    )
    assert governed(lg, "usingj") == {"num": {"pii", "pci"}, "email": {"pii"}, "card": {"pci"}}


def test_a_mask_equivalent_expression_drops_the_tag_of_its_own_output_only(lg) -> None:
    copier = lg.session("copier")
    copier.sql(
        "CREATE TABLE g.s.md AS SELECT email, sha2(cast(email AS string), 256) AS d, id "
        "FROM g.s.people"
    )
    assert governed(lg, "md") == {"email": {"pii"}}
    copier.sql("CREATE TABLE g.s.mdsink (id INT, d STRING, contact STRING)")
    copier.sql(
        "INSERT INTO g.s.mdsink (contact, d) "
        "SELECT email, sha2(cast(email AS string), 256) AS d FROM g.s.people"
    )
    assert governed(lg, "mdsink") == {"contact": {"pii"}}


def test_columns_read_only_in_joins_filters_and_grouping_carry_nothing(lg) -> None:
    lg.session("copier").sql(
        "CREATE TABLE g.s.counts AS SELECT n.note, count(*) AS k FROM g.s.notes n "
        "JOIN g.s.people p ON n.email = p.email WHERE p.card IS NOT NULL "
        "GROUP BY n.note, p.email"
    )
    assert governed(lg, "counts") == {}


def test_a_write_that_would_tag_a_column_with_unorderable_masks_is_refused(lg) -> None:
    """`pci` (last4) and `loc` (email_domain) show different parts: no reader could read
    the copy, so it is never made."""
    copier = lg.session("copier")
    with pytest.raises(Refused, match="cannot be ordered by strength"):
        copier.sql(
            "CREATE TABLE g.s.mixed AS SELECT concat(p.card, l.addr) AS c "
            "FROM g.s.people p JOIN g.s.places l ON p.id = l.id"
        )
    assert lg.catalog.table("g", "s", "mixed") is None
    copier.sql("CREATE TABLE g.s.mixsink (c STRING)")
    with pytest.raises(Refused, match="cannot be ordered by strength"):
        copier.sql(
            "INSERT INTO g.s.mixsink SELECT concat(p.card, l.addr) "
            "FROM g.s.people p JOIN g.s.places l ON p.id = l.id"
        )
    assert rows(lg, "copier", "SELECT count(*) FROM g.s.mixsink") == [(0,)]
    assert governed(lg, "mixsink") == {}


def test_priority_still_decides_between_the_policies_own_tags(lg) -> None:
    """v1: `tags:` in the policy put both tags on the column; the higher priority wins."""
    assert rows(lg, "analyst", "SELECT num FROM g.s.authored") == [("************4444",)]


# ---- item 4: UPDATE and MERGE carry tags ----------------------------------------------


def test_update_set_from_a_tagged_column_carries_its_tag(lg) -> None:
    lg.session("copier").sql("UPDATE g.s.notes SET note = upper(email) WHERE id = 1")
    assert governed(lg, "notes") == {"note": {"pii"}}
    assert rows(lg, "analyst", "SELECT note FROM g.s.notes") == [(h("A@X.DE"),)]


def test_merge_update_and_insert_carry_the_tags_of_what_they_copy(lg) -> None:
    copier = lg.session("copier")
    copier.sql("CREATE TABLE g.s.inbox (id INT, note STRING, other STRING)")
    copier.sql("INSERT INTO g.s.inbox VALUES (1, 'x', 'y')")
    copier.sql(
        "MERGE INTO g.s.inbox t USING g.s.people s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET note = s.email "
        "WHEN NOT MATCHED THEN INSERT (id, note, other) VALUES (s.id, s.name, s.card)"
    )
    assert governed(lg, "inbox") == {"note": {"pii"}, "other": {"pci"}}
    assert rows(lg, "analyst", "SELECT note FROM g.s.inbox") == [(h("a@x.de"),)]


# ---- item 5: dropping a table's governed tags needs the right -------------------------


def test_dropping_a_table_with_governed_tags_needs_apply_tag(lg) -> None:
    lg.session("copier").sql("CREATE TABLE g.s.dropme AS SELECT id, email FROM g.s.people")
    with pytest.raises(AccessDenied) as exc:
        lg.session("steward").sql("DROP TABLE g.s.dropme")
    assert str(exc.value) == (
        "access denied: user steward may not drop g.s.dropme: it removes governed tag pii "
        "of column email (needs APPLY_TAG on tag pii; MANAGE is not enough)"
    )
    assert governed(lg, "dropme") == {"email": {"pii"}}
    lg.session("pii-steward").sql("DROP TABLE g.s.dropme")
    assert lg.catalog.table("g", "s", "dropme") is None


def test_a_manager_drops_a_table_without_governed_tags(lg) -> None:
    lg.session("copier").sql("CREATE TABLE g.s.plain AS SELECT id, name FROM g.s.people")
    lg.session("steward").sql("DROP TABLE g.s.plain")
    assert lg.catalog.table("g", "s", "plain") is None
