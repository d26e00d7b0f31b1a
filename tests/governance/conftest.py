"""A catalog and planner with no Spark: the rewrite path must run without a JVM."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from catalog.catalog import Catalog
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore
from governance.plan import Planner
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir
from governance.resolve import Namespace
from governance.rewrite import PolicySql

POLICIES = Path(__file__).resolve().parents[2] / "policies"

TABLES = {
    "main.sales.orders": [("id", "int"), ("customer_id", "int"), ("region", "string"),
                          ("amount", "decimal(10,2)"), ("order_date", "date"),
                          ("is_test", "boolean")],
    "main.sales.customers": [("id", "int"), ("name", "string"), ("email", "string"),
                             ("phone", "string"), ("ssn", "string"), ("country", "string")],
    "main.hr.employees": [("id", "int"), ("name", "string"), ("department", "string"),
                          ("salary", "double"), ("birth_date", "date")],
    "main.marketing.campaigns": [("id", "int"), ("name", "string"), ("budget", "double"),
                                 ("starts", "date")],
}


@pytest.fixture(scope="session")
def offline_catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    root = tmp_path_factory.mktemp("offline")
    cat = Catalog(SqliteStore(root / "catalog.db"), root / "warehouse")
    cat.create_catalog("main")
    for name, cols in TABLES.items():
        c, s, t = name.split(".")
        cat.create_schema(c, s, if_not_exists=True)
        cat.register_table(TableInfo(
            c, s, t, f"/wh/{c}/{s}/{t}",
            tuple(ColumnInfo(n, ty, position=i) for i, (n, ty) in enumerate(cols))))
    return cat


@pytest.fixture(scope="session")
def enforcer() -> PolicyEnforcer:
    return PolicyEnforcer(load_policy_dir(POLICIES))


@pytest.fixture(scope="session")
def planner(offline_catalog: Catalog, enforcer: PolicyEnforcer) -> Callable[..., Planner]:
    sql = PolicySql(enforcer)

    def make(user: str, catalog: str = "main", schema: str = "default") -> Planner:
        return Planner(catalog=offline_catalog, enforcer=enforcer, policy_sql=sql, user=user,
                       namespace=Namespace(catalog, schema))

    return make
