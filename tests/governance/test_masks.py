"""Each built-in mask's exact output (spec/policy-format.md, "Built-in masks") on real Delta data.

`typed_lakehouse` (tests/governance/conftest.py) holds one table `m.s.t` with a column of
every needed type; user `u_<mask>` gets that mask on several columns. Expected values are
computed here in Python from the same rows (`typed_rows`), independently of Spark.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re

import pytest

COLUMNS = ("id", "s", "n", "d", "ts", "e", "code")


def spark_string(v: object) -> str:
    """CAST(v AS STRING) as Spark writes it, for the types in the table."""
    if isinstance(v, dt.datetime):
        return f"{v:%Y-%m-%d %H:%M:%S}"
    if isinstance(v, dt.date):
        return v.isoformat()
    return str(v)


def redact_string(v):
    return "REDACTED"


def redact_other(v):
    return None


def null(v):
    return None


def hash_(v):
    return None if v is None else hashlib.sha256(spark_string(v).encode()).hexdigest()


def last4(v):
    if v is None:
        return None
    s = spark_string(v)
    return "*" * max(len(s) - 4, 0) + s[-4:]


def first4(v):
    if v is None:
        return None
    s = spark_string(v)
    return s[:4] + "*" * max(len(s) - 4, 0)


def email_domain(v):
    if v is None:
        return None
    m = re.match(r"^.*@(.*)$", v, re.DOTALL)
    return m.group(1) if m else ""


def year(v):
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return dt.datetime(v.year, 1, 1)
    return dt.date(v.year, 1, 1)


def custom(user):
    def f(v):
        return None if v is None else f"<{spark_string(v).upper()}|{user}>"

    return f


CASES = [
    # user, column, expected value function
    ("u_redact", "s", redact_string),
    ("u_redact", "n", redact_other),
    ("u_redact", "d", redact_other),
    ("u_redact", "ts", redact_other),
    ("u_null", "s", null),
    ("u_null", "n", null),
    ("u_null", "d", null),
    ("u_null", "ts", null),
    ("u_hash", "s", hash_),
    ("u_hash", "n", hash_),
    ("u_hash", "d", hash_),
    ("u_hash", "ts", hash_),
    ("u_hash", "e", hash_),
    ("u_last4", "s", last4),
    ("u_last4", "n", last4),
    ("u_last4", "code", last4),
    ("u_first4", "s", first4),
    ("u_first4", "n", first4),
    ("u_first4", "code", first4),
    ("u_email", "e", email_domain),
    ("u_year", "d", year),
    ("u_year", "ts", year),
    ("u_custom", "s", custom("u_custom")),
    ("u_custom", "n", custom("u_custom")),
]


@pytest.mark.parametrize(
    ("user", "column", "mask"), CASES, ids=[f"{m.__name__}-{u}-{c}" for u, c, m in CASES]
)
def test_builtin_mask_exact_output(typed_lakehouse, typed_rows, user, column, mask):
    i = COLUMNS.index(column)
    got = typed_lakehouse.session(user).sql(f"SELECT id, {column} FROM m.s.t ORDER BY id")
    assert [tuple(r) for r in got.collect()] == [(row[0], mask(row[i])) for row in typed_rows]


@pytest.mark.parametrize(
    ("row_id", "column", "expected"),
    [
        (1, "code", "abcd****"),  # abcdefgh
        (5, "code", "abcd*"),  # abcde
        (4, "code", "abcd"),  # exactly 4
        (2, "code", "abc"),  # shorter than 4: nothing hidden, no padding
        (5, "s", ""),  # empty
        (3, "code", None),  # NULL stays NULL
        (2, "n", "-7"),  # non-string: its string form
    ],
)
def test_first4_of_short_strings_and_null(typed_lakehouse, row_id, column, expected):
    got = (
        typed_lakehouse.session("u_first4")
        .sql(f"SELECT {column} FROM m.s.t WHERE id = {row_id}")
        .collect()
    )
    assert [tuple(r) for r in got] == [(expected,)]


def test_hash_equals_sha2_of_the_string_cast(typed_lakehouse, typed_rows):
    got = (
        typed_lakehouse.session("u_hash")
        .sql("SELECT s, n, d, ts, e FROM m.s.t WHERE id = 1")
        .collect()
    )
    _, s, n, d, ts, e, _ = typed_rows[0]
    assert tuple(got[0]) == (
        hashlib.sha256(b"hello world").hexdigest(),
        hashlib.sha256(b"123456").hexdigest(),
        hashlib.sha256(b"2024-07-15").hexdigest(),
        hashlib.sha256(b"2024-07-15 13:45:30").hexdigest(),
        hashlib.sha256(b"anna@example.de").hexdigest(),
    )
    assert (s, n, d, ts, e) == (
        "hello world",
        123456,
        dt.date(2024, 7, 15),
        dt.datetime(2024, 7, 15, 13, 45, 30),
        "anna@example.de",
    )


def test_last4_counts_characters_not_bytes(typed_lakehouse):
    got = typed_lakehouse.session("u_last4").sql("SELECT s FROM m.s.t WHERE id = 4").collect()
    assert got[0][0] == "*rüße"


@pytest.mark.parametrize(
    ("user", "types"),
    [
        ("u_redact", ["int", "string", "int", "date", "timestamp"]),
        ("u_null", ["int", "string", "int", "date", "timestamp"]),
        ("u_year", ["int", "string", "int", "date", "timestamp"]),
        ("u_hash", ["int", "string", "string", "string", "string"]),
    ],
)
def test_masks_keep_or_change_the_column_type_as_specified(typed_lakehouse, user, types):
    df = typed_lakehouse.session(user).sql("SELECT id, s, n, d, ts FROM m.s.t")
    assert [f.dataType.simpleString() for f in df.schema.fields] == types


def test_unmasked_user_sees_clear_values(typed_lakehouse, typed_rows):
    got = typed_lakehouse.session("nobody").sql("SELECT * FROM m.s.t ORDER BY id").collect()
    assert [tuple(r) for r in got] == typed_rows


def test_custom_mask_substitutes_col_and_resolves_current_user(typed_lakehouse):
    explained = typed_lakehouse.session("u_custom").explain("SELECT s FROM m.s.t")
    assert "CONCAT('<', UPPER(`s`), '|', 'u_custom', '>') AS `s`" in explained
    assert "current_user" not in explained.lower()
