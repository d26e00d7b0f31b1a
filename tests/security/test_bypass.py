"""Bypass resistance (issue 6): one test per attack class, over the demo lakehouse.

Each case is attack SQL run as a demo persona and the outcome it must have:

- REFUSED: `Refused` (a statement kind or construct the layer does not govern)
- DENIED:  `AccessDenied` (refused is a kind of denial, so it counts too)
- BLOCKED: any `LakegateError` (denied, refused, or failed in Spark with a one-line error)
- SAFE:    blocked, or a governed result; the attack only has to get nothing hidden
- SAME:    a governed result (the oracle below decides which)
- a callable or list: a governed result, checked by the callable / compared as a multiset

Whatever passes the rewriter runs through Spark. Every collected result and every error
message is searched for the raw values the persona must never see (helpers.py), and every
outcome is compared with the oracle (oracle.py): the same statement in plain Spark over the
persona's hand-written dynamic views. A governed result must equal the reference result,
so counts, lengths and boolean probes of hidden values are caught too; a raw Spark error
(not a LakegateError) passes only where Spark fails over the views as well, since one that
only the governed run raises was raised on a hidden row. Statements the oracle does not
model (CTE scoping, time travel, paths, other catalogs) keep the substring check alone.
Statements that could write are checked through `explain()` (planning only), so a bug
cannot change the shared lakehouse.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from governance import AccessDenied, LakegateError, Refused, SqlParseError

from . import oracle
from .helpers import assert_message_clean, assert_no_leak

REFUSED, DENIED, BLOCKED, SAFE = "REFUSED", "DENIED", "BLOCKED", "SAFE"
SAME = "SAME"  # a governed result equal to the oracle's
LOC = "@LOC_"  # `@LOC_orders@` in a case is replaced by that table's Delta location

ALICE_ORDERS = {1, 2, 3, 4, 6, 7, 8}  # every order but the test order 5
CAROL_ORDERS = {1, 4, 8}  # EMEA, not test
CAROL_CUSTOMERS = {1, 4, 6}  # DE, FR, UK
ALL_CUSTOMERS = {1, 2, 3, 4, 5, 6}
CUSTOMER_COLUMNS_ALICE = ["id", "name", "email", "phone", "country"]
EMAIL_BY_ID = {
    1: "anna@example.de",
    2: "ben@example.com",
    3: "chen@example.cn",
    4: "dom@example.fr",
    5: "eve@example.com",
    6: "farah@example.uk",
}


def sha(v: str) -> str:
    return hashlib.sha256(v.encode()).hexdigest()


# expectations for governed results ---------------------------------------------------------


def ids(expected: set[int], col: int = 0) -> Callable[[list], None]:
    def check(rows: list) -> None:
        got = {r[col] for r in rows}
        assert got == expected, f"visible ids {sorted(got)} != {sorted(expected)}"

    check.__name__ = f"ids{sorted(expected)}"
    return check


def count(n: int) -> Callable[[list], None]:
    def check(rows: list) -> None:
        assert len(rows) == 1 and rows[0][0] == n, f"expected count {n}, got {rows}"

    check.__name__ = f"count{n}"
    return check


def columns(names: Sequence[str]) -> Callable[[list, Any], None]:
    def check(rows: list, df: Any) -> None:
        assert [c.lower() for c in df.columns] == list(names), df.columns

    check.__name__ = f"columns{list(names)}"
    check.wants_df = True  # type: ignore[attr-defined]
    return check


def ordered_ids(expected: list[int]) -> Callable[[list], None]:
    def check(rows: list) -> None:
        assert [r[0] for r in rows] == expected

    return check


def all_hashed(col: int) -> Callable[[list], None]:
    def check(rows: list) -> None:
        assert rows, "no rows"
        for r in rows:
            v = r[col]
            assert v is None or (len(v) == 64 and set(v) <= set("0123456789abcdef")), v

    return check


def nonempty(rows: list) -> None:
    assert rows, "expected a governed, non-empty result"


@dataclass
class Case:
    id: str
    user: str
    sql: str
    expect: Any
    pre: Sequence[str] = field(default_factory=tuple)  # run first, on the same session

    def param(self, *marks: Any) -> Any:
        return pytest.param(self, id=self.id, marks=marks)


# Cases that fail because of product bugs: strict xfails, listed in the report.
KNOWN_BUGS: dict[str, str] = {}


def params(cases: Sequence[Case]) -> list[Any]:
    out = []
    for c in cases:
        marks = (
            [pytest.mark.xfail(reason=KNOWN_BUGS[c.id], strict=True)] if c.id in KNOWN_BUGS else []
        )
        out.append(c.param(*marks))
    return out


def _substitute(sql: str, locations: dict[str, str]) -> str:
    for name, loc in locations.items():
        sql = sql.replace(f"{LOC}{name}@", loc)
    return sql


def run_case(lakehouse: Any, locations: dict[str, str], case: Case) -> None:
    session = lakehouse.session(case.user)
    for stmt in case.pre:
        session.sql(_substitute(stmt, locations)).collect()
    sql = _substitute(case.sql, locations)
    check_outcome(
        session,
        case.user,
        sql,
        case.expect,
        reference=lambda: oracle.expected(lakehouse.spark, case.user, sql, locations, case.pre),
    )


def _reference(reference: Callable[[], oracle.Expected] | None) -> oracle.Expected | None:
    """The oracle's verdict, or None when the statement holds something it does not model."""
    if reference is None:
        return None
    try:
        return reference()
    except oracle.NoOracle:
        return None


def check_outcome(
    session: Any,
    user: str,
    sql: str | bytes,
    expect: Any,
    strict: bool = False,
    reference: Callable[[], oracle.Expected] | None = None,
) -> None:
    """Run `sql` and check the outcome against `expect` and, when given and the statement
    can be modelled, against the oracle's `reference` (the same statement over the user's
    hand-written dynamic views): a governed result must equal the reference result, and a
    raw Spark error (not a LakegateError) is only accepted, outside `strict` mode, when
    Spark rejects the statement over the views too."""
    df = rows = None
    error: BaseException | None = None
    try:
        df = session.sql(sql)
        rows = df.collect()
    except LakegateError as e:
        error = e
    except Exception as e:  # a Spark error raised while collecting
        assert_message_clean(user, str(e))
        ref = None if strict or expect in (REFUSED, DENIED) else _reference(reference)
        assert ref is not None and ref.error is not None, (
            f"a raw Spark error reached the caller ({type(e).__name__}: "
            f"{str(e).strip()[:200]}); the reference says {ref}"
        )
        return
    if error is not None:
        assert_message_clean(user, str(error))
        assert "\n" not in str(error).strip(), f"error is not one line: {error!r}"
        if expect in (SAFE, BLOCKED):
            return
        if expect == REFUSED:
            assert isinstance(error, Refused), f"expected a refusal, got {error!r}"
            return
        if expect == DENIED:
            assert isinstance(error, AccessDenied), f"expected a denial, got {error!r}"
            return
        if expect == SAME:
            ref = _reference(reference)
            assert ref is not None and ref.rows is None, (
                f"blocked ({error!r}) although the reference views answer"
            )
            return
        raise AssertionError(f"expected a governed result, got {error!r}")
    assert rows is not None
    assert_no_leak(user, rows)
    if expect in (REFUSED, DENIED, BLOCKED):
        raise AssertionError(f"expected {expect}, but the statement ran: {rows[:5]}")
    ref = _reference(reference)
    if ref is not None:
        assert ref.denied is None, f"ran, but {user} may not read {ref.denied}: {rows[:5]}"
        assert ref.error is None, f"ran, but fails over the reference views: {ref.error}"
        got = oracle.multiset(rows)
        assert got == ref.rows, (
            f"governed result differs from the reference views\n"
            f"governed-only: {list((got - ref.rows).elements())[:6]}\n"
            f"reference-only: {list((ref.rows - got).elements())[:6]}"
        )
    elif expect == SAME:
        raise AssertionError("SAME needs a statement the oracle can model")
    if expect in (SAFE, SAME):
        return
    if callable(expect):
        if getattr(expect, "wants_df", False):
            expect(rows, df)
        else:
            expect(rows)
    else:
        assert Counter(tuple(r) for r in rows) == Counter(tuple(r) for r in expect)


# 1. name resolution ------------------------------------------------------------------------

NAME_RESOLUTION = [
    # a CTE named like a real table does not hide the real table from the rewriter ...
    Case(
        "cte-named-like-table-real-read-inside",
        "alice",
        "WITH customers AS (SELECT * FROM main.sales.customers) SELECT * FROM customers",
        all_hashed(2),
    ),
    Case(
        "cte-shadowing-qualified-table",
        "carol",
        "WITH orders AS (SELECT 1 AS id) SELECT id FROM main.sales.orders",
        ids(CAROL_ORDERS),
    ),
    Case(
        "cte-shadow-then-two-part-name",
        "carol",
        "WITH orders AS (SELECT 99 AS id) SELECT id FROM sales.orders",
        ids(CAROL_ORDERS),
    ),
    Case(
        "cte-in-sibling-scope-does-not-shadow",
        "carol",
        "SELECT b.id FROM (WITH orders AS (SELECT 99 AS id) SELECT * FROM orders) a, "
        "main.sales.orders b",
        ids(CAROL_ORDERS),
    ),
    Case(
        "cte-self-reference-is-not-a-cte",
        "alice",
        "WITH orders AS (SELECT * FROM orders) SELECT * FROM orders",
        DENIED,
    ),
    Case(
        "cte-forward-reference-is-not-a-cte",
        "alice",
        "WITH a AS (SELECT * FROM b), b AS (SELECT * FROM main.sales.customers) SELECT * FROM a",
        DENIED,
    ),
    Case("recursive-cte", "alice", "WITH RECURSIVE c AS (SELECT 1 AS n) SELECT * FROM c", REFUSED),
    Case(
        "nested-cte-shadows-outer",
        "alice",
        "WITH customers AS (SELECT 1 AS q) SELECT * FROM "
        "(WITH customers AS (SELECT email FROM main.sales.customers) SELECT * FROM customers)",
        all_hashed(0),
    ),
    # ... and a real table is never taken for a CTE (after USE, one-part names)
    Case(
        "real-table-not-a-cte-after-use",
        "carol",
        "WITH x AS (SELECT 1 AS id) SELECT id FROM orders",
        ids(CAROL_ORDERS),
        pre=("USE main.sales",),
    ),
    Case(
        "cte-defined-later-does-not-shadow-earlier-cte",
        "alice",
        "WITH a AS (SELECT email FROM customers), customers AS (SELECT 1 AS email) SELECT * FROM a",
        all_hashed(0),
        pre=("USE main.sales",),
    ),
    Case(
        "cte-wins-over-table-after-use",
        "carol",
        "WITH orders AS (SELECT 42 AS id) SELECT id FROM orders",
        [(42,)],
        pre=("USE main.sales",),
    ),
    # differing case between the CTE and its reference (Spark compares case-insensitively)
    Case(
        "cte-case-differs",
        "alice",
        "WITH Customers AS (SELECT 7 AS x) SELECT * FROM CUSTOMERS",
        [(7,)],
        pre=("USE main.sales",),
    ),
    Case(
        "cte-case-differs-backticked",
        "alice",
        "WITH `ORDERS` AS (SELECT 7 AS x) SELECT * FROM `orders`",
        [(7,)],
        pre=("USE main.sales",),
    ),
    # an alias equal to another table's name
    Case(
        "alias-named-like-other-table",
        "alice",
        "SELECT orders.email FROM main.sales.customers AS orders",
        all_hashed(0),
    ),
    Case(
        "aliases-swapped",
        "carol",
        "SELECT customers.id, orders.name FROM main.sales.orders AS customers "
        "JOIN main.sales.customers AS orders ON customers.customer_id = orders.id",
        ids({1, 4, 8}),
    ),
    Case(
        "alias-named-like-cte",
        "alice",
        "WITH c AS (SELECT 1 AS id) SELECT c.email FROM main.sales.customers AS c",
        all_hashed(0),
    ),
    # backtick quoting and mixed case
    Case(
        "backticks-mixed-case",
        "carol",
        "SELECT `ID` FROM `Main`.`SALES`.`Orders`",
        ids(CAROL_ORDERS),
    ),
    Case("upper-case-name", "carol", "SELECT id FROM MAIN.SALES.ORDERS", ids(CAROL_ORDERS)),
    Case(
        "backtick-column-mixed-case",
        "alice",
        "SELECT `EmAiL` FROM main.sales.customers",
        all_hashed(0),
    ),
    Case(
        "backtick-hidden-column-mixed-case",
        "alice",
        "SELECT `SsN` FROM main.sales.customers",
        DENIED,
    ),
    # a single quoted identifier containing dots is one name, not three parts
    Case("quoted-identifier-with-dots", "alice", "SELECT * FROM `main.sales.customers`", DENIED),
    Case(
        "quoted-identifier-with-dots-two-part",
        "alice",
        "SELECT * FROM `main.sales`.customers",
        DENIED,
    ),
    Case(
        "quoted-identifier-with-dots-as-cte",
        "alice",
        "WITH `main.sales.customers` AS (SELECT 5 AS x) SELECT * FROM `main.sales.customers`",
        [(5,)],
    ),
    Case("double-quoted-name", "alice", 'SELECT * FROM "main.sales.customers"', BLOCKED),
    Case("backtick-inside-identifier", "alice", "SELECT * FROM main.sales.`customers``x`", DENIED),
    # one- and two-part names against the current catalog and schema; USE mid-session
    Case("one-part-default-schema", "alice", "SELECT * FROM customers", DENIED),
    Case("two-part-current-catalog", "carol", "SELECT id FROM sales.orders", ids(CAROL_ORDERS)),
    Case(
        "use-schema-then-one-part",
        "alice",
        "SELECT email FROM customers",
        all_hashed(0),
        pre=("USE main.sales",),
    ),
    Case(
        "use-changes-schema-mid-session",
        "alice",
        "SELECT * FROM customers",
        DENIED,
        pre=("USE main.sales", "SELECT 1", "USE SCHEMA hr"),
    ),
    Case(
        "use-then-hidden-column",
        "alice",
        "SELECT salary FROM employees",
        DENIED,
        pre=("USE main.hr",),
    ),
    Case(
        "use-catalog-then-two-part",
        "carol",
        "SELECT id FROM sales.orders",
        ids(CAROL_ORDERS),
        pre=("USE CATALOG main",),
    ),
    Case("use-unknown-schema", "alice", "USE main.nosuchschema", BLOCKED),
    Case(
        "use-schema-of-denied-table-still-denied",
        "alice",
        "SELECT * FROM campaigns",
        DENIED,
        pre=("USE main.marketing",),
    ),
    Case("four-part-name", "alice", "SELECT * FROM spark_catalog.main.sales.customers", BLOCKED),
    Case("global-temp-schema", "alice", "SELECT * FROM global_temp.customers", DENIED),
    Case("spark-catalog-prefix", "alice", "SELECT * FROM spark_catalog.sales.customers", DENIED),
    Case("no-grant-table", "alice", "SELECT * FROM main.marketing.campaigns", DENIED),
    Case("no-grant-user", "frank", "SELECT 1 FROM main.sales.orders WHERE false", DENIED),
]


@pytest.mark.parametrize("case", params(NAME_RESOLUTION))
def test_name_resolution(lakehouse, locations, case: Case) -> None:
    run_case(lakehouse, locations, case)


def test_name_resolution_denial_does_not_reveal_existence(lakehouse) -> None:
    """'not granted' and 'does not exist' read the same, so probing names reveals nothing."""
    s = lakehouse.session("frank")
    msgs = []
    for name in ("main.sales.orders", "main.sales.no_such_table"):
        with pytest.raises(AccessDenied) as e:
            s.sql(f"SELECT * FROM {name}")
        msgs.append(str(e.value).replace(name, "<t>"))
    assert msgs[0] == msgs[1]


# 2. constructs that hold table references ----------------------------------------------------

CONSTRUCTS = [
    # subqueries in FROM, WHERE, SELECT, HAVING: scalar, IN, EXISTS, correlated
    Case(
        "subquery-from",
        "carol",
        "SELECT id FROM (SELECT * FROM main.sales.orders) t",
        ids(CAROL_ORDERS),
    ),
    Case(
        "subquery-select-scalar",
        "carol",
        "SELECT (SELECT count(*) FROM main.sales.orders) AS n",
        count(3),
    ),
    Case(
        "subquery-select-correlated",
        "carol",
        "SELECT c.id, (SELECT count(*) FROM main.sales.orders o WHERE o.customer_id = c.id) "
        "FROM main.sales.customers c",
        ids(CAROL_CUSTOMERS),
    ),
    Case(
        "subquery-where-in",
        "carol",
        "SELECT 1 FROM (SELECT 1) WHERE 'AMER' IN (SELECT region FROM main.sales.orders)",
        [],
    ),
    Case(
        "subquery-where-exists-correlated",
        "alice",
        "SELECT id FROM main.sales.orders o WHERE EXISTS "
        "(SELECT 1 FROM main.sales.orders i WHERE i.id = o.id AND i.is_test)",
        [],
    ),
    Case(
        "subquery-where-not-exists",
        "carol",
        "SELECT count(*) FROM (SELECT 1) WHERE NOT EXISTS "
        "(SELECT 1 FROM main.sales.orders WHERE region = 'APAC')",
        count(1),
    ),
    Case(
        "subquery-where-scalar",
        "alice",
        "SELECT count(*) FROM (SELECT 1) WHERE (SELECT max(amount) FROM main.sales.orders) > 900",
        count(0),
    ),
    Case(
        "subquery-having",
        "carol",
        "SELECT region, count(*) FROM main.sales.orders GROUP BY region HAVING count(*) >= "
        "(SELECT count(*) FROM main.sales.customers WHERE country = 'US')",
        [("EMEA", 3)],
    ),
    Case(
        "subquery-hidden-column",
        "alice",
        "SELECT (SELECT max(ssn) FROM main.sales.customers)",
        DENIED,
    ),
    Case(
        "subquery-exists-hidden-column",
        "alice",
        "SELECT count(*) FROM main.sales.customers c WHERE EXISTS "
        "(SELECT 1 FROM main.sales.customers d WHERE d.ssn = '111-22-3333')",
        DENIED,
    ),
    # joins of every kind
    *[
        Case(
            f"join-{kind.lower().replace(' ', '-')}",
            "carol",
            f"SELECT o.id FROM main.sales.orders o {kind} main.sales.orders p "
            "ON o.id = p.id WHERE o.id IS NOT NULL",
            ids(CAROL_ORDERS),
        )
        for kind in (
            "JOIN",
            "INNER JOIN",
            "LEFT JOIN",
            "LEFT OUTER JOIN",
            "RIGHT JOIN",
            "FULL OUTER JOIN",
            "LEFT SEMI JOIN",
        )
    ],
    Case(
        "join-anti",
        "carol",
        "SELECT o.id FROM main.sales.orders o LEFT ANTI JOIN main.sales.customers c "
        "ON o.customer_id = c.id",
        [],
    ),
    Case(
        "join-cross",
        "carol",
        "SELECT count(*) FROM main.sales.orders CROSS JOIN main.sales.customers",
        count(9),
    ),
    Case(
        "join-comma",
        "carol",
        "SELECT count(*) FROM main.sales.orders, main.sales.customers",
        count(9),
    ),
    Case(
        "join-natural",
        "carol",
        "SELECT id FROM main.sales.orders NATURAL JOIN main.sales.customers",
        ids({1, 4}),
    ),
    Case(
        "join-using",
        "carol",
        "SELECT id FROM main.sales.orders JOIN main.sales.customers USING (id)",
        ids({1, 4}),
    ),
    Case(
        "join-full-outer-other-table",
        "carol",
        "SELECT c.id FROM main.sales.orders o FULL OUTER JOIN main.sales.customers c "
        "ON o.customer_id = c.id WHERE c.id IS NOT NULL",
        ids(CAROL_CUSTOMERS),
    ),
    # set operations
    Case(
        "union",
        "carol",
        "SELECT id FROM main.sales.orders UNION SELECT id + 100 FROM main.sales.orders",
        ids({1, 4, 8, 101, 104, 108}),
    ),
    Case(
        "union-all-hidden-values",
        "alice",
        "SELECT email FROM main.sales.customers UNION ALL SELECT phone FROM main.sales.customers",
        all_hashed(0),
    ),
    Case(
        "intersect",
        "carol",
        "SELECT id FROM main.sales.orders INTERSECT SELECT id FROM main.sales.customers",
        ids({1, 4}),
    ),
    Case(
        "except-finds-no-hidden-row",
        "alice",
        "SELECT id FROM main.sales.orders EXCEPT SELECT id FROM main.sales.orders "
        "WHERE NOT is_test",
        [],
    ),
    Case(
        "minus",
        "carol",
        "SELECT id FROM main.sales.orders MINUS SELECT id FROM main.sales.customers",
        ids({8}),
    ),
    # LATERAL VIEW and LATERAL subqueries
    Case(
        "lateral-view-explode",
        "alice",
        "SELECT e FROM main.sales.customers LATERAL VIEW explode(array(email, phone)) t AS e",
        all_hashed(0),
    ),
    Case(
        "lateral-view-outer",
        "carol",
        "SELECT id FROM main.sales.orders LATERAL VIEW OUTER explode(array()) t AS e",
        ids(CAROL_ORDERS),
    ),
    Case(
        "lateral-subquery",
        "carol",
        "SELECT c.id, x.n FROM main.sales.customers c, LATERAL (SELECT count(*) AS n "
        "FROM main.sales.orders o WHERE o.customer_id = c.id) x",
        ids(CAROL_CUSTOMERS),
    ),
    Case(
        "lateral-subquery-hidden-table",
        "alice",
        "SELECT x.* FROM main.sales.orders o, LATERAL (SELECT * FROM main.marketing.campaigns) x",
        DENIED,
    ),
    # PIVOT / UNPIVOT
    Case(
        "pivot-on-table",
        "carol",
        "SELECT * FROM (SELECT region, amount FROM main.sales.orders) "
        "PIVOT (sum(amount) FOR region IN ('EMEA', 'AMER', 'APAC'))",
        [(Decimal("226.10"), None, None)],
    ),
    Case(
        "pivot-directly-on-table",
        "carol",
        "SELECT * FROM main.sales.orders PIVOT (count(*) FOR region IN ('AMER', 'APAC'))",
        lambda rows: all(r[-1] in (None, 0) and r[-2] in (None, 0) for r in rows),
    ),
    Case(
        "unpivot-masked",
        "alice",
        "SELECT v FROM main.sales.customers UNPIVOT (v FOR k IN (email, phone))",
        all_hashed(0),
    ),
    Case(
        "unpivot-hidden-column",
        "alice",
        "SELECT * FROM main.sales.customers UNPIVOT (v FOR k IN (email, ssn))",
        BLOCKED,
    ),
    # TABLESAMPLE, `TABLE t`
    Case(
        "tablesample-percent",
        "carol",
        "SELECT id FROM main.sales.orders TABLESAMPLE (100 PERCENT)",
        ids(CAROL_ORDERS),
    ),
    Case(
        "tablesample-rows",
        "carol",
        "SELECT id FROM main.sales.orders TABLESAMPLE (100 ROWS)",
        ids(CAROL_ORDERS),
    ),
    Case(
        "tablesample-bucket",
        "carol",
        "SELECT id FROM main.sales.orders TABLESAMPLE (BUCKET 1 OUT OF 1)",
        ids(CAROL_ORDERS),
    ),
    Case("table-statement", "carol", "TABLE main.sales.orders", SAFE),
    Case("table-in-subquery", "carol", "SELECT * FROM (TABLE main.sales.orders)", SAFE),
    # hints naming tables or paths only tune plans; they never read anything
    Case(
        "hint-names-table",
        "carol",
        "SELECT /*+ BROADCAST(main.sales.orders) */ id FROM main.sales.orders",
        ids(CAROL_ORDERS),
    ),
    Case(
        "hint-names-alias-of-other-table",
        "carol",
        "SELECT /*+ MERGE(orders), BROADCAST(customers) */ o.id FROM main.sales.orders o "
        "JOIN main.sales.customers c ON o.customer_id = c.id",
        ids({1, 4, 8}),
    ),
    Case(
        "hint-names-path",
        "alice",
        "SELECT /*+ REPARTITION(delta.`@LOC_customers@`) */ count(*) FROM main.sales.orders",
        count(7),
    ),
    Case(
        "hint-with-subquery",
        "alice",
        "SELECT /*+ COALESCE((SELECT max(ssn) FROM main.sales.customers)) */ 1",
        SAFE,
    ),
    # time travel: governed by today's policies; `t@v3` is not an alias
    Case(
        "version-as-of",
        "carol",
        "SELECT id FROM main.sales.orders VERSION AS OF 1",
        ids(CAROL_ORDERS),
    ),
    Case(
        "for-version-as-of",
        "alice",
        "SELECT id FROM main.sales.orders FOR VERSION AS OF 1",
        ids(ALICE_ORDERS),
    ),
    Case(
        "version-as-of-aliased",
        "carol",
        "SELECT o.id FROM main.sales.orders VERSION AS OF 1 AS o",
        ids(CAROL_ORDERS),
    ),
    Case(
        "timestamp-as-of-future",
        "carol",
        "SELECT id FROM main.sales.orders TIMESTAMP AS OF '2999-01-01'",
        BLOCKED,
    ),
    Case(
        "version-as-of-subquery",
        "alice",
        "SELECT * FROM main.sales.orders VERSION AS OF (SELECT max(id) FROM main.sales.orders)",
        BLOCKED,
    ),
    Case("at-version-spelling", "alice", "SELECT * FROM main.sales.orders@v1", REFUSED),
    Case("at-version-spelling-v3", "carol", "SELECT id FROM main.sales.orders@v3", REFUSED),
    Case(
        "at-version-spelling-one-part",
        "carol",
        "SELECT id FROM orders@v3",
        REFUSED,
        pre=("USE main.sales",),
    ),
    Case(
        "at-version-spelling-in-subquery",
        "alice",
        "SELECT (SELECT max(amount) FROM main.sales.orders@v1)",
        BLOCKED,
    ),
    Case("at-version-spelling-numeric", "alice", "SELECT * FROM main.sales.orders@1", REFUSED),
    Case(
        "at-version-spelling-timestamp",
        "alice",
        "SELECT * FROM main.sales.orders@20260101000000000",
        REFUSED,
    ),
    Case(
        "at-version-spelling-backticked",
        "alice",
        "SELECT * FROM `main`.`sales`.`orders`@v1",
        REFUSED,
    ),
    Case("at-version-spelling-spaced", "alice", "SELECT * FROM main.sales.orders @v1", REFUSED),
    Case(
        "at-version-spelling-in-join",
        "alice",
        "SELECT * FROM main.sales.customers c JOIN main.sales.orders@v1 ON true",
        BLOCKED,
    ),
    Case("at-version-spelling-aliased", "alice", "SELECT * FROM main.sales.orders@v1 o", BLOCKED),
    # table-valued functions
    Case("table-changes", "alice", "SELECT * FROM table_changes('main.sales.orders', 0)", REFUSED),
    Case(
        "table-changes-upper",
        "alice",
        "SELECT * FROM TABLE_CHANGES('main.sales.customers', 0, 1)",
        REFUSED,
    ),
    Case("read-files", "alice", "SELECT * FROM read_files('@LOC_customers@')", REFUSED),
    Case(
        "read-files-format",
        "alice",
        "SELECT * FROM read_files('@LOC_customers@', format => 'parquet')",
        REFUSED,
    ),
    Case("identifier-clause", "alice", "SELECT * FROM IDENTIFIER('main.sales.customers')", REFUSED),
    Case(
        "identifier-clause-concat",
        "alice",
        "SELECT * FROM IDENTIFIER('main.sales.' || 'customers')",
        REFUSED,
    ),
    Case(
        "identifier-clause-column",
        "alice",
        "SELECT IDENTIFIER('ssn') FROM main.sales.customers",
        BLOCKED,
    ),
    Case("unknown-table-function", "alice", "SELECT * FROM sql_keywords()", REFUSED),
    Case("json-tuple-table-function", "alice", "SELECT * FROM json_tuple('{}', 'a')", REFUSED),
    Case(
        "explode-table-function-with-subquery",
        "alice",
        "SELECT * FROM explode(array((SELECT max(ssn) FROM main.sales.customers)))",
        BLOCKED,
    ),
    Case("range-table-function", "alice", "SELECT count(*) FROM range(3)", count(3)),
    # other places a table can stand
    Case("hive-from-first", "carol", "FROM main.sales.orders SELECT id", ids(CAROL_ORDERS)),
    Case(
        "hive-from-first-hidden-column", "alice", "FROM main.sales.customers c SELECT c.ssn", DENIED
    ),
    Case("parenthesised-table", "carol", "SELECT id FROM (main.sales.orders)", ids(CAROL_ORDERS)),
    Case(
        "nested-join-tree",
        "carol",
        "SELECT o.id FROM main.sales.orders o JOIN (main.sales.customers c JOIN "
        "main.sales.orders o2 ON c.id = o2.customer_id) ON o.id = o2.id",
        ids({1, 4, 8}),
    ),
    Case(
        "values-with-subquery",
        "alice",
        "VALUES ((SELECT max(email) FROM main.sales.customers))",
        SAFE,
    ),
    Case(
        "values-with-hidden-subquery",
        "alice",
        "VALUES ((SELECT max(ssn) FROM main.sales.customers))",
        DENIED,
    ),
    Case(
        "table-column-alias-list",
        "alice",
        "SELECT e FROM main.sales.customers c (a, b, e, d, f)",
        all_hashed(0),
    ),
    Case(
        "table-column-alias-list-names-hidden",
        "alice",
        "SELECT ssn FROM main.sales.customers c (id, name, ssn, phone, country)",
        SAFE,
    ),
    Case(
        "filter-clause-on-hidden-rows",
        "alice",
        "SELECT count(*) FILTER (WHERE is_test) FROM main.sales.orders",
        count(0),
    ),
    Case(
        "qualify-over-filtered",
        "carol",
        "SELECT id FROM main.sales.orders QUALIFY row_number() OVER (ORDER BY amount DESC) = 1",
        [(1,)],
    ),
    Case(
        "cluster-by-hidden",
        "alice",
        "SELECT email FROM main.sales.customers CLUSTER BY ssn",
        DENIED,
    ),
    Case(
        "delta-options-clause",
        "alice",
        "SELECT * FROM main.sales.orders WITH ('readChangeFeed' = 'true')",
        BLOCKED,
    ),
]


@pytest.mark.parametrize("case", params(CONSTRUCTS))
def test_constructs_holding_table_references(lakehouse, locations, case: Case) -> None:
    run_case(lakehouse, locations, case)


# 3. paths and engines --------------------------------------------------------------------------

_FORMATS = [
    "delta",
    "parquet",
    "json",
    "csv",
    "text",
    "orc",
    "binaryFile",
    "avro",
    "DeLtA",
    "PARQUET",
    "BinaryFile",
    "`delta`",
    "`DELTA`",
    "`parquet`",
    "hive",
    "jdbc",
    "xml",
    "libsvm",
    "image",
    "noop",
    "file",
]
PATHS_AND_ENGINES = [
    *[
        Case(
            f"path-{fmt.strip('`')}{'-quoted' if '`' in fmt else ''}",
            "alice",
            f"SELECT * FROM {fmt}.`@LOC_customers@`",
            REFUSED,
        )
        for fmt in _FORMATS
    ],
    Case("path-file-uri", "alice", "SELECT * FROM delta.`file:@LOC_customers@`", REFUSED),
    Case(
        "path-file-uri-triple-slash",
        "alice",
        "SELECT * FROM delta.`file://@LOC_customers@`",
        REFUSED,
    ),
    Case("path-one-part", "alice", "SELECT * FROM `@LOC_customers@`", REFUSED),
    Case(
        "path-with-catalog", "alice", "SELECT * FROM spark_catalog.delta.`@LOC_customers@`", REFUSED
    ),
    Case("path-under-real-catalog", "alice", "SELECT * FROM main.delta.`@LOC_customers@`", REFUSED),
    Case(
        "path-class-name-format",
        "alice",
        "SELECT * FROM `org.apache.spark.sql.delta.sources.DeltaDataSource`.`@LOC_customers@`",
        REFUSED,
    ),
    Case(
        "path-dotted-format",
        "alice",
        "SELECT * FROM org.apache.spark.sql.parquet.`@LOC_customers@`",
        REFUSED,
    ),
    Case(
        "path-in-subquery",
        "alice",
        "SELECT (SELECT max(ssn) FROM delta.`@LOC_customers@`)",
        REFUSED,
    ),
    Case(
        "path-in-cte",
        "alice",
        "WITH c AS (SELECT * FROM parquet.`@LOC_customers@`) SELECT * FROM c",
        REFUSED,
    ),
    Case(
        "path-in-join",
        "alice",
        "SELECT * FROM main.sales.orders o JOIN delta.`@LOC_customers@` c ON true",
        REFUSED,
    ),
    Case("path-of-other-file", "alice", "SELECT * FROM text.`/etc/hostname`", REFUSED),
    Case("path-relative", "alice", "SELECT * FROM parquet.`warehouse/main`", REFUSED),
    Case("path-for-admin-too", "root", "SELECT * FROM delta.`@LOC_customers@`", REFUSED),
    # writing files out
    Case(
        "insert-overwrite-directory",
        "alice",
        "INSERT OVERWRITE DIRECTORY '/tmp/lakegate-leak' USING parquet "
        "SELECT * FROM main.sales.customers",
        REFUSED,
    ),
    Case(
        "insert-overwrite-local-directory",
        "alice",
        "INSERT OVERWRITE LOCAL DIRECTORY '/tmp/lakegate-leak' SELECT * FROM main.sales.customers",
        REFUSED,
    ),
    Case(
        "insert-overwrite-directory-path-option",
        "alice",
        "INSERT OVERWRITE DIRECTORY USING parquet OPTIONS ('path' '/tmp/lakegate-leak') "
        "SELECT * FROM main.sales.customers",
        REFUSED,
    ),
    Case("convert-to-delta", "root", "CONVERT TO DELTA parquet.`/tmp/lakegate-x`", REFUSED),
    Case(
        "shallow-clone",
        "root",
        "CREATE TABLE main.sales.c2 SHALLOW CLONE main.sales.customers",
        REFUSED,
    ),
    Case(
        "deep-clone", "erin", "CREATE TABLE main.sales.c3 DEEP CLONE main.sales.customers", REFUSED
    ),
    Case("clone-path", "root", "CREATE TABLE main.sales.c4 CLONE delta.`@LOC_customers@`", REFUSED),
    Case(
        "create-table-location",
        "erin",
        "CREATE TABLE main.sales.x (a INT) USING delta LOCATION '@LOC_customers@'",
        REFUSED,
    ),
    Case(
        "ctas-location",
        "erin",
        "CREATE TABLE main.sales.x LOCATION '/tmp/lakegate-x' AS SELECT 1 AS a",
        REFUSED,
    ),
    Case(
        "create-table-using-parquet",
        "erin",
        "CREATE TABLE main.sales.x (a INT) USING parquet",
        REFUSED,
    ),
    Case(
        "load-data",
        "erin",
        "LOAD DATA LOCAL INPATH '/etc/hostname' INTO TABLE main.sales.customers",
        REFUSED,
    ),
    # code
    Case("add-jar", "root", "ADD JAR /tmp/x.jar", REFUSED),
    Case("add-jars", "alice", "ADD JARS /tmp/x.jar", REFUSED),
    Case("add-file", "alice", "ADD FILE /etc/hostname", REFUSED),
    Case("add-archive", "alice", "ADD ARCHIVE /tmp/x.zip", REFUSED),
    Case("list-files", "alice", "LIST FILES", REFUSED),
    Case(
        "create-function",
        "root",
        "CREATE FUNCTION f AS 'org.apache.hadoop.hive.ql.udf.UDFUpper'",
        REFUSED,
    ),
    Case(
        "create-temporary-function",
        "alice",
        "CREATE TEMPORARY FUNCTION f AS 'x.Y' USING JAR '/tmp/x.jar'",
        REFUSED,
    ),
    Case(
        "create-sql-function",
        "alice",
        "CREATE TEMPORARY FUNCTION f() RETURNS TABLE (s STRING) RETURN "
        "SELECT ssn FROM main.sales.customers",
        REFUSED,
    ),
    Case("drop-function", "root", "DROP FUNCTION f", REFUSED),
    Case(
        "transform-using",
        "alice",
        "SELECT TRANSFORM (email) USING 'cat' AS (e) FROM main.sales.customers",
        REFUSED,
    ),
    Case(
        "transform-using-in-subquery",
        "alice",
        "SELECT * FROM (SELECT TRANSFORM (id) USING '/bin/sh -c id' AS (e) FROM main.sales.orders)",
        REFUSED,
    ),
    Case("map-using", "alice", "SELECT MAP (id) USING 'cat' FROM main.sales.orders", BLOCKED),
    Case("reduce-using", "alice", "SELECT REDUCE (id) USING 'cat' FROM main.sales.orders", BLOCKED),
    *[
        Case(
            f"function-{fn.strip('`').lower()}",
            "alice",
            f"SELECT {fn}('java.lang.System', 'getenv', 'HOME')",
            REFUSED,
        )
        for fn in (
            "reflect",
            "java_method",
            "try_reflect",
            "REFLECT",
            "Java_Method",
            "TRY_REFLECT",
            "`reflect`",
            "`java_method`",
        )
    ],
    Case(
        "reflect-in-row-context",
        "alice",
        "SELECT id FROM main.sales.orders WHERE reflect('java.lang.Thread', 'sleep', 1) IS NULL",
        REFUSED,
    ),
    Case(
        "reflect-in-lambda",
        "alice",
        "SELECT transform(array(1), x -> reflect('java.lang.System', 'exit', x))",
        REFUSED,
    ),
    Case("input-file-name", "alice", "SELECT input_file_name() FROM main.sales.orders", REFUSED),
    Case(
        "input-file-block-start",
        "alice",
        "SELECT input_file_block_start() FROM main.sales.orders",
        REFUSED,
    ),
    Case(
        "input-file-block-length",
        "alice",
        "SELECT input_file_block_length() FROM main.sales.orders",
        REFUSED,
    ),
    Case("metadata-column", "alice", "SELECT _metadata FROM main.sales.orders", REFUSED),
    Case(
        "metadata-column-field",
        "alice",
        "SELECT _metadata.file_path FROM main.sales.orders",
        REFUSED,
    ),
    Case(
        "metadata-column-qualified",
        "alice",
        "SELECT o._metadata.file_path FROM main.sales.orders o",
        REFUSED,
    ),
    Case(
        "metadata-column-upper-backticked",
        "alice",
        "SELECT `_METADATA` FROM main.sales.orders",
        REFUSED,
    ),
    Case(
        "metadata-column-in-where",
        "alice",
        "SELECT id FROM main.sales.orders WHERE _metadata.file_size > 0",
        REFUSED,
    ),
    Case(
        "metadata-row-index", "alice", "SELECT _metadata.row_index FROM main.sales.orders", REFUSED
    ),
    Case("udf-not-builtin", "alice", "SELECT my_udf(email) FROM main.sales.customers", REFUSED),
    Case("raise-error", "alice", "SELECT raise_error(email) FROM main.sales.customers", REFUSED),
    Case(
        "assert-true-echo",
        "alice",
        "SELECT assert_true(false, email) FROM main.sales.customers",
        REFUSED,
    ),
    Case("current-database", "alice", "SELECT current_database()", SAFE),
    # configuration
    *[
        Case(f"set-{i}", "alice", sql, REFUSED)
        for i, sql in enumerate(
            [
                "SET spark.sql.ansi.enabled=true",
                "SET",
                "SET -v",
                "SET spark.databricks.delta.retentionDurationCheck.enabled = false",
                "SET spark.sql.parser.escapedStringLiterals=true",
                "SET `spark.sql.legacy.timeParserPolicy`=LEGACY",
                "set spark.sql.optimizer.excludedRules=x",
                "SET TIME ZONE 'UTC'",
                "SET VAR x = 1",
                "RESET",
                "RESET spark.sql.ansi.enabled",
                "DECLARE x INT",
                "EXECUTE IMMEDIATE 'SELECT * FROM delta.`@LOC_customers@`'",
            ]
        )
    ],
    # shared session state: cache and views (they are shared across users)
    *[
        Case(f"cache-{i}", user, sql, REFUSED)
        for i, (user, sql) in enumerate(
            [
                ("alice", "CACHE TABLE main.sales.customers"),
                ("root", "CACHE TABLE main.sales.customers"),
                ("alice", "CACHE LAZY TABLE main.sales.customers"),
                ("alice", "CACHE TABLE leak AS SELECT * FROM main.sales.customers"),
                ("alice", "CACHE TABLE leak OPTIONS ('storageLevel' 'DISK_ONLY') SELECT 1"),
                ("alice", "UNCACHE TABLE main.sales.customers"),
                ("alice", "UNCACHE TABLE IF EXISTS main.sales.customers"),
                ("alice", "CLEAR CACHE"),
            ]
        )
    ],
    *[
        Case(f"view-{i}", user, sql, REFUSED)
        for i, (user, sql) in enumerate(
            [
                # session temp views are governed (tests/governance/test_temp_views.py);
                # these escape the session or read a path
                ("alice", "CREATE TEMP VIEW v AS SELECT * FROM delta.`@LOC_customers@`"),
                ("alice", "CREATE TEMPORARY VIEW global_temp.v AS SELECT 1"),
                ("alice", "CREATE OR REPLACE TEMPORARY VIEW main.sales.v AS SELECT 1"),
                ("alice", "CREATE GLOBAL TEMPORARY VIEW v AS SELECT 1"),
                (
                    "alice",
                    "CREATE OR REPLACE GLOBAL TEMP VIEW v AS SELECT * FROM main.sales.orders",
                ),
                ("root", "CREATE VIEW main.sales.v AS SELECT * FROM main.sales.customers"),
                ("alice", "CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '@LOC_customers@')"),
                (
                    "alice",
                    "CREATE TEMPORARY TABLE v USING parquet OPTIONS (path '@LOC_customers@')",
                ),
                ("alice", "DROP VIEW global_temp.v"),
                ("alice", "DROP VIEW IF EXISTS main.sales.v"),
                ("alice", "ALTER VIEW v AS SELECT 1"),
            ]
        )
    ],
    # maintenance and metadata commands: no privilege makes them pass through
    *[
        Case(f"maintenance-{i}-{user}", user, sql, REFUSED)
        for i, sql in enumerate(
            [
                "REFRESH TABLE main.sales.customers",
                "REFRESH '@LOC_customers@'",
                "REFRESH FUNCTION f",
                "ANALYZE TABLE main.sales.customers COMPUTE STATISTICS",
                "ANALYZE TABLE main.sales.customers COMPUTE STATISTICS FOR ALL COLUMNS",
                "ANALYZE TABLES IN main.sales COMPUTE STATISTICS",
                "VACUUM main.sales.customers",
                "VACUUM main.sales.customers RETAIN 0 HOURS",
                "VACUUM delta.`@LOC_customers@`",
                "OPTIMIZE main.sales.customers",
                "OPTIMIZE main.sales.customers ZORDER BY (id)",
                "RESTORE TABLE main.sales.orders TO VERSION AS OF 0",
                "RESTORE main.sales.orders TO TIMESTAMP AS OF '2026-01-01'",
                "DESCRIBE DETAIL main.sales.customers",
                "DESCRIBE DETAIL delta.`@LOC_customers@`",
                "MSCK REPAIR TABLE main.sales.customers",
                "FSCK REPAIR TABLE main.sales.customers",
                "ALTER TABLE main.sales.customers SET LOCATION '/tmp/x'",
                "ALTER TABLE main.sales.customers SET TBLPROPERTIES ('delta.appendOnly'='true')",
                "ALTER TABLE main.sales.customers UNSET TBLPROPERTIES ('a')",
                "TRUNCATE TABLE main.sales.orders",
                "EXPLAIN SELECT * FROM main.sales.customers",
                "EXPLAIN EXTENDED SELECT * FROM delta.`@LOC_customers@`",
                "SHOW CREATE TABLE main.sales.customers",
                "SHOW TBLPROPERTIES main.sales.customers",
                "SHOW PARTITIONS main.sales.customers",
                "SHOW FUNCTIONS",
                "SHOW VIEWS",
                "SHOW TABLE EXTENDED IN main.sales LIKE '*'",
                "DESCRIBE FUNCTION reflect",
                "DESCRIBE QUERY SELECT * FROM main.sales.customers",
                "GRANT SELECT ON TABLE main.sales.customers TO alice",
                "REVOKE SELECT ON TABLE main.sales.customers FROM alice",
                "DROP SCHEMA main.sales CASCADE",
                "DROP DATABASE main.hr",
                "ALTER SCHEMA main.sales SET LOCATION '/tmp/x'",
                "CREATE SCHEMA main.x LOCATION '/tmp/x'",
                "CREATE SCHEMA main.x WITH DBPROPERTIES ('a'='b')",
            ]
        )
        for user in ("alice", "root")
    ],
]


@pytest.mark.parametrize("case", params(PATHS_AND_ENGINES))
def test_paths_and_engines(lakehouse, locations, case: Case) -> None:
    # DDL and maintenance statements are only planned (no Spark), so a miss cannot change
    # the shared lakehouse; reads go through Spark as usual.
    if case.user == "root" or not case.sql.lstrip().upper().startswith(("SELECT", "WITH")):
        plan_only(lakehouse, case.user, _substitute(case.sql, locations), case.expect)
    else:
        run_case(lakehouse, locations, case)


def plan_only(lakehouse: Any, user: str, sql: str, expect: str) -> None:
    """The planner alone decides (nothing runs); used for statements that could write."""
    session = lakehouse.session(user)
    if expect in (REFUSED, DENIED, BLOCKED):
        exc = {REFUSED: Refused, DENIED: AccessDenied, BLOCKED: LakegateError}[expect]
        with pytest.raises(exc) as e:
            session.explain(sql)
        assert_message_clean(user, str(e.value))
        return
    raise AssertionError(f"plan_only takes a blocking expectation, not {expect}")


def test_paths_and_engines_session_temp_views_are_not_reachable(lakehouse, locations) -> None:
    """A temp or global temp view someone created in the shared SparkSession (outside the
    layer) over a raw table is not reachable by name through a governed session."""
    spark = lakehouse.spark
    loc = locations["customers"]
    spark.sql(f"CREATE OR REPLACE TEMP VIEW lg_sec_raw_customers AS SELECT * FROM delta.`{loc}`")
    spark.sql(
        f"CREATE OR REPLACE GLOBAL TEMP VIEW lg_sec_raw_customers AS SELECT * FROM delta.`{loc}`"
    )
    spark.sql(f"CACHE TABLE lg_sec_cached AS SELECT * FROM delta.`{loc}`")
    try:
        for name in (
            "lg_sec_raw_customers",
            "global_temp.lg_sec_raw_customers",
            "`global_temp`.`lg_sec_raw_customers`",
            "lg_sec_cached",
            "spark_catalog.default.lg_sec_raw_customers",
        ):
            check_outcome(lakehouse.session("alice"), "alice", f"SELECT * FROM {name}", DENIED)
        # the cached raw relation is not substituted into a governed read
        check_outcome(
            lakehouse.session("alice"),
            "alice",
            "SELECT email, phone FROM main.sales.customers",
            all_hashed(0),
        )
        check_outcome(
            lakehouse.session("carol"),
            "carol",
            "SELECT id FROM main.sales.customers",
            ids(CAROL_CUSTOMERS),
        )
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS lg_sec_cached")
        spark.sql("DROP VIEW IF EXISTS lg_sec_cached")
        spark.sql("DROP VIEW IF EXISTS lg_sec_raw_customers")
        spark.sql("DROP VIEW IF EXISTS global_temp.lg_sec_raw_customers")


def test_paths_and_engines_plan_verifier_is_on_by_default(lakehouse) -> None:
    assert lakehouse.config.verify_plans is True


# 4. data leaks -----------------------------------------------------------------------------

_HASH_ORDER = [i for _, i in sorted((sha(e), i) for i, e in EMAIL_BY_ID.items())]

DATA_LEAKS = [
    # masked values are what WHERE, JOIN, GROUP BY, ORDER BY and window functions see
    Case(
        "where-sees-masked",
        "alice",
        "SELECT count(*) FROM main.sales.customers WHERE email = 'anna@example.de'",
        count(0),
    ),
    Case(
        "where-sees-masked-hash",
        "alice",
        f"SELECT id FROM main.sales.customers WHERE email = '{sha('anna@example.de')}'",
        [(1,)],
    ),
    Case(
        "where-like-on-masked",
        "alice",
        "SELECT count(*) FROM main.sales.customers WHERE email LIKE '%@%'",
        count(0),
    ),
    Case(
        "where-last4-prefix",
        "carol",
        "SELECT count(*) FROM main.sales.customers WHERE phone LIKE '+49%'",
        count(0),
    ),
    Case(
        "where-year-mask",
        "alice",
        "SELECT count(*) FROM main.hr.employees WHERE birth_date = DATE'1986-12-09'",
        count(0),
    ),
    Case(
        "where-year-mask-truncated",
        "alice",
        "SELECT count(*) FROM main.hr.employees WHERE birth_date = DATE'1986-01-01'",
        count(1),
    ),
    Case(
        "where-length-of-masked",
        "alice",
        "SELECT count(*) FROM main.sales.customers WHERE length(email) <> 64",
        count(0),
    ),
    Case(
        "join-sees-masked",
        "alice",
        "SELECT count(*) FROM main.sales.customers a JOIN (SELECT 'anna@example.de' AS e) b "
        "ON a.email = b.e",
        count(0),
    ),
    Case(
        "join-on-masked-literal",
        "alice",
        "SELECT count(*) FROM main.sales.customers a JOIN main.sales.customers b "
        "ON a.email = 'anna@example.de'",
        count(0),
    ),
    Case(
        "group-by-sees-masked",
        "alice",
        "SELECT email, count(*) FROM main.sales.customers GROUP BY email",
        all_hashed(0),
    ),
    Case(
        "group-by-substring-of-masked",
        "alice",
        "SELECT substring(email, 1, 4) AS p FROM main.sales.customers GROUP BY 1",
        lambda rows: {r[0] for r in rows} == {sha(e)[:4] for e in EMAIL_BY_ID.values()},
    ),
    Case(
        "order-by-sees-masked",
        "alice",
        "SELECT id FROM main.sales.customers ORDER BY email",
        ordered_ids(_HASH_ORDER),
    ),
    Case(
        "window-order-sees-masked",
        "alice",
        "SELECT id FROM (SELECT id, row_number() OVER (ORDER BY email) AS r "
        "FROM main.sales.customers) ORDER BY r",
        ordered_ids(_HASH_ORDER),
    ),
    Case(
        "window-first-value-masked",
        "alice",
        "SELECT DISTINCT first_value(email) OVER (ORDER BY id) FROM main.sales.customers",
        all_hashed(0),
    ),
    Case(
        "window-partition-masked",
        "carol",
        "SELECT count(*) OVER (PARTITION BY substring(phone, 1, 3)) FROM main.sales.customers",
        lambda rows: sorted(r[0] for r in rows) == [3, 3, 3],
    ),
    Case(
        "min-max-of-masked",
        "alice",
        "SELECT min(email), max(phone) FROM main.sales.customers",
        all_hashed(0),
    ),
    Case(
        "collect-list-of-masked",
        "alice",
        "SELECT collect_list(email) FROM main.sales.customers",
        nonempty,
    ),
    Case(
        "to-json-struct-star",
        "alice",
        "SELECT to_json(struct(*)) FROM main.sales.customers",
        nonempty,
    ),
    Case(
        "masked-cast-to-number",
        "alice",
        "SELECT CAST(replace(phone, ' ', '') AS BIGINT) FROM main.sales.customers",
        SAFE,
    ),
    # aggregates over a filtered table count only visible rows
    Case("count-filtered", "carol", "SELECT count(*) FROM main.sales.orders", count(3)),
    Case(
        "sum-filtered", "carol", "SELECT sum(amount) FROM main.sales.orders", [(Decimal("226.10"),)]
    ),
    Case(
        "max-filtered-test-row",
        "alice",
        "SELECT max(amount) FROM main.sales.orders",
        [(Decimal("310.25"),)],
    ),
    Case("count-filtered-alice", "alice", "SELECT count(*) FROM main.sales.orders", count(7)),
    Case(
        "count-distinct-filtered",
        "carol",
        "SELECT count(DISTINCT region) FROM main.sales.orders",
        count(1),
    ),
    Case(
        "group-by-filtered",
        "carol",
        "SELECT region, count(*) FROM main.sales.orders GROUP BY region",
        [("EMEA", 3)],
    ),
    Case(
        "window-over-filtered",
        "carol",
        "SELECT DISTINCT count(*) OVER () FROM main.sales.orders",
        [(3,)],
    ),
    Case(
        "approx-count-filtered",
        "carol",
        "SELECT approx_count_distinct(id) FROM main.sales.orders",
        count(3),
    ),
    Case(
        "filtered-customers", "carol", "SELECT id FROM main.sales.customers", ids(CAROL_CUSTOMERS)
    ),
    Case(
        "filter-sees-real-values",
        "carol",  # the filter is on real country, not a mask
        "SELECT country FROM main.sales.customers",
        lambda rows: sorted(r[0] for r in rows) == ["DE", "FR", "UK"],
    ),
    # denied columns: *, t.*, struct access, ORDER BY, GROUP BY ordinals, USING joins
    Case(
        "star-omits-denied",
        "alice",
        "SELECT * FROM main.sales.customers",
        columns(CUSTOMER_COLUMNS_ALICE),
    ),
    Case(
        "qualified-star-omits-denied",
        "alice",
        "SELECT c.* FROM main.sales.customers c",
        columns(CUSTOMER_COLUMNS_ALICE),
    ),
    Case(
        "star-omits-denied-bob",
        "bob",
        "SELECT * FROM main.sales.customers",
        columns(["id", "name", "email", "country"]),
    ),
    Case(
        "star-in-subquery-then-denied",
        "alice",
        "SELECT x.ssn FROM (SELECT * FROM main.sales.customers) x",
        DENIED,
    ),
    Case(
        "cte-star-then-denied",
        "alice",
        "WITH t AS (SELECT * FROM main.sales.customers) SELECT ssn FROM t",
        DENIED,
    ),
    Case(
        "struct-star-field",
        "alice",
        "SELECT s.ssn FROM (SELECT struct(*) AS s FROM main.sales.customers)",
        BLOCKED,
    ),
    Case(
        "struct-qualified-star-field",
        "alice",
        "SELECT struct(c.*).ssn FROM main.sales.customers c",
        BLOCKED,
    ),
    Case(
        "named-struct-denied",
        "alice",
        "SELECT named_struct('x', ssn) FROM main.sales.customers",
        DENIED,
    ),
    Case("denied-by-name", "alice", "SELECT ssn FROM main.sales.customers", DENIED),
    Case("denied-qualified", "alice", "SELECT c.ssn FROM main.sales.customers c", DENIED),
    Case(
        "denied-three-part-qualified",
        "alice",
        "SELECT main.sales.customers.ssn FROM main.sales.customers",
        DENIED,
    ),
    Case(
        "denied-two-part-qualified",
        "alice",
        "SELECT sales.customers.ssn FROM main.sales.customers",
        DENIED,
    ),
    Case(
        "denied-in-where",
        "alice",
        "SELECT id FROM main.sales.customers WHERE ssn = '111-22-3333'",
        DENIED,
    ),
    Case(
        "denied-in-order-by", "alice", "SELECT name FROM main.sales.customers ORDER BY ssn", DENIED
    ),
    Case(
        "denied-in-group-by",
        "alice",
        "SELECT name FROM main.sales.customers GROUP BY ssn, name",
        DENIED,
    ),
    Case(
        "denied-in-having",
        "alice",
        "SELECT count(*) FROM main.hr.employees HAVING max(salary) > 1",
        DENIED,
    ),
    Case(
        "denied-in-window",
        "alice",
        "SELECT rank() OVER (ORDER BY salary) FROM main.hr.employees",
        DENIED,
    ),
    Case(
        "denied-in-join-on",
        "alice",
        "SELECT a.id FROM main.sales.customers a JOIN main.sales.customers b ON a.ssn = b.ssn",
        DENIED,
    ),
    Case(
        "denied-order-by-ordinal-past-visible",
        "alice",
        "SELECT * FROM main.sales.customers ORDER BY 6",
        BLOCKED,
    ),
    Case(
        "denied-group-by-ordinal-past-visible",
        "alice",
        "SELECT *, count(*) FROM main.sales.customers GROUP BY 1, 2, 3, 4, 5, 6",
        BLOCKED,
    ),
    Case(
        "group-by-all",
        "alice",
        "SELECT email, count(*) FROM main.sales.customers GROUP BY ALL",
        all_hashed(0),
    ),
    Case(
        "order-by-all",
        "bob",
        "SELECT * FROM main.sales.customers ORDER BY ALL",
        columns(["id", "name", "email", "country"]),
    ),
    Case(
        "denied-using-join",
        "alice",
        "SELECT * FROM main.sales.customers a JOIN main.sales.customers b USING (ssn)",
        BLOCKED,
    ),
    Case(
        "natural-join-visible-only",
        "alice",
        "SELECT * FROM main.sales.customers a NATURAL JOIN main.sales.customers b",
        columns(CUSTOMER_COLUMNS_ALICE),
    ),
    Case(
        "denied-salary-star",
        "alice",
        "SELECT * FROM main.hr.employees",
        columns(["id", "name", "department", "birth_date"]),
    ),
    Case(
        "denied-lateral-view-column",
        "alice",
        "SELECT x FROM main.sales.customers LATERAL VIEW explode(array(ssn)) t AS x",
        DENIED,
    ),
    Case(
        "denied-in-pivot",
        "alice",
        "SELECT * FROM main.hr.employees PIVOT (sum(salary) FOR department IN ('engineering'))",
        BLOCKED,
    ),
    Case(
        "alias-named-like-denied-column",
        "alice",
        "SELECT email AS ssn FROM main.sales.customers",
        all_hashed(0),
    ),
    Case(
        "masked-for-dana-not-denied",
        "dana",
        "SELECT email FROM main.sales.customers WHERE id = 1",
        [("anna@example.de",)],
    ),
    # DESCRIBE / SHOW list only what the user may see
    Case(
        "describe-omits-denied",
        "alice",
        "DESCRIBE main.sales.customers",
        lambda rows: [r[0] for r in rows] == CUSTOMER_COLUMNS_ALICE,
    ),
    Case(
        "describe-extended-omits-denied",
        "alice",
        "DESCRIBE EXTENDED main.sales.customers",
        lambda rows: "ssn" not in [r[0] for r in rows],
    ),
    Case(
        "describe-table-omits-denied",
        "alice",
        "DESCRIBE TABLE main.hr.employees",
        lambda rows: [r[0] for r in rows] == ["id", "name", "department", "birth_date"],
    ),
    Case("describe-no-grant", "alice", "DESCRIBE main.marketing.campaigns", DENIED),
    Case("describe-no-grant-frank", "frank", "DESCRIBE main.sales.customers", DENIED),
    Case("describe-column", "alice", "DESCRIBE main.sales.customers ssn", BLOCKED),
    Case(
        "show-tables-visible",
        "alice",
        "SHOW TABLES IN main.sales",
        lambda rows: sorted(r[2] for r in rows) == ["customers", "orders"],
    ),
    Case("show-tables-no-grant", "alice", "SHOW TABLES IN main.marketing", []),
    Case("show-tables-no-grant-frank", "frank", "SHOW TABLES IN main.sales", []),
    Case("show-tables-from-backticked", "alice", "SHOW TABLES FROM `main`.`marketing`", []),
    Case(
        "show-schemas",
        "alice",
        "SHOW SCHEMAS",
        lambda rows: sorted(r[0] for r in rows) == ["hr", "sales"],
    ),
    Case("show-databases-frank", "frank", "SHOW DATABASES", []),
    Case(
        "show-catalogs-frank",
        "frank",
        "SHOW CATALOGS",  # frank reads system.* only
        lambda rows: "main" not in {r[0] for r in rows},
    ),
    Case("show-tables-like", "alice", "SHOW TABLES IN main.marketing LIKE '*'", SAFE),
]


@pytest.mark.parametrize("case", params(DATA_LEAKS))
def test_data_leaks(lakehouse, locations, case: Case) -> None:
    run_case(lakehouse, locations, case)


# Probes that reveal a hidden value without printing it: counts and sums over hidden rows,
# lengths of masked values, comparisons with a raw value as a boolean, an error raised only
# on a hidden row or raw value. Only the oracle catches them: each result must equal the
# same statement over the persona's dynamic views (and the self-test below shows each one
# is caught when governance is off).
PROBES = [
    # aggregates
    Case(
        "probe-count-hidden-test-orders",
        "alice",
        "SELECT count(*) FROM main.sales.orders WHERE is_test",
        SAME,
    ),
    Case(
        "probe-sum-outside-region",
        "carol",
        "SELECT sum(amount), count(*) FROM main.sales.orders WHERE region <> 'EMEA'",
        SAME,
    ),
    Case(
        "probe-group-counts-outside-filter",
        "carol",
        "SELECT country, count(*) FROM main.sales.customers GROUP BY country",
        SAME,
    ),
    Case("probe-avg-and-max", "alice", "SELECT avg(id), count(*) FROM main.sales.orders", SAME),
    # lengths and other functions of masked values
    Case(
        "probe-length-of-masked",
        "alice",
        "SELECT id, length(email), length(phone) FROM main.sales.customers",
        SAME,
    ),
    Case(
        "probe-instr-of-last4",
        "carol",
        "SELECT id, length(phone), instr(phone, '30') FROM main.sales.customers",
        SAME,
    ),
    Case(
        "probe-ascii-of-masked",
        "erin",
        "SELECT id, ascii(ssn), ascii(email) FROM main.sales.customers",
        SAME,
    ),
    # a raw value compared as a boolean
    Case(
        "probe-email-equals-as-boolean",
        "alice",
        "SELECT id, email = 'anna@example.de' FROM main.sales.customers",
        SAME,
    ),
    Case(
        "probe-ssn-like-as-boolean",
        "erin",
        "SELECT id, ssn LIKE '111%' FROM main.sales.customers",
        SAME,
    ),
    Case(
        "probe-birth-date-month",
        "alice",
        "SELECT id, birth_date > DATE'1990-06-30', month(birth_date) FROM main.hr.employees",
        SAME,
    ),
    Case(
        "probe-bool-or-hidden-rows",
        "carol",
        "SELECT bool_or(region = 'AMER'), bool_or(is_test) FROM main.sales.orders",
        SAME,
    ),
    Case(
        "probe-exists-as-count",
        "alice",
        "SELECT count(*) > 0 FROM main.sales.orders WHERE amount > 900",
        SAME,
    ),
    # the error channel: an error only a hidden row or a raw value would raise
    Case(
        "probe-error-only-on-hidden-row",
        "carol",
        "SELECT id FROM main.sales.orders WHERE to_number(CASE WHEN region = 'AMER' "
        "THEN 'x' ELSE '1' END, '9') = 1",
        SAME,
    ),
    Case(
        "probe-error-only-on-raw-value",
        "alice",
        "SELECT id FROM main.sales.customers WHERE to_number(CASE WHEN email LIKE 'anna%' "
        "THEN 'x' ELSE '1' END, '9') = 1",
        SAME,
    ),
]


@pytest.mark.parametrize("case", params(PROBES))
def test_data_leaks_probes_match_the_reference_views(lakehouse, locations, case: Case) -> None:
    run_case(lakehouse, locations, case)


@pytest.mark.parametrize("case", params(PROBES))
def test_data_leaks_checker_catches_each_probe_without_governance(
    lakehouse, locations, case: Case
) -> None:
    """Self-test of the checker: the probe over the raw tables (governance off) fails it,
    although it prints no hidden value the substring check would find."""
    raw = oracle.RawSession(lakehouse.spark, locations)
    with pytest.raises(AssertionError, match="reference"):
        check_outcome(
            raw,
            case.user,
            case.sql,
            case.expect,
            reference=lambda: oracle.expected(lakehouse.spark, case.user, case.sql, locations),
        )


def test_data_leaks_oracle_reads_the_policies_as_written(lakehouse, locations) -> None:
    """The oracle's own views, spot-checked by hand against the demo data."""
    spark = lakehouse.spark
    carol = oracle.expected(spark, "carol", "SELECT id, phone FROM main.sales.customers", locations)
    assert carol.rows == Counter(
        {(1, "**********4567"): 1, (4, "***********8910"): 1, (6, "************0958"): 1}
    )
    assert (
        oracle.expected(spark, "alice", "SELECT * FROM main.marketing.campaigns", locations).denied
        == "main.marketing.campaigns"
    )
    assert oracle.expected(spark, "alice", "SELECT ssn FROM main.sales.customers", locations).error
    with pytest.raises(oracle.NoOracle):
        oracle.expected(
            spark, "alice", "WITH orders AS (SELECT 1 AS id) SELECT id FROM orders", locations
        )


# Queries built to fail. Each failing value is computed only from rows/columns the user must
# not see, so an error evaluated before the policy applies would echo a hidden value.
ERROR_ECHOES = [
    (
        "carol",
        "SELECT to_number(CASE WHEN region <> 'EMEA' THEN region ELSE '1' END, '9') "
        "FROM main.sales.orders",
    ),
    (
        "carol",
        "SELECT id FROM main.sales.orders WHERE to_number(CASE WHEN region <> 'EMEA' "
        "THEN concat(region, CAST(amount AS STRING)) ELSE '1' END, '9') = 1",
    ),
    (
        "alice",
        "SELECT id FROM main.sales.orders WHERE to_number(CASE WHEN amount > 900 "
        "THEN CAST(amount AS STRING) ELSE '1' END, '9') = 1",
    ),
    (
        "alice",
        "SELECT to_binary(CASE WHEN is_test THEN CAST(amount AS STRING) END, 'hex') "
        "FROM main.sales.orders",
    ),
    (
        "carol",
        "SELECT c.id FROM main.sales.customers c JOIN main.sales.orders o ON "
        "to_number(CASE WHEN c.country IN ('US', 'CN') THEN c.name ELSE '1' END, '9') "
        "= o.id",
    ),
    (
        "carol",
        "SELECT max(to_number(CASE WHEN country NOT IN ('DE','FR','UK') THEN name "
        "ELSE '1' END, '9')) FROM main.sales.customers GROUP BY country",
    ),
    (
        "carol",
        "SELECT map_from_arrays(array(region, region), array(1, 2)) FROM "
        "main.sales.orders WHERE region <> 'EMEA'",
    ),
    (
        "carol",
        "SELECT sum(to_number(region, '9')) OVER (PARTITION BY region) FROM main.sales.orders",
    ),
    # errors on visible rows echo only visible (masked) values
    ("alice", "SELECT to_number(email, '9') FROM main.sales.customers"),
    ("alice", "SELECT to_binary(phone, 'hex') FROM main.sales.customers WHERE id = 1"),
    ("alice", "SELECT map_from_arrays(array(email, email), array(1, 2)) FROM main.sales.customers"),
    ("carol", "SELECT to_number(phone, '9') FROM main.sales.customers"),
    ("alice", "SELECT to_number(CAST(birth_date AS STRING), '9') FROM main.hr.employees"),
    (
        "alice",
        "SELECT from_json(email, 'a INT', map('mode', 'FAILFAST')) FROM main.sales.customers",
    ),
    ("alice", "SELECT CAST(email AS INT) / 0 FROM main.sales.customers"),
    ("alice", "SELECT element_at(array(email), 9) FROM main.sales.customers"),
    # errors naming hidden columns or tables
    ("alice", "SELECT ssn FROM main.sales.customers"),
    ("alice", "SELECT s.ssn FROM (SELECT struct(*) AS s FROM main.sales.customers)"),
    ("alice", "SELECT * FROM main.sales.customers a JOIN main.sales.customers b USING (ssn)"),
    ("alice", "SELECT * FROM main.marketing.campaigns"),
    ("alice", "SELECT no_such_column FROM main.sales.customers"),
    ("alice", "SELECT * FROM main.sales.orders VERSION AS OF 999"),
    ("frank", "SELECT name FROM main.sales.customers"),
    ("carol", "SELECT id FROM main.sales.orders WHERE region = 'AMER' AND 1/0 > 0"),
]


@pytest.mark.parametrize(
    ("user", "sql"), ERROR_ECHOES, ids=[f"{u}-{i}" for i, (u, _) in enumerate(ERROR_ECHOES)]
)
def test_data_leaks_errors_never_echo_hidden_values(
    lakehouse, locations, user: str, sql: str
) -> None:
    """Blocked, or the reference's outcome: an error raised where the views answer means the
    user's expression ran on a hidden row."""
    check_outcome(
        lakehouse.session(user),
        user,
        sql,
        SAFE,
        reference=lambda: oracle.expected(lakehouse.spark, user, sql, locations),
    )


# 5. writes: copy-out of masked or hidden data (planning only: nothing is written) -----------

WRITES = [
    Case("update-set-from-masked", "erin", "UPDATE main.sales.customers SET name = email", DENIED),
    Case(
        "update-set-from-masked-expr",
        "erin",
        "UPDATE main.sales.customers SET name = upper(phone) WHERE id = 1",
        DENIED,
    ),
    Case(
        "update-set-from-masked-qualified",
        "erin",
        "UPDATE main.sales.customers c SET c.name = c.email",
        DENIED,
    ),
    Case("update-set-masked-ssn", "erin", "UPDATE main.sales.customers SET country = ssn", DENIED),
    Case(
        "update-where-on-masked",
        "erin",
        "UPDATE main.sales.customers SET name = 'x' WHERE email LIKE 'anna%'",
        DENIED,
    ),
    Case(
        "delete-where-on-masked",
        "erin",
        "DELETE FROM main.sales.customers WHERE email = 'anna@example.de'",
        DENIED,
    ),
    Case(
        "update-set-scalar-subquery-masked",
        "erin",
        "UPDATE main.sales.customers SET name = (SELECT max(email) FROM main.sales.customers)",
        DENIED,
    ),
    Case(
        "update-other-table-from-masked",
        "alice",
        "UPDATE main.sales.orders SET region = (SELECT max(email) FROM main.sales.customers)",
        DENIED,
    ),
    Case(
        "update-where-in-masked",
        "alice",
        "UPDATE main.sales.orders SET region = 'x' WHERE customer_id IN "
        "(SELECT id FROM main.sales.customers WHERE email LIKE 'a%')",
        DENIED,
    ),
    Case(
        "update-from-denied-column",
        "alice",
        "UPDATE main.sales.orders SET region = (SELECT max(ssn) FROM main.sales.customers)",
        DENIED,
    ),
    Case(
        "insert-select-masked",
        "alice",
        "INSERT INTO main.sales.orders (id, region) SELECT id, email FROM main.sales.customers",
        DENIED,
    ),
    Case(
        "insert-select-masked-lateral",
        "alice",
        "INSERT INTO main.sales.orders (id, region) SELECT c.id, x.e FROM "
        "main.sales.customers c LATERAL VIEW explode(array(c.email)) x AS e",
        DENIED,
    ),
    Case(
        "insert-select-star-masked",
        "erin",
        "INSERT INTO main.sales.customers SELECT * FROM main.sales.customers",
        DENIED,
    ),
    Case(
        "insert-cte-masked",
        "alice",
        "INSERT INTO main.sales.orders (id, region) WITH c AS (SELECT id, phone FROM "
        "main.sales.customers) SELECT * FROM c",
        DENIED,
    ),
    Case(
        "merge-set-from-masked",
        "alice",
        "MERGE INTO main.sales.orders o USING main.sales.customers c ON o.customer_id = c.id "
        "WHEN MATCHED THEN UPDATE SET region = c.phone",
        DENIED,
    ),
    Case(
        "merge-on-masked",
        "alice",
        "MERGE INTO main.sales.orders o USING main.sales.customers c ON o.customer_id = c.id "
        "AND c.email LIKE 'a%' WHEN MATCHED THEN UPDATE SET region = 'x'",
        DENIED,
    ),
    Case(
        "merge-self-masked",
        "erin",
        "MERGE INTO main.sales.customers t USING (SELECT id, email FROM main.sales.customers) "
        "s ON t.id = s.id WHEN MATCHED THEN UPDATE SET name = s.email",
        DENIED,
    ),
    Case(
        "update-no-modify-privilege", "alice", "UPDATE main.sales.customers SET name = 'x'", DENIED
    ),
    Case("delete-no-modify-privilege", "frank", "DELETE FROM main.sales.orders", DENIED),
    Case(
        "insert-overwrite-under-filter",
        "carol",
        "INSERT OVERWRITE main.sales.orders (id) VALUES (1)",
        DENIED,
    ),
    Case(
        "insert-no-column-list-hidden",
        "alice",
        "INSERT INTO main.sales.customers VALUES (9, 'x', 'x', 'x', 'x', 'x')",
        DENIED,
    ),
    Case(
        "ctas-path",
        "erin",
        "CREATE TABLE delta.`/tmp/lakegate-leak` AS SELECT * FROM main.sales.customers",
        BLOCKED,
    ),
    Case("drop-without-manage", "alice", "DROP TABLE main.sales.orders", DENIED),
    Case(
        "update-set-star",
        "alice",
        "MERGE INTO main.sales.orders o USING main.sales.orders s "
        "ON o.id = s.id WHEN MATCHED THEN UPDATE SET *",
        BLOCKED,
    ),
]


@pytest.mark.parametrize("case", params(WRITES))
def test_writes_copy_out(lakehouse, locations, case: Case) -> None:
    plan_only(lakehouse, case.user, _substitute(case.sql, locations), case.expect)


# 6. robustness --------------------------------------------------------------------------------


def _nest(depth: int) -> str:
    return "SELECT " + "(" * depth + "1" + ")" * depth


def _cte_chain(n: int) -> str:
    return (
        "WITH c0 AS (SELECT email FROM main.sales.customers), "
        + ", ".join(f"c{i} AS (SELECT * FROM c{i - 1})" for i in range(1, n))
        + f" SELECT * FROM c{n - 1}"
    )


ROBUSTNESS: list[tuple[str, str, Any, str | bytes]] = [
    # (id, user, expectation, statement)
    ("multi-statement", "frank", REFUSED, "SELECT 1; DROP TABLE main.sales.orders"),
    ("multi-statement-select", "alice", REFUSED, "SELECT 1; SELECT * FROM delta.`@LOC_customers@`"),
    ("multi-statement-no-space", "alice", REFUSED, "SELECT 1;SELECT 2"),
    (
        "multi-statement-after-comment",
        "alice",
        REFUSED,
        "SELECT 1 -- x\n; SELECT ssn FROM main.sales.customers",
    ),
    ("only-semicolons", "alice", BLOCKED, ";;"),
    ("trailing-semicolon", "carol", ids(CAROL_ORDERS), "SELECT id FROM main.sales.orders;"),
    ("empty", "alice", BLOCKED, ""),
    ("whitespace", "alice", BLOCKED, " \n\t "),
    ("comment-only", "alice", BLOCKED, "-- nothing"),
    ("block-comment-only", "alice", BLOCKED, "/* nothing */"),
    ("unterminated-comment", "alice", BLOCKED, "SELECT 1 /* x"),
    ("unterminated-string", "alice", BLOCKED, "SELECT 'abc FROM main.sales.customers"),
    ("unterminated-backtick", "alice", BLOCKED, "SELECT * FROM `main.sales.customers"),
    # comments in odd places
    (
        "comments-between-name-parts",
        "carol",
        ids(CAROL_ORDERS),
        "SELECT id FROM main/*x*/./*y*/sales/**/.orders",
    ),
    (
        "comments-everywhere",
        "carol",
        ids(CAROL_ORDERS),
        "/*a*/SELECT/*b*/id/*c*/FROM/*d*/main.sales.orders/*e*/--f",
    ),
    (
        "comment-hides-path",
        "alice",
        all_hashed(0),
        "SELECT email FROM main.sales.customers /* JOIN delta.`@LOC_customers@` */",
    ),
    (
        "line-comment-with-block-close",
        "alice",
        SAFE,
        "SELECT 1 AS x -- */ , (SELECT max(ssn) FROM main.sales.customers) AS y /*\n"
        "FROM main.sales.orders",
    ),
    (
        "line-comment-close-then-path",
        "alice",
        SAFE,
        "SELECT id -- */ FROM delta.`@LOC_customers@` /*\nFROM main.sales.orders",
    ),
    (
        "nested-block-comments",
        "alice",
        SAFE,
        "SELECT /* /* */ email FROM delta.`@LOC_customers@` -- */ FROM main.sales.customers",
    ),
    (
        "nested-block-comments-2",
        "alice",
        SAFE,
        "SELECT 1 /* a /* b */ c */ FROM main.sales.customers",
    ),
    (
        "carriage-return-ends-comment",
        "alice",
        SAFE,
        "SELECT 1 -- c\r, (SELECT max(ssn) FROM main.sales.customers)\n",
    ),
    ("carriage-return-path", "alice", SAFE, "SELECT 1 -- c\r FROM delta.`@LOC_customers@`\n"),
    ("hint-like-comment", "alice", SAFE, "SELECT /*+ x */ 1 /*+ REPARTITION(3) */"),
    ("comment-inside-at-version", "alice", BLOCKED, "SELECT * FROM main.sales.orders/**/@v1"),
    (
        "string-with-comment-markers",
        "alice",
        SAFE,
        "SELECT '/*', email, '*/' FROM main.sales.customers",
    ),
    (
        "backslash-quote-string",
        "alice",
        SAFE,
        "SELECT 'a\\' FROM main.sales.orders --', ssn FROM main.sales.customers",
    ),
    (
        "double-quoted-string-with-quote",
        "alice",
        SAFE,
        'SELECT "a\' FROM delta.`@LOC_customers@` --", email FROM main.sales.customers',
    ),
    (
        "unicode-escape-quote",
        "alice",
        SAFE,
        "SELECT '\\u0027 FROM delta.`@LOC_customers@` --', email FROM main.sales.customers",
    ),
    ("raw-string", "alice", SAFE, "SELECT r'\\' , email FROM main.sales.customers"),
    ("dollar-quote", "alice", SAFE, "SELECT $$x$$"),
    # deep nesting: thousands of levels
    ("nesting-2000-parens", "alice", BLOCKED, _nest(2000)),
    ("nesting-10000-parens", "alice", BLOCKED, _nest(10_000)),
    (
        "nesting-2000-subqueries",
        "alice",
        BLOCKED,
        "SELECT * FROM " + "(SELECT * FROM " * 2000 + "main.sales.customers" + ")" * 2000,
    ),
    (
        "nesting-10000-subqueries",
        "alice",
        BLOCKED,
        "SELECT * FROM " + "(SELECT * FROM " * 10_000 + "main.sales.customers" + ")" * 10_000,
    ),
    (
        "nesting-2000-scalar-subqueries",
        "alice",
        BLOCKED,
        "SELECT " + "(SELECT " * 2000 + "1" + ")" * 2000,
    ),
    ("nesting-60-ctes", "alice", all_hashed(0), _cte_chain(60)),
    ("nesting-2000-not", "alice", BLOCKED, "SELECT " + "NOT " * 2000 + "true"),
    ("nesting-10000-not", "alice", BLOCKED, "SELECT " + "NOT " * 10_000 + "true"),
    (
        "nesting-2000-case",
        "alice",
        BLOCKED,
        "SELECT " + "CASE WHEN true THEN " * 2000 + "1" + " END" * 2000,
    ),
    ("nesting-2000-unary-minus", "alice", BLOCKED, "SELECT " + "- " * 2000 + "1"),
    ("nesting-10000-brackets", "alice", BLOCKED, "SELECT " + "array(" * 10_000 + ")" * 10_000),
    ("long-plus-chain", "alice", BLOCKED, "SELECT " + "+".join(["1"] * 20_000)),
    (
        "long-and-chain-4000-columns",
        "carol",
        BLOCKED,
        "SELECT id FROM main.sales.customers WHERE "
        + " AND ".join(f"length(name) > -{i}" for i in range(4_000)),
    ),
    (
        "long-and-chain",
        "alice",
        SAFE,
        "SELECT count(*) FROM main.sales.orders WHERE " + " AND ".join(["true"] * 5_000),
    ),
    (
        "long-union-chain",
        "carol",
        ids(CAROL_ORDERS),
        " UNION ALL ".join(["SELECT id FROM main.sales.orders"] * 12),
    ),
    # very long statements
    ("statement-2mb-literal", "alice", BLOCKED, "SELECT '" + "a" * 2_000_000 + "'"),
    (
        "statement-2mb-whitespace",
        "alice",
        BLOCKED,
        "SELECT email" + " " * 2_000_000 + "FROM main.sales.customers",
    ),
    (
        "statement-2mb-comment",
        "alice",
        BLOCKED,
        "SELECT email /*" + "x" * 2_000_000 + "*/ FROM delta.`@LOC_customers@`",
    ),
    (
        "statement-2mb-in-list",
        "alice",
        BLOCKED,
        "SELECT * FROM main.sales.customers WHERE id IN (" + ",".join(["1"] * 1_000_000) + ")",
    ),
    (
        "statement-900kb-literal",
        "alice",
        lambda rows: rows == [(900_000,)],
        "SELECT length('" + "a" * 900_000 + "')",
    ),
    (
        "statement-long-in-list",
        "carol",
        ids({1}),
        "SELECT id FROM main.sales.orders WHERE id IN (" + ",".join(["1"] * 5_000) + ")",
    ),
    # invalid UTF-8, NUL, surrogates
    ("invalid-utf8", "alice", BLOCKED, b"SELECT '\xff\xfe' FROM main.sales.orders"),
    ("invalid-utf8-in-name", "alice", BLOCKED, b"SELECT * FROM main.sales.ord\xc3ers"),
    ("overlong-utf8", "alice", BLOCKED, b"SELECT '\xc0\xa7' FROM main.sales.orders"),
    (
        "utf8-bytes-valid",
        "carol",
        ids(CAROL_ORDERS),
        "SELECT id, 'Grüße' FROM main.sales.orders".encode(),
    ),
    ("nul-char", "frank", BLOCKED, "SELECT 1\x00; DROP TABLE main.sales.orders"),
    ("nul-byte", "alice", BLOCKED, b"SELECT 1 \x00"),
    ("nul-in-identifier", "alice", BLOCKED, "SELECT * FROM `main\x00`.sales.customers"),
    ("nul-in-string", "alice", BLOCKED, "SELECT 'a\x00b'"),
    ("bom", "alice", SAFE, "\ufeffSELECT 1"),
    ("not-a-string", "alice", BLOCKED, 42),
    ("none", "alice", BLOCKED, None),
    # unicode look-alike names resolve to nothing, never to the real table
    ("cyrillic-o-in-orders", "alice", DENIED, "SELECT * FROM main.sales.\u043erders"),
    ("cyrillic-a-in-main", "alice", DENIED, "SELECT * FROM m\u0430in.sales.orders"),
    ("cyrillic-backticked", "alice", DENIED, "SELECT * FROM `main`.`sales`.`\u043erders`"),
    ("fullwidth-letter", "alice", DENIED, "SELECT * FROM main.sales.\uff4frders"),
    ("zero-width-space", "alice", DENIED, "SELECT * FROM main.sales.or\u200bders"),
    ("right-to-left-override", "alice", DENIED, "SELECT * FROM main.sales.orders\u202e"),
    ("combining-mark", "alice", DENIED, "SELECT * FROM main.sales.orde\u0301rs"),
    ("cyrillic-s-in-ssn", "alice", BLOCKED, "SELECT \u0455sn FROM main.sales.customers"),
    ("turkish-dotless-i", "alice", BLOCKED, "SELECT \u0131d FROM main.sales.customers"),
    ("kelvin-sign-in-name", "alice", DENIED, "SELECT * FROM main.mar\u212aeting.campaigns"),
    ("unicode-whitespace", "carol", SAFE, "SELECT\u00a0id\u2028FROM main.sales.orders"),
]


@pytest.mark.parametrize(
    ("user", "expect", "sql"),
    [
        pytest.param(
            u,
            e,
            s,
            id=i,
            marks=[pytest.mark.xfail(reason=KNOWN_BUGS[i], strict=True)] if i in KNOWN_BUGS else [],
        )
        for i, u, e, s in ROBUSTNESS
    ],
)
def test_robustness(lakehouse, locations, user: str, expect: Any, sql: Any) -> None:
    if isinstance(sql, str):
        sql = _substitute(sql, locations)
    text = sql if isinstance(sql, str) else None
    check_outcome(
        lakehouse.session(user),
        user,
        sql,
        expect,
        strict=True,
        reference=None
        if text is None
        else lambda: oracle.expected(lakehouse.spark, user, text, locations),
    )


def test_robustness_lone_surrogate_is_a_clear_error(lakehouse) -> None:
    with pytest.raises(SqlParseError):
        lakehouse.session("alice").sql("SELECT '\ud800' FROM main.sales.orders")


def test_robustness_lone_surrogate_never_runs(lakehouse) -> None:
    """Whatever the error, a surrogate never reaches Spark."""
    with pytest.raises(SqlParseError) as e:
        lakehouse.session("alice").sql("SELECT '\udcff'")
    assert "Py4J" not in type(e.value).__name__


def test_robustness_deep_cte_chains_are_planned_or_refused(lakehouse) -> None:
    """Thousands of chained CTEs (not parenthesised, so not caught by the nesting limit):
    the planner answers quickly with one governed view or a clear refusal. Only planned
    here: Spark spends ~30 s analysing a 2,000-CTE chain before failing (see the report)."""
    s = lakehouse.session("alice")
    for n in (2_000, 10_000):
        try:
            sql = s.explain(_cte_chain(n))
        except LakegateError:
            continue
        assert sql.count("delta.`") == 1 and "sha2(" in sql


def test_robustness_no_partial_execution(lakehouse) -> None:
    """A refused multi-statement call ran nothing: the tables are all still there."""
    before = sorted(t.full_name for t in lakehouse.catalog.tables())
    for stmt in (
        "SELECT 1; DROP TABLE main.sales.orders",
        "DROP TABLE main.sales.orders; SELECT 1",
        "SELECT 1\x00; DROP TABLE main.sales.orders",
    ):
        with pytest.raises(LakegateError):
            lakehouse.session("root").explain(stmt)
    assert sorted(t.full_name for t in lakehouse.catalog.tables()) == before
    n = lakehouse.session("root").sql("SELECT count(*) FROM main.sales.orders").collect()
    assert n[0][0] == 8


def test_robustness_session_survives(lakehouse) -> None:
    """After the hostile inputs, Spark and the session still answer correctly."""
    s = lakehouse.session("carol")
    for bad in (_nest(10_000), "SELECT " + "NOT " * 2000 + "true", b"\xff", "x" * 2_000_000):
        with pytest.raises(LakegateError):
            s.sql(bad)
    assert {r[0] for r in s.sql("SELECT id FROM main.sales.orders").collect()} == CAROL_ORDERS
