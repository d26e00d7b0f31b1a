"""A catalog and planner with no Spark: the rewrite path must run without a JVM."""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from catalog.catalog import Catalog
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore
from governance.planning.dispatch import Planner
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir
from governance.rewrite.dynamic_views import PolicySql
from governance.sql.resolve import Namespace

if TYPE_CHECKING:
    from governance.session.governed import Lakegate

POLICIES = Path(__file__).resolve().parents[2] / "policies"

TABLES = {
    "main.sales.orders": [
        ("id", "int"),
        ("customer_id", "int"),
        ("region", "string"),
        ("amount", "decimal(10,2)"),
        ("order_date", "date"),
        ("is_test", "boolean"),
    ],
    "main.sales.customers": [
        ("id", "int"),
        ("name", "string"),
        ("email", "string"),
        ("phone", "string"),
        ("ssn", "string"),
        ("country", "string"),
    ],
    "main.hr.employees": [
        ("id", "int"),
        ("name", "string"),
        ("department", "string"),
        ("salary", "double"),
        ("birth_date", "date"),
    ],
    "main.marketing.campaigns": [
        ("id", "int"),
        ("name", "string"),
        ("budget", "double"),
        ("starts", "date"),
    ],
}


@pytest.fixture(scope="session")
def offline_catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    root = tmp_path_factory.mktemp("offline")
    cat = Catalog(SqliteStore(root / "catalog.db"), root / "warehouse")
    cat.create_catalog("main")
    for name, cols in TABLES.items():
        c, s, t = name.split(".")
        cat.create_schema(c, s, if_not_exists=True)
        cat.register_table(
            TableInfo(
                c,
                s,
                t,
                f"/wh/{c}/{s}/{t}",
                tuple(ColumnInfo(n, ty, position=i) for i, (n, ty) in enumerate(cols)),
            )
        )
    return cat


@pytest.fixture(scope="session")
def enforcer() -> PolicyEnforcer:
    return PolicyEnforcer(load_policy_dir(POLICIES))


@pytest.fixture(scope="session")
def planner(offline_catalog: Catalog, enforcer: PolicyEnforcer) -> Callable[..., Planner]:
    sql = PolicySql(enforcer)

    def make(user: str, catalog: str = "main", schema: str = "default") -> Planner:
        return Planner(
            catalog=offline_catalog,
            enforcer=enforcer,
            policy_sql=sql,
            user=user,
            namespace=Namespace(catalog, schema),
        )

    return make


# Private lakehouses for the Spark tests that need their own tables and policies ------------

LakegateFactory = Callable[..., "Lakegate"]


@pytest.fixture(scope="session")
def make_lakegate(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakegateFactory]:
    """Build a Lakegate with its own policies and warehouse on the shared SparkSession.

    `make(name, policies_yaml, setup_statements, admin="admin")` writes the YAML into a fresh
    policy directory, opens the lakehouse and runs `setup_statements` as `admin` through the
    governed session (so the policies must grant `admin` manage on what it creates).
    """
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    opened: list[Lakegate] = []

    def make(name: str, policies: str, setup: Sequence[str] = (), admin: str = "admin") -> Lakegate:
        root = tmp_path_factory.mktemp(name)
        src = root / "policy-src"
        src.mkdir()
        (src / "policies.yaml").write_text(textwrap.dedent(policies))
        lg = Lakegate.open(write_config(root / "lakehouse", policies=src), spark=spark)
        opened.append(lg)
        session = lg.session(admin)
        for stmt in setup:
            session.sql(stmt)
        return lg

    yield make
    for lg in opened:
        lg.close()


# One table with a column of every type the masks need, read-only after setup; the users
# u_<mask> each get one built-in mask on several columns, the f* users get row filters.
TYPED_POLICIES = """
groups:
  admins: [admin]
  fgroup-a: [fa, fab, fabr]
  fgroup-b: [fab, fabr]
  fgroup-r: [fabr, fr]
  vip: [vip1]
grants:
  - id: admin-all
    principals: [group:admins]
    privileges: [manage]
    on: "*.*.*"
  - id: everyone-reads
    principals: ["*"]
    privileges: [select]
    on: m.s.t
row_filters:
  - {id: f-a, on: m.s.t, principals: [group:fgroup-a], where: "id IN (1, 2)"}
  - {id: f-b, on: m.s.t, principals: [group:fgroup-b], where: "id IN (2, 3, 4)"}
  - {id: f-r, on: m.s.t, principals: [group:fgroup-r], where: "id <> 2", kind: restrictive}
  - {id: f-real-email, on: m.s.t, principals: [fe], where: "e LIKE '%.de'"}
  - {id: f-me, on: m.s.t, principals: [abc], where: "s = current_user()"}
  - id: f-vip
    on: m.s.t
    principals: [vip1, novip]
    where: "is_member('vip') OR is_account_group_member('vip') OR id = 1"
    kind: restrictive
column_masks:
  - {id: u-redact, on: m.s.t, columns: [s, n, d, ts], mask: redact, principals: [u_redact]}
  - {id: u-null, on: m.s.t, columns: [s, n, d, ts], mask: "null", principals: [u_null]}
  - {id: u-hash, on: m.s.t, columns: [s, n, d, ts, e], mask: hash, principals: [u_hash, fe]}
  - {id: u-last4, on: m.s.t, columns: [s, n, code], mask: last4, principals: [u_last4]}
  - {id: u-first4, on: m.s.t, columns: [s, n, code], mask: first4, principals: [u_first4]}
  - {id: u-email, on: m.s.t, columns: [e], mask: email_domain, principals: [u_email]}
  - {id: u-year, on: m.s.t, columns: [d, ts], mask: year, principals: [u_year]}
  - id: u-custom
    on: m.s.t
    columns: [s, n]
    mask: custom
    expression: "concat('<', upper({col}), '|', current_user(), '>')"
    principals: [u_custom]
"""

TYPED_ROWS = [
    (
        1,
        "hello world",
        123456,
        dt.date(2024, 7, 15),
        dt.datetime(2024, 7, 15, 13, 45, 30),
        "anna@example.de",
        "abcdefgh",
    ),
    (
        2,
        "abc",
        -7,
        dt.date(1999, 12, 31),
        dt.datetime(1999, 12, 31, 23, 59, 59),
        "x@y@z.org",
        "abc",
    ),
    (3, None, None, None, None, None, None),
    (4, "Grüße", 0, dt.date(2000, 2, 29), dt.datetime(2000, 2, 29, 0, 0, 0), "no-at-sign", "abcd"),
    (5, "", 42, dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 0), "@", "abcde"),
]
TYPED_COLUMNS = ("id", "s", "n", "d", "ts", "e", "code")


def _sql_literal(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP'{v:%Y-%m-%d %H:%M:%S}'"
    if isinstance(v, dt.date):
        return f"DATE'{v:%Y-%m-%d}'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


@pytest.fixture(scope="session")
def typed_lakehouse(make_lakegate: LakegateFactory) -> Lakegate:
    """`m.s.t` holding TYPED_ROWS under TYPED_POLICIES (read-only: do not write to it)."""
    values = ", ".join("(" + ", ".join(_sql_literal(v) for v in row) + ")" for row in TYPED_ROWS)
    return make_lakegate(
        "typed",
        TYPED_POLICIES,
        [
            "CREATE CATALOG m",
            "CREATE SCHEMA m.s",
            "CREATE TABLE m.s.t (id INT, s STRING, n INT, d DATE, ts TIMESTAMP, e STRING, "
            "code STRING)",
            f"INSERT INTO m.s.t VALUES {values}",
        ],
    )


@pytest.fixture(scope="session")
def typed_rows() -> list[tuple]:
    """The rows of `m.s.t` in `typed_lakehouse`, as Python values (columns TYPED_COLUMNS)."""
    return list(TYPED_ROWS)
