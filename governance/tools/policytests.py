"""`lakegate policy test`: policy test cases as YAML, run like a test suite.

A test file (by default under `<policies>/tests/`) declares fixture tables and cases:

    tables:
      main.sales.orders:
        columns: {id: int, region: string}
        rows: [[1, EMEA], [2, AMER]]          # used with --spark
    cases:
      - name: carol sees only EMEA orders
        user: carol
        groups: [emea-analysts]               # optional: what carol's token says
        sql: SELECT * FROM main.sales.orders
        expect:
          allowed: true
          visible: {main.sales.orders: [id, region]}
          masked: {main.sales.customers.email: hash}
          row_filters: {main.sales.orders: [emea-only]}
          row_count: 1                        # needs --spark
          rows: [[1, EMEA]]                   # needs --spark

Decisions, visible columns, masks and filters are checked without Spark through the same
planner the session uses; row expectations need `--spark` and run on real Delta tables.
`groups` are the policy groups the identity provider puts the user in for the case (after
the source's mapping, docs/identity.md), on top of what `groups:` in the policies says.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from catalog.catalog import Catalog
from catalog.model import ColumnInfo, TableInfo
from catalog.store import SqliteStore
from governance.config import Config, IdentityConfig
from governance.errors import AccessDenied
from governance.identity import IdpClaims, InvalidName, canonical_group
from governance.planning.dispatch import Planner
from governance.planning.planned import Planned
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir
from governance.rewrite.dynamic_views import PolicySql
from governance.sql.resolve import Namespace

_CASE_KEYS = {"name", "user", "sql", "expect", "namespace", "groups"}
_EXPECT_KEYS = {"allowed", "error", "visible", "masked", "row_filters", "row_count", "rows"}


@dataclass
class Case:
    file: str
    name: str
    user: str
    sql: str
    expect: dict[str, Any]
    namespace: tuple[str, str] = ("main", "default")
    groups: frozenset[str] = frozenset()  # the identity provider's groups of the user

    @property
    def needs_spark(self) -> bool:
        return "rows" in self.expect or "row_count" in self.expect


@dataclass
class Result:
    case: Case
    status: str  # passed | failed | skipped
    message: str = ""


@dataclass
class Suite:
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)


class PolicyTestError(Exception):
    """A test file is malformed."""


def load_suite(paths: list[Path]) -> Suite:
    suite = Suite()
    for path in paths:
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise PolicyTestError(f"{path}: expected a mapping with tables and cases")
        unknown = set(data) - {"tables", "cases"}
        if unknown:
            raise PolicyTestError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
        for name, spec in (data.get("tables") or {}).items():
            if name.lower() in suite.tables and suite.tables[name.lower()] != spec:
                raise PolicyTestError(f"{path}: table {name} declared differently elsewhere")
            suite.tables[name.lower()] = spec
        for i, raw in enumerate(data.get("cases") or []):
            if not isinstance(raw, dict) or not {"user", "sql"} <= set(raw):
                raise PolicyTestError(f"{path}: case {i + 1} needs user and sql")
            bad = set(raw) - _CASE_KEYS | set(raw.get("expect") or {}) - _EXPECT_KEYS
            if bad:
                raise PolicyTestError(
                    f"{path}: case {i + 1}: unknown key(s) {', '.join(sorted(bad))}"
                )
            ns = str(raw.get("namespace", "main.default")).split(".")
            groups = raw.get("groups") or []
            if not isinstance(groups, list):
                raise PolicyTestError(f"{path}: case {i + 1}: groups must be a list of names")
            try:
                provided = frozenset(canonical_group(g) for g in groups)
            except InvalidName as e:
                raise PolicyTestError(f"{path}: case {i + 1}: {e}") from None
            suite.cases.append(
                Case(
                    path.name,
                    str(raw.get("name", f"case {i + 1}")),
                    str(raw["user"]),
                    str(raw["sql"]),
                    dict(raw.get("expect") or {}),
                    (ns[0], ns[-1]),
                    provided,
                )
            )
    return suite


def _table_infos(suite: Suite, root: Path) -> list[TableInfo]:
    out = []
    for full, spec in suite.tables.items():
        c, s, t = full.split(".")
        cols = tuple(
            ColumnInfo(n, str(ty), position=i)
            for i, (n, ty) in enumerate((spec.get("columns") or {}).items())
        )
        out.append(TableInfo(c, s, t, str(root / c / s / t), cols))
    return out


def _check_plan(case: Case, planned: Planned | None, error: AccessDenied | None) -> list[str]:
    e = case.expect
    problems: list[str] = []
    allowed = error is None
    if "allowed" in e and bool(e["allowed"]) != allowed:
        problems.append(
            f"expected {'allowed' if e['allowed'] else 'denied'}, got "
            f"{'allowed' if allowed else 'denied: ' + str(error)}"
        )
    if "error" in e and (error is None or str(e["error"]) not in str(error)):
        problems.append(
            f"expected an error containing {e['error']!r}, got "
            f"{str(error) if error else 'no error'}"
        )
    if planned is None:
        return problems
    views = {v.access.table.full_name: v.access for v in planned.views}
    if planned.target is not None:
        views.setdefault(planned.target.table.full_name, planned.target)
    for table, cols in (e.get("visible") or {}).items():
        got = list(views[table.lower()].visible_columns) if table.lower() in views else None
        if got != list(cols):
            problems.append(f"visible columns of {table}: expected {cols}, got {got}")
    for col, mask in (e.get("masked") or {}).items():
        table, _, name = col.lower().rpartition(".")
        access = views.get(table)
        got = access.masks.get(name).mask.mask if access and access.masks.get(name) else None
        if got != (mask or None):
            problems.append(f"mask on {col}: expected {mask}, got {got}")
    for table, ids in (e.get("row_filters") or {}).items():
        access = views.get(table.lower())
        got = [f.id for f in access.row_filters] if access else None
        if got != list(ids):
            problems.append(f"row filters on {table}: expected {ids}, got {got}")
    return problems


def run_offline(
    policy_dir: Path, suite: Suite, identity: IdentityConfig | None = None
) -> dict[int, Result]:
    groups = None if identity is None else identity.provider_groups()
    enforcer = PolicyEnforcer(load_policy_dir(policy_dir, groups))
    sql = PolicySql(enforcer)
    results: dict[int, Result] = {}
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog(SqliteStore(Path(tmp) / "catalog.db"), Path(tmp) / "wh")
        for info in _table_infos(suite, Path(tmp) / "wh"):
            catalog.create_catalog(info.catalog, if_not_exists=True)
            catalog.create_schema(info.catalog, info.schema, if_not_exists=True)
            catalog.register_table(info)
        for i, case in enumerate(suite.cases):
            planned, error = None, None
            try:
                planned = Planner(
                    catalog=catalog,
                    enforcer=enforcer,
                    policy_sql=sql,
                    user=case.user,
                    namespace=Namespace(*case.namespace),
                    groups=case.groups,
                ).plan(case.sql)
            except AccessDenied as e:
                error = e
            except Exception as e:  # a broken case is a failure, not a crash of the run
                results[i] = Result(case, "failed", f"{type(e).__name__}: {e}")
                continue
            problems = _check_plan(case, planned, error)
            results[i] = Result(case, "failed" if problems else "passed", "; ".join(problems))
    return results


def run_spark(
    policy_dir: Path,
    suite: Suite,
    results: dict[int, Result],
    spark_log: Path | None = None,
    identity: IdentityConfig | None = None,
) -> None:
    """Row expectations on real Delta tables built from the fixtures; the JVM's console
    output goes to `spark_log` (the CLI's lakegate-spark.log), not to the terminal."""
    import shutil

    from governance.session.governed import Lakegate
    from governance.tools.demo import write_config

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = Config.load(write_config(root / "lh", policy_dir))
        if identity is not None:  # the policies may name the groups its sources send
            cfg = replace(cfg, identity=identity)
        lg = Lakegate.open(cfg, spark_log=spark_log)
        for info in _table_infos(suite, root / "data"):
            spec = suite.tables[info.full_name]
            schema = ", ".join(f"`{c.name}` {c.type_text}" for c in info.columns)
            types = [c.type_text for c in info.columns]
            rows = [
                tuple(_typed(v, t) for v, t in zip(r, types, strict=True))
                for r in spec.get("rows") or []
            ]
            lg.spark.createDataFrame(rows, schema).write.format("delta").save(info.location)
            lg.register_table(info.full_name, info.location)
        try:
            for i, case in enumerate(suite.cases):
                if not case.needs_spark or results[i].status == "failed":
                    continue
                results[i] = _run_rows(lg, case)
        finally:
            lg.close()
            shutil.rmtree(root, ignore_errors=True)


def _run_rows(lg: Any, case: Case) -> Result:
    try:
        s = lg.session(case.user, claims=IdpClaims(case.groups))
        s.namespace = Namespace(*case.namespace)
        rows = [list(r) for r in s.sql(case.sql).collect()]
    except AccessDenied as e:
        return Result(case, "failed", f"denied: {e}")
    e = case.expect
    problems = []
    if "row_count" in e and len(rows) != int(e["row_count"]):
        problems.append(f"row count: expected {e['row_count']}, got {len(rows)}")
    if "rows" in e:
        want = sorted(map(repr, [[_plain(v) for v in r] for r in e["rows"]]))
        got = sorted(map(repr, [[_plain(v) for v in r] for r in rows]))
        if want != got:
            problems.append(f"rows: expected {e['rows']}, got {rows}")
    return Result(case, "failed" if problems else "passed", "; ".join(problems))


def _typed(v: Any, type_text: str) -> Any:
    """YAML scalars to the Python values Spark's schema check wants."""
    import datetime
    from decimal import Decimal

    t = type_text.lower()
    if v is None:
        return None
    if t.startswith("decimal"):
        return Decimal(str(v))
    if t in ("double", "float"):
        return float(v)
    if t == "date" and isinstance(v, str):
        return datetime.date.fromisoformat(v)
    if t == "string":
        return str(v)
    return v


def _plain(v: Any) -> Any:
    """Compare decimals, dates and numbers by their text, as YAML writes them."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return str(v)


def run_tests(
    policy_dir: Path,
    test_paths: list[Path],
    *,
    spark: bool,
    spark_log: Path | None = None,
    identity: IdentityConfig | None = None,
) -> list[Result]:
    """`identity`: the configuration's `identity:` section, when one is at hand."""
    suite = load_suite(test_paths)
    results = run_offline(policy_dir, suite, identity)
    if spark:
        run_spark(policy_dir, suite, results, spark_log, identity)
    for i, case in enumerate(suite.cases):
        if case.needs_spark and not spark and results[i].status == "passed":
            results[i] = Result(
                case,
                "skipped",
                "row expectations need --spark "
                "(decisions, columns, masks and filters were checked)",
            )
    return [results[i] for i in range(len(suite.cases))]
