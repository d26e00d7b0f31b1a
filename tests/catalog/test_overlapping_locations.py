"""One location, one table (issue 25, item 2): a registration or CREATE whose location
equals, contains or lies inside another registered table's location is refused, in every
entry point (the catalog and its store, Python `register_table`, the CLI, SQL CREATE
TABLE; REST statements run the same planner as SQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.catalog import Catalog, CatalogError
from catalog.locations import location_parts
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore
from governance.errors import Refused

COLS = (ColumnInfo("id", "int"),)


def _info(name: str, location: str) -> TableInfo:
    c, s, t = name.split(".")
    return TableInfo(c, s, t, location, COLS)


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    cat = Catalog(SqliteStore(tmp_path / "catalog.db"), tmp_path / "warehouse")
    cat.create_catalog("main")
    for s in ("sales", "ops"):
        cat.create_schema("main", s)
    data = tmp_path / "data"
    (data / "customers").mkdir(parents=True)
    cat.register_table(_info("main.sales.customers", str(data / "customers")))
    return cat


def _data(catalog: Catalog) -> Path:
    return catalog.warehouse.parent / "data"


@pytest.mark.parametrize(
    ("spelling", "how"),
    [
        ("{d}/customers", "equals"),
        ("{d}/customers/", "equals"),
        ("{d}/customers//", "equals"),
        ("file:{d}/customers", "equals"),
        ("file://{d}/customers/", "equals"),
        ("{d}/other/../customers", "equals"),
        ("{d}/./customers", "equals"),
        ("{d}/link-to-customers", "equals"),  # a symlink to the table's directory
        ("{d}/customers/part", "lies inside"),
        ("{d}/link-to-customers/part", "lies inside"),
        ("{d}", "contains"),
        ("file:{d}/", "contains"),
    ],
)
def test_registration_overlapping_a_registered_location_is_refused(
    catalog: Catalog, spelling: str, how: str
) -> None:
    d = _data(catalog)
    (d / "other").mkdir(exist_ok=True)
    link = d / "link-to-customers"
    if not link.exists():
        link.symlink_to(d / "customers", target_is_directory=True)
    location = spelling.format(d=d)
    with pytest.raises(CatalogError) as e:
        catalog.register_table(_info("main.ops.customers_mirror", location))
    assert str(e.value) == (
        f"table main.ops.customers_mirror: location {location} {how} the location of another "
        "registered table; one location holds one table"
    )
    assert catalog.table("main", "ops", "customers_mirror") is None


@pytest.mark.parametrize(
    "spelling",
    [
        "{d}/customers2",  # a sibling sharing a name prefix is another directory
        "{d}/custome",
        "{d}/\uff43ustomers",  # a fullwidth look-alike is another path
        "{d}/other/\uff0e\uff0e/customers",  # fullwidth dots are a name, never `..`
        "{d}/other\uff0f..\uff0fcustomers",  # a fullwidth solidus is no separator
    ],
)
def test_look_alike_and_sibling_locations_are_other_places(catalog: Catalog, spelling: str) -> None:
    location = spelling.format(d=_data(catalog))
    stored = catalog.register_table(_info("main.ops.customers_mirror", location))
    assert stored.location == location


def test_re_registering_a_table_at_its_own_location_is_allowed(catalog: Catalog) -> None:
    loc = str(_data(catalog) / "customers")
    stored = catalog.register_table(_info("main.sales.customers", loc + "/"), replace=True)
    assert stored.location == loc + "/"


@pytest.mark.parametrize(
    ("registered", "new"),
    [
        ("s3://Bucket/lake/customers", "s3://bucket/lake/customers/"),
        ("s3://bucket/lake/customers", "S3://BUCKET/lake/customers/part"),
        ("abfss://c@acct.dfs.core.windows.net/lake/t", "abfss://c@acct.dfs.core.windows.net/lake"),
        ("s3://bucket/lake/x/../customers", "s3://bucket/lake/customers"),
    ],
)
def test_object_store_locations_overlap_by_bucket_and_key_path(
    catalog: Catalog, registered: str, new: str
) -> None:
    catalog.register_table(_info("main.sales.remote", registered))
    with pytest.raises(CatalogError, match="the location of another registered table"):
        catalog.register_table(_info("main.ops.remote_mirror", new))


def test_case_is_folded_only_where_the_filesystem_folds_it(tmp_path: Path) -> None:
    (tmp_path / "Data").mkdir()
    folds = (tmp_path / "data").exists()
    upper, lower = location_parts(str(tmp_path / "Data")), location_parts(str(tmp_path / "data"))
    assert (upper == lower) is folds


def test_store_checks_inside_its_write_transaction(catalog: Catalog) -> None:
    """The check runs in the registering transaction: a second Catalog on the same store
    (another process) cannot register over the same location either."""
    other = Catalog(SqliteStore(catalog.store.url.removeprefix("sqlite:///")), catalog.warehouse)
    with pytest.raises(CatalogError, match="equals the location of another"):
        other.register_table(_info("main.ops.m", str(_data(catalog) / "customers")))


# ---- entry points, on real Delta tables --------------------------------------------------

POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
"""


@pytest.fixture(scope="module")
def lg(spark, tmp_path_factory: pytest.TempPathFactory):
    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    root = tmp_path_factory.mktemp("overlap")
    src = root / "policies"
    src.mkdir()
    (src / "p.yaml").write_text(POLICIES)
    lg = Lakegate.open(write_config(root / "lh", src), spark=spark)
    admin = lg.session("admin")
    admin.sql("CREATE CATALOG main")
    admin.sql("CREATE SCHEMA main.sales")
    admin.sql("CREATE SCHEMA main.ops")
    admin.sql("CREATE TABLE main.sales.customers (id INT, email STRING)")
    yield lg
    lg.close()


def test_python_register_table_over_a_registered_location_is_refused_and_audited(lg) -> None:
    loc = lg.catalog.table("main", "sales", "customers").location
    with pytest.raises(CatalogError, match=r"equals the location of another registered table"):
        lg.register_table("main.ops.customers_mirror", loc + "/")
    assert lg.catalog.table("main", "ops", "customers_mirror") is None
    last = (lg.config.audit / "audit.log").read_text().splitlines()[-1]
    assert "cmd=registerTable" in last and "main.ops.customers_mirror" in last
    assert "succeeded=false" in last


def test_cli_register_over_a_registered_location_is_refused(lg, capsys) -> None:
    from cli import main

    loc = lg.catalog.table("main", "sales", "customers").location
    argv = ["--config", str(lg.config.path), "catalog", "register", "main.ops.mirror", loc]
    assert main(argv) == 2
    assert "equals the location of another registered table" in capsys.readouterr().err
    assert lg.catalog.table("main", "ops", "mirror") is None


def test_sql_create_table_inside_a_registered_location_is_refused_before_writing(
    lg, spark, tmp_path: Path
) -> None:
    """An external table registered over a schema's managed directory: CREATE TABLE in that
    schema would write into it, so it is refused before Spark writes a file."""
    schema_dir = Path(lg.catalog.warehouse) / "main" / "ops"
    spark.range(1).write.format("delta").save(str(schema_dir))
    lg.register_table("main.sales.ops_everything", str(schema_dir))
    try:
        with pytest.raises(Refused) as e:
            lg.session("admin").sql("CREATE TABLE main.ops.fresh (id INT)")
        assert str(e.value) == (
            f"CREATE TABLE main.ops.fresh refused: table main.ops.fresh: location "
            f"{schema_dir / 'fresh'} lies inside the location of another registered table; "
            "one location holds one table"
        )
        assert not (schema_dir / "fresh").exists()
    finally:
        lg.catalog.drop_table("main", "sales", "ops_everything")
