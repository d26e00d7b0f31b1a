"""Writes under policies (spec/policy-format.md, "Writes"), on a private lakehouse.

User `w` may modify `w.s.t` but sees only EMEA rows (row filter), `email` hashed and no
`secret` column; `r` may only read. Outcomes are checked as `admin`, who sees everything.

Restoring the table before each test is slow, so the table is seeded once with one block of
four rows per mutating test (ids base..base+3: EMEA, AMER, EMEA, APAC) and each such test
touches only its own block. A refused statement must leave no new Delta commit behind.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from governance import AccessDenied

POLICIES = """
groups:
  admins: [admin]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: read-all
    principals: [w, r]
    privileges: [select]
    on: w.s.*
  - id: w-modify
    principals: [w]
    privileges: [modify]
    on: w.s.t
  - id: w-create
    principals: [w]
    privileges: [create]
    on: w.s.*
  - id: w-no-secret
    principals: [w]
    effect: deny
    privileges: [select]
    on: w.s.t
    columns: [secret]
row_filters:
  - id: w-emea
    on: w.s.t
    principals: [w]
    where: "region = 'EMEA'"
column_masks:
  - id: w-hash-email
    on: w.s.t
    columns: [email]
    mask: hash
    principals: [w]
"""

BLOCKS = (10, 20, 30, 40, 50, 60)
REGIONS = ("EMEA", "AMER", "EMEA", "APAC")


def seed(base: int) -> list[tuple]:
    """(id, region, amount, email, secret, touched) of one block as written."""
    return [
        (base + k, REGIONS[k], base + k, f"u{base + k}@x.de", f"s{base + k}", None)
        for k in range(4)
    ]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def literal(v: object) -> str:
    return "NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v)


@pytest.fixture(scope="module")
def lg(make_lakegate):
    rows = [r for b in BLOCKS for r in seed(b)]
    values = ", ".join("(" + ", ".join(literal(v) for v in r) + ")" for r in rows)
    return make_lakegate(
        "writes",
        POLICIES,
        [
            "CREATE CATALOG w",
            "CREATE SCHEMA w.s",
            "CREATE TABLE w.s.t (id INT, region STRING, amount INT, email STRING, secret STRING, "
            "touched INT)",
            f"INSERT INTO w.s.t VALUES {values}",
        ],
    )


def block(lg, base: int) -> list[tuple]:
    """Rows with ids base..base+9 as admin sees them (clear values, every column)."""
    return [
        tuple(r)
        for r in lg.session("admin")
        .sql(
            "SELECT id, region, amount, email, secret, touched FROM w.s.t "
            f"WHERE id BETWEEN {base} AND {base + 9} ORDER BY id"
        )
        .collect()
    ]


def commits(lg, table: str = "t") -> int:
    """How many Delta commits the table has: a refused write must not add one."""
    location = Path(lg.catalog.table("w", "s", table).location)
    return len(list((location / "_delta_log").glob("*.json")))


def refused(lg, user: str, sql: str) -> str:
    before = commits(lg)
    with pytest.raises(AccessDenied) as exc:
        lg.session(user).sql(sql)
    assert commits(lg) == before, "a refused statement committed to the table"
    return str(exc.value)


OUTSIDE_FILTER = (
    "access denied: a row written by user w is outside their row filter on "
    "w.s.t; nothing was written"
)


# INSERT ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "base", "expected"),
    [
        (
            "INSERT INTO w.s.t (id, region, amount) VALUES (70, 'EMEA', 1), (71, 'EMEA', 2)",
            70,
            [(70, "EMEA", 1, None, None, None), (71, "EMEA", 2, None, None, None)],
        ),
        # writing (not reading) a column masked for the user is allowed
        (
            "INSERT INTO w.s.t (id, region, email) VALUES (80, 'EMEA', 'new@x.de')",
            80,
            [(80, "EMEA", None, "new@x.de", None, None)],
        ),
        # INSERT ... SELECT reads through w's view: only the EMEA rows of block 60 are copied
        (
            "INSERT INTO w.s.t (id, region, amount) "
            "SELECT id + 100, region, amount FROM w.s.t WHERE id BETWEEN 60 AND 69",
            160,
            [(160, "EMEA", 60, None, None, None), (162, "EMEA", 62, None, None, None)],
        ),
    ],
)
def test_insert_inside_the_row_filter_succeeds(lg, sql, base, expected):
    lg.session("w").sql(sql)
    assert block(lg, base) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO w.s.t (id, region, amount) VALUES (90, 'AMER', 1)",
        "INSERT INTO w.s.t (id, region, amount) VALUES (91, 'EMEA', 1), (92, 'AMER', 2)",
        "INSERT INTO w.s.t (id, amount) VALUES (93, 1)",  # region NULL: the filter is not true
        "INSERT INTO w.s.t (id, region, amount) "
        "SELECT id + 85, 'APAC', amount FROM w.s.t WHERE id BETWEEN 10 AND 13",
    ],
)
def test_insert_outside_the_row_filter_is_refused_and_writes_nothing(lg, sql):
    count = "SELECT count(*) FROM w.s.t"
    before = lg.session("admin").sql(count).collect()[0][0]
    assert refused(lg, "w", sql) == OUTSIDE_FILTER
    assert lg.session("admin").sql(count).collect()[0][0] == before
    assert block(lg, 90) == []


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "INSERT INTO w.s.t (id, region, secret) VALUES (94, 'EMEA', 'x')",
            "access denied: user w may not write column secret of table w.s.t",
        ),
        (
            "INSERT OVERWRITE w.s.t (id, region, amount) VALUES (94, 'EMEA', 1)",
            "access denied: INSERT OVERWRITE would replace rows or columns of w.s.t hidden from "
            "user w",
        ),
        (
            "INSERT INTO w.s.t (id, region) SELECT id + 84, secret FROM w.s.t WHERE id = 10",
            "access denied: user w may not read column secret of table w.s.t",
        ),
    ],
)
def test_insert_touching_hidden_columns_or_rows_is_refused(lg, sql, message):
    assert refused(lg, "w", sql) == message


def test_insert_select_reading_a_masked_column_is_refused(lg):
    assert refused(
        lg,
        "w",
        "INSERT INTO w.s.t (id, region, email) "
        "SELECT id + 84, region, email FROM w.s.t WHERE id = 10",
    ) == ("access denied: a write may not read masked column(s) w.s.t.email (user w)")


# UPDATE / DELETE / MERGE -----------------------------------------------------------------


def test_update_without_where_touches_only_visible_rows(lg):
    lg.session("w").sql("UPDATE w.s.t SET touched = 1")
    everything = [
        tuple(r) for r in lg.session("admin").sql("SELECT id, region, touched FROM w.s.t").collect()
    ]
    assert len(everything) >= 4 * len(BLOCKS)
    assert sorted({(region, touched) for _, region, touched in everything}) == [
        ("AMER", None),
        ("APAC", None),
        ("EMEA", 1),
    ]


def test_update_with_where_touches_only_visible_rows(lg):
    lg.session("w").sql(
        "UPDATE w.s.t AS x SET amount = x.amount + 1000 WHERE x.id BETWEEN 10 AND 19"
    )
    assert [r[:3] for r in block(lg, 10)] == [
        (10, "EMEA", 1010),
        (11, "AMER", 11),
        (12, "EMEA", 1012),
        (13, "APAC", 13),
    ]
    assert [r[3:5] for r in block(lg, 10)] == [r[3:5] for r in seed(10)]


def test_delete_touches_only_visible_rows(lg):
    lg.session("w").sql("DELETE FROM w.s.t WHERE id BETWEEN 20 AND 29")
    assert [r[:5] for r in block(lg, 20)] == [r[:5] for r in seed(20) if r[1] != "EMEA"]


def test_delete_of_invisible_rows_only_deletes_nothing(lg):
    count = "SELECT count(*) FROM w.s.t WHERE region <> 'EMEA'"
    before = lg.session("admin").sql(count).collect()[0][0]
    lg.session("w").sql("DELETE FROM w.s.t WHERE region <> 'EMEA'")
    assert lg.session("admin").sql(count).collect()[0][0] == before == len(BLOCKS) * 2


@pytest.mark.parametrize(
    ("sql", "base", "expected"),
    [
        (
            "MERGE INTO w.s.t AS t USING (SELECT explode(sequence(30, 33)) AS id) AS s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = 7",
            30,
            [(30, "EMEA", 7), (31, "AMER", 31), (32, "EMEA", 7), (33, "APAC", 33)],
        ),
        (
            "MERGE INTO w.s.t AS t USING (SELECT explode(sequence(40, 43)) AS id) AS s "
            "ON t.id = s.id WHEN MATCHED THEN DELETE",
            40,
            [(41, "AMER", 41), (43, "APAC", 43)],
        ),
    ],
)
def test_merge_touches_only_visible_rows(lg, sql, base, expected):
    lg.session("w").sql(sql)
    assert [r[:3] for r in block(lg, base)] == expected


def test_merge_insert_is_checked_against_the_row_filter(lg):
    assert (
        refused(
            lg,
            "w",
            "MERGE INTO w.s.t AS t USING (SELECT 95 AS id) AS s "
            "ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, region) "
            "VALUES (s.id, 'AMER')",
        )
        == OUTSIDE_FILTER
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "UPDATE w.s.t SET region = email",
            "access denied: UPDATE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "UPDATE w.s.t SET amount = length(email)",
            "access denied: UPDATE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "UPDATE w.s.t SET email = email",
            "access denied: UPDATE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "UPDATE w.s.t SET amount = 0 WHERE email = 'u10@x.de'",
            "access denied: UPDATE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "DELETE FROM w.s.t WHERE email LIKE '%.de'",
            "access denied: DELETE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "MERGE INTO w.s.t AS t USING (SELECT 10 AS id) AS s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET region = t.email",
            "access denied: MERGE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "MERGE INTO w.s.t AS t USING (SELECT 'u10@x.de' AS e) AS s ON t.email = s.e "
            "WHEN MATCHED THEN DELETE",
            "access denied: MERGE may not read masked column(s) email of w.s.t (user w)",
        ),
        (
            "UPDATE w.s.t SET amount = (SELECT max(length(email)) FROM w.s.t)",
            "access denied: a write may not read masked column(s) w.s.t.email (user w)",
        ),
    ],
)
def test_write_reading_a_masked_column_is_refused(lg, sql, message):
    assert refused(lg, "w", sql) == message


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE w.s.t SET secret = 'z'",
        "UPDATE w.s.t SET amount = 0 WHERE secret = 's10'",
        "DELETE FROM w.s.t WHERE secret = 's10'",
    ],
)
def test_write_using_a_hidden_column_is_refused(lg, sql):
    assert refused(lg, "w", sql) == (
        "access denied: user w may not use column secret of table w.s.t"
    )


# privileges ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO w.s.t (id, region) VALUES (96, 'EMEA')",
        "UPDATE w.s.t SET amount = 0",
        "DELETE FROM w.s.t",
        "MERGE INTO w.s.t AS t USING (SELECT 10 AS id) AS s ON t.id = s.id WHEN MATCHED THEN "
        "DELETE",
    ],
)
def test_write_without_modify_privilege_is_denied(lg, sql):
    assert refused(lg, "r", sql) == (
        "access denied: user r has no MODIFY privilege on table w.s.t (or it does not exist)"
    )


def test_create_table_without_create_privilege_is_denied(lg):
    with pytest.raises(AccessDenied) as exc:
        lg.session("r").sql("CREATE TABLE w.s.r_copy AS SELECT id FROM w.s.t")
    assert str(exc.value) == "access denied: user r has no CREATE privilege on schema w.s"
    assert lg.catalog.table("w", "s", "r_copy") is None


# CTAS ------------------------------------------------------------------------------------


def test_ctas_stores_the_values_the_user_sees(lg):
    lg.session("w").sql(
        "CREATE TABLE w.s.w_copy AS SELECT id, region, email FROM w.s.t WHERE id BETWEEN 50 AND 59"
    )
    try:
        copy = [
            tuple(r)
            for r in lg.session("admin")
            .sql("SELECT id, region, email FROM w.s.w_copy ORDER BY id")
            .collect()
        ]
        # admin sees clear emails in w.s.t; the copy holds w's view: EMEA rows, hashed
        assert copy == [(50, "EMEA", sha("u50@x.de")), (52, "EMEA", sha("u52@x.de"))]
        assert [r[3] for r in block(lg, 50)] == [r[3] for r in seed(50)]
    finally:
        lg.session("admin").sql("DROP TABLE w.s.w_copy")


def test_ctas_cannot_copy_a_hidden_column(lg):
    with pytest.raises(AccessDenied) as exc:
        lg.session("w").sql("CREATE TABLE w.s.w_secret AS SELECT id, secret FROM w.s.t")
    assert str(exc.value) == "access denied: user w may not read column secret of table w.s.t"
    assert lg.catalog.table("w", "s", "w_secret") is None
