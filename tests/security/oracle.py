"""The bypass tests' oracle: what each demo persona may see, as hand-written dynamic views.

Each view is written here from the reference policies (policies/*.yaml) and the mask table
of the policy contract (docs/spec/policy-format.md), not from the product's code: the
rows a persona may see, hidden columns gone, masks applied. An attack statement is run a
second time in plain Spark with every demo table replaced by the persona's view; the
governed result must equal that reference result. So a probe that reveals a hidden value
without printing it (a count of hidden rows, the length of a masked value, `ssn = '...'`
as a boolean, an error raised only on a hidden row) is caught, which a substring search
for hidden values cannot do.

The same substitution with the raw tables (`raw_session`) is governance switched off: the
self-tests run the checker against it to show the checker catches each kind of leak.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp

ORDERS = "id, customer_id, region, amount, order_date, is_test"
_HASH = "sha2(CAST({c} AS STRING), 256) AS {c}"
_LAST4 = (
    "CASE WHEN phone IS NULL THEN NULL WHEN char_length(phone) <= 4 THEN phone "
    "ELSE concat(repeat('*', char_length(phone) - 4), substr(phone, -4)) END AS phone"
)
_YEAR = "make_date(year(birth_date), 1, 1) AS birth_date"
_EMPLOYEES_ANALYST = f"SELECT id, name, department, {_YEAR} FROM {{t}}"
_EMEA = "country IN ('DE', 'FR', 'UK')"

# user -> (schema, table) -> the dynamic view over `{t}` (the raw Delta table). A table
# missing for a user: no SELECT on it at all.
VIEWS: dict[str, dict[tuple[str, str], str]] = {
    # analysts: test orders hidden (restrictive), PII hashed, ssn and salary denied
    "alice": {
        ("sales", "orders"): f"SELECT {ORDERS} FROM {{t}} WHERE NOT is_test",
        ("sales", "customers"): f"SELECT id, name, {_HASH.format(c='email')}, "
        f"{_HASH.format(c='phone')}, country FROM {{t}}",
        ("hr", "employees"): _EMPLOYEES_ANALYST,
    },
    # bob: as alice, and the phone column denied
    "bob": {
        ("sales", "orders"): f"SELECT {ORDERS} FROM {{t}} WHERE NOT is_test",
        ("sales", "customers"): f"SELECT id, name, {_HASH.format(c='email')}, country FROM {{t}}",
        ("hr", "employees"): _EMPLOYEES_ANALYST,
    },
    # carol: an analyst in emea-analysts: EMEA rows only, phone last 4 (priority 10)
    "carol": {
        ("sales", "orders"): f"SELECT {ORDERS} FROM {{t}} WHERE region = 'EMEA' AND NOT is_test",
        ("sales", "customers"): f"SELECT id, name, {_HASH.format(c='email')}, {_LAST4}, "
        f"country FROM {{t}} WHERE {_EMEA}",
        ("hr", "employees"): _EMPLOYEES_ANALYST,
    },
    # dana: an analyst and a PII reader: clear email and phone, still no ssn
    "dana": {
        ("sales", "orders"): f"SELECT {ORDERS} FROM {{t}} WHERE NOT is_test",
        ("sales", "customers"): "SELECT id, name, email, phone, country FROM {t}",
        ("hr", "employees"): _EMPLOYEES_ANALYST,
    },
    # erin: owns the sales domain (manage): every row and column, PII hashed
    "erin": {
        ("sales", "orders"): f"SELECT {ORDERS} FROM {{t}}",
        ("sales", "customers"): f"SELECT id, name, {_HASH.format(c='email')}, "
        f"{_HASH.format(c='phone')}, {_HASH.format(c='ssn')}, "
        "country FROM {t}",
    },
    # frank: an auditor, nothing in main
    "frank": {},
}
DEMO_TABLES = [
    ("sales", "orders"),
    ("sales", "customers"),
    ("hr", "employees"),
    ("marketing", "campaigns"),
]
RAW = {t: "SELECT * FROM {t}" for t in DEMO_TABLES}


_PLAIN = {"this", "db", "catalog", "alias"}


class NoOracle(Exception):
    """The statement holds something the oracle does not model; it cannot say."""


@dataclass(frozen=True)
class Expected:
    """What the reference says: rows, or `denied` (a table the user may not read), or
    `error` (Spark itself rejects the statement over the views)."""

    rows: Counter[tuple[Any, ...]] | None = None
    denied: str | None = None
    error: str | None = None


def norm(v: Any) -> Any:
    """A collected value in a form that compares equal across the two runs."""
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, Decimal):
        return v.normalize()
    if isinstance(v, dict):
        return tuple(sorted((norm(k), norm(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(norm(x) for x in v)
    if isinstance(v, bytes | bytearray):
        return bytes(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    return v


def multiset(rows: list[Any]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(norm(v) for v in r) for r in rows)


def _namespace(pre: tuple[str, ...] | list[str]) -> str | None:
    """The current schema after the case's `USE main.<schema>` statements (else unknown)."""
    schema = None
    for stmt in pre:
        words = stmt.replace("SCHEMA ", "").split()
        if len(words) != 2 or words[0].upper() != "USE":
            raise NoOracle(f"setup statement not modelled: {stmt}")
        parts = words[1].lower().split(".")
        if parts[0] != "main":
            raise NoOracle(f"setup statement not modelled: {stmt}")
        schema = parts[1] if len(parts) == 2 else None
    return schema


def substitute(
    sql: str,
    views: dict[tuple[str, str], str],
    locations: dict[str, str],
    pre: tuple[str, ...] | list[str] = (),
) -> str:
    """`sql` with each demo table replaced by its view, as Spark SQL (built on the tree).

    Raises NoOracle when a name is not plainly a demo table (CTE names, time travel,
    samples, paths, other catalogs), and PermissionError naming a table with no view."""
    schema = _namespace(pre)
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as e:
        raise NoOracle(f"does not parse: {e}") from None
    if not isinstance(tree, exp.Query):
        raise NoOracle(f"not a query: {type(tree).__name__}")
    for select in tree.find_all(exp.Select):
        select.set("hint", None)  # hints only tune plans; the reference needs none
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            raise NoOracle(f"table expression not modelled: {table.sql('spark')}")
        if any(v for k, v in table.args.items() if k not in _PLAIN):
            raise NoOracle(f"table clause not modelled: {table.sql('spark')}")
        parts = [p.lower() for p in (table.catalog, table.db, table.name) if p]
        if parts[-1] in ctes:
            raise NoOracle("a name shared with a CTE: scoping is not modelled")
        if len(parts) == 1:
            if schema is None:
                raise NoOracle("one-part name without USE")
            parts = ["main", schema, parts[0]]
        elif len(parts) == 2:
            parts = ["main", *parts]
        if parts[0] != "main":
            raise NoOracle(f"catalog not modelled: {parts[0]}")
        key = (parts[1], parts[2])
        if key not in views:
            raise PermissionError(".".join(parts))
        loc = locations[parts[2]].replace("`", "``")
        view = sqlglot.parse_one(views[key].format(t=f"delta.`{loc}`"), read="spark")
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(parts[2]))
        table.replace(exp.Subquery(this=view, alias=alias))
    return tree.sql(dialect="spark")


def expected(
    spark: Any,
    user: str,
    sql: str,
    locations: dict[str, str],
    pre: tuple[str, ...] | list[str] = (),
) -> Expected:
    """The reference outcome of `sql` for `user` (NoOracle when it cannot be modelled)."""
    if user not in VIEWS:
        raise NoOracle(f"no reference views for {user}")
    try:
        ref = substitute(sql, VIEWS[user], locations, pre)
    except PermissionError as e:
        return Expected(denied=str(e))
    try:
        return Expected(rows=multiset(spark.sql(ref).collect()))
    except Exception as e:  # Spark rejects the statement itself, over the views too
        return Expected(error=str(e).strip().splitlines()[0][:300] if str(e).strip() else "")


class RawSession:
    """Governance switched off: the statement over the raw tables (for the self-tests)."""

    def __init__(self, spark: Any, locations: dict[str, str]) -> None:
        self.spark = spark
        self.locations = locations

    def sql(self, sql: str) -> Any:
        return self.spark.sql(substitute(sql, RAW, self.locations))
