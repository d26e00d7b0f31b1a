"""Caches keyed by what they depend on (issue 11, item 6).

A governed view is cached per user and table *version*: re-registering a table (new
columns, new location) takes effect with the next statement, not at the next policy
reload. A SparkSession handed to Lakegate is checked once, not on every access.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlglot import exp

from catalog.catalog import Catalog
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore
from governance.planning.dispatch import Planner
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_text
from governance.rewrite.dynamic_views import PolicySql
from governance.session.governed import Lakegate
from governance.sql.resolve import Namespace
from governance.tools.demo import write_config
from governance.verify.plan import analysis_key

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: u-reads, principals: [u], privileges: [select], on: "c.s.*"}
column_masks:
  - {id: u-hash-b, on: c.s.t, columns: [b], mask: hash, principals: [u]}
row_filters:
  - {id: u-small, on: c.s.t, principals: [u], where: "id < 10"}
"""


def _info(location: str, *columns: tuple[str, str]) -> TableInfo:
    return TableInfo(
        "c",
        "s",
        "t",
        location,
        tuple(ColumnInfo(n, ty, position=i) for i, (n, ty) in enumerate(columns)),
    )


def _view_columns(sql: str) -> list[str]:
    """The output names of the governed view's projection in the generated SQL."""
    view = next(exp.maybe_parse(sql, dialect="spark").find_all(exp.Subquery)).this
    return [e.alias_or_name for e in view.expressions]


@pytest.fixture
def offline(tmp_path: Path) -> tuple[Catalog, PolicySql]:
    catalog = Catalog(SqliteStore(tmp_path / "catalog.db"), tmp_path / "warehouse")
    catalog.create_catalog("c")
    catalog.create_schema("c", "s")
    catalog.register_table(_info("/wh/c/s/t", ("id", "int"), ("a", "string")))
    enforcer = PolicyEnforcer(load_policy_text({"p.yaml": POLICIES}))
    return catalog, PolicySql(enforcer)


def _plan(catalog: Catalog, ps: PolicySql, sql: str) -> str:
    planned = Planner(
        catalog=catalog,
        enforcer=ps.enforcer,
        policy_sql=ps,
        user="u",
        namespace=Namespace("c", "s"),
    ).plan(sql)
    assert planned.sql is not None
    return planned.sql


@pytest.mark.parametrize(
    ("columns", "location", "expected"),
    [
        ((("id", "int"), ("a", "string"), ("b", "string")), "/wh/c/s/t", ["id", "a", "b"]),
        ((("id", "int"),), "/wh/c/s/t2", ["id"]),
    ],
    ids=["column-added", "column-dropped"],
)
def test_a_re_registered_table_is_read_through_its_new_view(
    offline, columns, location, expected
) -> None:
    catalog, ps = offline
    assert _view_columns(_plan(catalog, ps, "SELECT * FROM t")) == ["id", "a"]  # now cached
    catalog.register_table(_info(location, *columns), replace=True)
    sql = _plan(catalog, ps, "SELECT * FROM t")
    assert _view_columns(sql) == expected
    assert f"delta.`{location}`" in sql


def test_a_re_registered_table_gets_its_masks_on_new_columns(offline) -> None:
    catalog, ps = offline
    _plan(catalog, ps, "SELECT * FROM t")
    catalog.register_table(
        _info("/wh/c/s/t", ("id", "int"), ("a", "string"), ("b", "string")), replace=True
    )
    assert "sha2(CAST(`b` AS STRING), 256) AS `b`" in _plan(catalog, ps, "SELECT b FROM t")


def test_a_statement_is_planned_with_one_catalog_store_read(offline, monkeypatch) -> None:
    """The catalog's generation counter is read once per statement, not once per lookup
    (on PostgreSQL each read is a network round trip)."""
    catalog, ps = offline
    for name in ("t2", "t3"):
        catalog.register_table(
            TableInfo("c", "s", name, f"/wh/c/s/{name}", (ColumnInfo("id", "int"),))
        )
    reads: list[int] = []
    real = catalog.store.generation

    def counted() -> int:
        reads.append(1)
        return real()

    monkeypatch.setattr(catalog.store, "generation", counted)
    _plan(
        catalog,
        ps,
        "SELECT * FROM t JOIN c.s.t2 USING (id) JOIN s.t3 USING (id) "
        "WHERE id IN (SELECT id FROM t2)",
    )
    assert len(reads) == 1
    catalog.register_table(
        _info("/wh/c/s/t", ("id", "int"), ("a", "string"), ("b", "string")), replace=True
    )
    assert _view_columns(_plan(catalog, ps, "SELECT * FROM t")) == ["id", "a", "b"]


MAPPED = """
grants:
  - {id: m-reads, principals: [m], privileges: [select], on: "c.s.*"}
row_filters:
  - id: m-mapped
    on: c.s.t
    principals: [m]
    where: "id IN (SELECT id FROM c.acl.ids WHERE who = current_user())"
"""


def test_a_memoised_mapping_read_follows_the_mapping_table_re_registration(
    tmp_path: Path,
) -> None:
    """PolicySql memoises which mapping tables a table's policies read (per TableAccess,
    issue 14); the catalog entry behind each name is still looked up per statement, so a
    mapping table moved to a new location is read there at once."""
    catalog = Catalog(SqliteStore(tmp_path / "catalog.db"), tmp_path / "warehouse")
    catalog.create_catalog("c")
    for schema in ("s", "acl"):
        catalog.create_schema("c", schema)
    catalog.register_table(_info("/wh/c/s/t", ("id", "int"), ("a", "string")))
    ids = (ColumnInfo("id", "int", position=0), ColumnInfo("who", "string", position=1))
    catalog.register_table(TableInfo("c", "acl", "ids", "/wh/c/acl/ids", ids))
    ps = PolicySql(PolicyEnforcer(load_policy_text({"p.yaml": MAPPED})), catalog)

    def plan() -> str:
        sql = (
            Planner(
                catalog=catalog,
                enforcer=ps.enforcer,
                policy_sql=ps,
                user="m",
                namespace=Namespace("c", "s"),
            )
            .plan("SELECT a FROM t")
            .sql
        )
        assert sql is not None
        return sql

    assert "delta.`/wh/c/acl/ids`" in plan()
    assert "delta.`/wh/c/acl/ids`" in plan()  # served from the memo
    catalog.register_table(TableInfo("c", "acl", "ids", "/wh/c/acl/ids2", ids), replace=True)
    sql = plan()
    assert "delta.`/wh/c/acl/ids2`" in sql
    assert "delta.`/wh/c/acl/ids`" not in sql


# real Spark, real Delta --------------------------------------------------------------------


@pytest.fixture(scope="module")
def relake(spark, tmp_path_factory: pytest.TempPathFactory) -> Lakegate:
    root = tmp_path_factory.mktemp("reregister")
    src = root / "policy-src"
    src.mkdir()
    (src / "p.yaml").write_text(POLICIES)
    lg = Lakegate.open(write_config(root / "lh", src), spark=spark)
    admin = lg.session("admin")
    for stmt in (
        "CREATE CATALOG c",
        "CREATE SCHEMA c.s",
        "CREATE TABLE c.s.t (id INT, a STRING)",
        "INSERT INTO c.s.t VALUES (1, 'x'), (20, 'y')",
    ):
        admin.sql(stmt)
    yield lg
    lg.close()


def test_a_new_statement_costs_no_view_analysis_when_its_view_is_narrowed(
    relake, monkeypatch
) -> None:
    """A query naming fewer columns reads a narrowed view; the verifier cuts it from the
    whole view's cached analysis, so a new table version, not a new statement, is what
    costs Spark a view analysis (issue 14, item 2)."""
    admin = relake.session("admin")
    admin.sql("CREATE TABLE c.s.n (id INT, a STRING, b STRING)")
    admin.sql("INSERT INTO c.s.n VALUES (1, 'x', 'p'), (20, 'y', 'q')")
    u = relake.session("u")
    assert len(u.sql("SELECT * FROM c.s.n").collect()) == 2  # the whole view, analysed
    analysed: list[str] = []
    real = relake.analyze_view

    def counted(sql: str, fresh: bool = False) -> object:
        if fresh or analysis_key(sql) not in relake._view_plans:
            analysed.append(sql)
        return real(sql, fresh)

    monkeypatch.setattr(relake, "analyze_view", counted)
    for sql, rows in (
        ("SELECT a FROM c.s.n ORDER BY a", [("x",), ("y",)]),
        ("SELECT b, id FROM c.s.n WHERE id > 1", [("q", 20)]),
        ("SELECT count(*) FROM c.s.n", [(2,)]),
    ):
        assert [tuple(r) for r in u.sql(sql).collect()] == rows
        assert "`a`, `b`" not in (u.last_planned.sql or "")  # narrowed
    assert analysed == []


def test_a_re_registered_delta_table_is_read_with_its_new_columns(relake, spark, tmp_path) -> None:
    u = relake.session("u")
    assert u.sql("SELECT * FROM c.s.t").collect() == [(1, "x")]  # the view is cached now
    path = tmp_path / "t2"
    spark.createDataFrame(
        [(1, "x", "secret"), (20, "y", "other")], "id INT, a STRING, b STRING"
    ).write.format("delta").save(str(path))
    relake.register_table("c.s.t", str(path), replace=True)
    rows = u.sql("SELECT id, a, b FROM c.s.t").collect()
    assert [(r.id, r.a) for r in rows] == [(1, "x")]
    assert rows[0].b not in (None, "secret")  # masked (hash), never the clear value


def test_a_handed_in_spark_session_is_checked_once(spark, tmp_path, monkeypatch) -> None:
    import governance.runtime.spark

    calls: list[object] = []
    real = governance.runtime.spark.check_spark

    def counted(session: object) -> None:
        calls.append(session)
        real(session)  # type: ignore[arg-type]

    monkeypatch.setattr(governance.runtime.spark, "check_spark", counted)
    src = tmp_path / "policy-src"
    src.mkdir()
    (src / "p.yaml").write_text(POLICIES)
    lg = Lakegate.open(write_config(tmp_path / "lh", src), spark=spark)
    try:
        for _ in range(3):
            assert lg.spark is spark
        lg.session("admin").sql("SHOW CATALOGS").collect()
        lg.session("admin").sql("SELECT 1").collect()
    finally:
        lg.close()
    assert calls == [spark]
