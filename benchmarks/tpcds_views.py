"""The hand-written baselines of the TPC-DS scenario, generated from the same policy set:

B   Databricks-style dynamic views: membership and user tests evaluated by Spark at query
    time (a lookup in a Delta membership table keyed by `current_user()`);
A'  the floor (issue 14): the same filters and masks written in by hand for the bench user
    alone, every "does this apply to me" test already answered, so Spark sees plain
    predicates and expressions, over the same DataFrames A reads (global temp views over
    A's temp views). C/A' is the cost of the governance layer itself, with policy
    evaluation on both sides; A'/A is what the policies themselves cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from benchmarks.tpcds_policies import BENCH_USER
from benchmarks.tpcds_tables import TABLES

CATALOG, SCHEMA = "tpcds", "sf1"
VIEW_DB = "lg_dynviews"  # where B's dynamic views live (spark_catalog)
FLOOR_DB = "global_temp"  # A''s hand-written views for the bench user: over A's DataFrames
MEMBERSHIP = "lg_membership"  # B's user -> group table (a Delta table)


def qualify(sql: str, db: str) -> str:
    """Point a query's TPC-DS table names at the views in `db` (A' and the probes).

    sqlglot reads Spark's `FROM a, b` as `a CROSS JOIN b`, and Spark skips dynamic
    partition pruning on an explicit cross join: written so, A' lost it on the partitioned
    `inventory` (q21, q22, q37, q39, q82) where A and C keep it (benchmarks/plan_parity.py
    found it). With no CROSS keyword in the text every such join came from a comma and is
    written back as one, as the governed session does (governance/sql/parse.py)."""
    tree = sqlglot.parse_one(sql, read="spark")
    if not any(t.token_type == TokenType.CROSS for t in sqlglot.tokenize(sql, read="spark")):
        for join in tree.find_all(exp.Join):
            bare = not join.args.get("on") and not join.args.get("using")
            if join.args.get("kind") == "CROSS" and bare:
                join.set("kind", None)
    for t in tree.find_all(exp.Table):
        if t.name.lower() in TABLES and not t.args.get("db"):
            if not t.alias:
                t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
            t.set("db", exp.to_identifier(db))
    return tree.sql("spark")


@dataclass
class DynamicViews:
    """B: Databricks-style dynamic views generated from the policy set; with root set,
    A': every membership and user test answered for the bench user (TRUE or FALSE)."""

    spark_user: str  # what Spark's current_user() returns
    membership_path: str
    user_alias: dict[str, str] = field(default_factory=dict)  # policy user -> spark user
    groups: frozenset[str] | None = None  # A': the bench user's groups, nesting resolved

    def member(self, group: str) -> str:
        if self.groups is not None:
            return "TRUE" if group.lower() in self.groups else "FALSE"
        g = group.lower().replace("'", "''")
        return (
            f"(SELECT count(1) > 0 FROM delta.`{self.membership_path}` "
            f"WHERE member = current_user() AND grp = '{g}')"
        )

    def principal_test(self, principals: tuple[Any, ...]) -> str:
        """SQL true when the current user is one of `principals`; 'TRUE' for '*'."""
        if self.groups is not None:  # A': answered now, as a person writing it would
            hit = any(
                p.kind == "any"
                or (p.kind == "user" and p.name == BENCH_USER)
                or (p.kind == "group" and p.name.lower() in self.groups)
                for p in principals
            )
            return "TRUE" if hit else "FALSE"
        tests: list[str] = []
        for p in principals:
            if p.kind == "any":
                return "TRUE"
            if p.kind == "user":
                name = self.user_alias.get(p.name, p.name).replace("'", "''")
                tests.append(f"current_user() = '{name}'")
            else:
                tests.append(self.member(p.name))
        if not tests:
            return "FALSE"
        return tests[0] if len(tests) == 1 else "(" + " OR ".join(tests) + ")"

    def expression(self, text: str) -> str:
        """A policy expression with is_member() as a membership lookup and policy user names
        as Spark user names (current_user() stays: Spark evaluates it at query time)."""
        tree = sqlglot.parse_one(text, read="spark")

        def fix(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Anonymous) and str(node.this).lower() in (
                "is_member",
                "is_account_group_member",
            ):
                arg = node.expressions[0]
                return sqlglot.parse_one(self.member(arg.name), read="spark")
            if isinstance(node, exp.Literal) and node.is_string and node.this in self.user_alias:
                return exp.Literal.string(self.user_alias[node.this])
            return node

        return tree.transform(fix).sql("spark")

    def view_sql(self, enforcer: Any, table: Any, source: str | None = None) -> str:
        """The view's SELECT over `source` (a view name), by default the Delta table's path."""
        from governance.policy.masks import mask_sql, quote_ident

        ps = enforcer.policy_set
        c, s, t = table.catalog, table.schema, table.name
        # Column grants are static in Databricks too (GRANT on the view): the view lists the
        # columns the bench user may read; masks and filters are decided at query time.
        visible = enforcer.table_access(enforcer.identity(BENCH_USER), table).visible_columns
        masks = [m for m in ps.column_masks if m.on.matches_table(c, s, t)]
        proj: list[str] = []
        for name in visible:
            col = table.column(name)
            low = name.lower()
            tags = ps.column_tags(c, s, t, low)
            hits = [m for m in masks if low in m.columns or tags.intersection(m.tags)]
            hits.sort(key=lambda m: -m.priority)
            branches: list[tuple[str, str]] = []
            for m in hits:
                test = self.principal_test(m.principals)
                if m.except_:
                    exc = self.principal_test(m.except_)
                    test = f"NOT {exc}" if test == "TRUE" else f"({test} AND NOT {exc})"
                    if self.groups is not None:
                        test = "TRUE" if test == "NOT FALSE" else "FALSE"
                if test == "FALSE":
                    continue
                custom = None
                if m.mask == "custom":
                    custom = self.expression(
                        (m.expression or "").replace("{col}", quote_ident(name))
                    )
                branches.append((test, mask_sql(m.mask, name, col.type_text, custom)))
                if test == "TRUE":
                    break
            q = quote_ident(name)
            if not branches:
                proj.append(q)
            elif branches[0][0] == "TRUE":
                proj.append(f"{branches[0][1]} AS {q}")
            else:
                whens = " ".join(f"WHEN {tst} THEN {sql}" for tst, sql in branches if tst != "TRUE")
                last = next((sql for tst, sql in branches if tst == "TRUE"), q)
                proj.append(f"CASE {whens} ELSE {last} END AS {q}")
        filters = [f for f in ps.row_filters if f.on.matches_table(c, s, t)]
        if self.groups is not None:  # A': only the filters that apply to the bench user
            filters = [f for f in filters if self.principal_test(f.principals) == "TRUE"]
        where: list[str] = []
        permissive = [f for f in filters if f.kind == "permissive"]
        if len(permissive) == 1:
            f = permissive[0]
            a = self.principal_test(f.principals)
            body = f"({self.expression(f.where)})"
            where.append(body if a == "TRUE" else f"(NOT {a} OR {body})")
        elif permissive:
            # rows pass if any applying permissive filter passes; none applying: no limit
            applies = [self.principal_test(f.principals) for f in permissive]
            alts = [
                f"({self.expression(f.where)})"
                if a == "TRUE"
                else f"({a} AND ({self.expression(f.where)}))"
                for a, f in zip(applies, permissive, strict=True)
            ]
            if "TRUE" not in applies:
                alts.insert(0, "NOT (" + " OR ".join(applies) + ")")
            where.append("(" + " OR ".join(alts) + ")")
        for f in filters:
            if f.kind != "restrictive":
                continue
            a = self.principal_test(f.principals)
            body = f"({self.expression(f.where)})"
            where.append(body if a == "TRUE" else f"(NOT {a} OR {body})")
        sql = f"SELECT {', '.join(proj)} FROM {source or f'delta.`{table.location}`'}"
        return sql + (" WHERE " + " AND ".join(where) if where else "")


def setup_views(spark: Any, lg: Any, root: Path, delta_paths: dict[str, str]) -> DynamicViews:
    """A: temp views over the Delta tables. B: the membership table and dynamic views.
    A': the bench user's hand-written views (global temp views in FLOOR_DB over A's temp
    views, so A' reads the very DataFrames A reads: A' - A is the policies' cost alone)."""
    spark_user = setup_floor_views(spark, lg, delta_paths)
    enforcer = lg.enforcer
    ps = enforcer.policy_set
    users = {BENCH_USER}
    for members in ps.groups.values():
        users.update(p.name for p in members if p.kind == "user")
    alias = {BENCH_USER: spark_user}
    rows = []
    for u in sorted(users):
        for g in sorted(enforcer.identity(u).groups):  # nested groups resolved, as IdPs do
            rows.append((alias.get(u, u), g))
    mpath = str((root / "delta" / MEMBERSHIP).resolve())
    spark.createDataFrame(rows, "member string, grp string").coalesce(1).write.format("delta").mode(
        "overwrite"
    ).save(mpath)
    dv = DynamicViews(spark_user, mpath, alias)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {VIEW_DB}")
    for t in delta_paths:
        info = _registered(lg, t)
        spark.sql(f"CREATE OR REPLACE VIEW {VIEW_DB}.{t} AS {dv.view_sql(enforcer, info)}")
    return dv


def setup_floor_views(spark: Any, lg: Any, delta_paths: dict[str, str]) -> str:
    """A: temp views over the Delta tables; A': the bench user's hand-written views over
    them, global temp views (so any session of this Spark application reads them, a plain
    Spark Connect session included). Spark's current_user(), which B's views test."""
    for t in delta_paths:
        spark.read.format("delta").load(delta_paths[t]).createOrReplaceTempView(t)
    spark_user: str = spark.sql("SELECT current_user()").collect()[0][0]
    enforcer = lg.enforcer
    groups = frozenset(g.lower() for g in enforcer.identity(BENCH_USER).groups)
    floor = DynamicViews(spark_user, "", {BENCH_USER: spark_user}, groups)  # no lookups
    for t in delta_paths:
        sql = floor.view_sql(enforcer, _registered(lg, t), source=t)
        spark.sql(sql).createOrReplaceGlobalTempView(t)
    return spark_user


def _registered(lg: Any, table: str) -> Any:
    info = lg.catalog.table(CATALOG, SCHEMA, table)
    if info is None:
        raise LookupError(f"{CATALOG}.{SCHEMA}.{table} is not registered")
    return info
