"""The governed session: parse -> resolve -> decide -> rewrite -> verify -> execute -> audit.

`Lakegate` holds what is shared (Spark, catalog, the current policy enforcer, the audit
log); `GovernedSession` is one user's identity and current namespace. Each statement is
planned in `plan.py` without Spark, verified against Spark's analyzed plan, run, and
recorded in the audit log before its result is handed back.
"""

from __future__ import annotations

import getpass
import json
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.catalog import Catalog
from catalog.delta import read_delta_table
from catalog.model import ColumnInfo, TableInfo
from catalog.products import dir_stamp
from catalog.store import open_store
from governance.config import Config
from governance.errors import AccessDenied, AuditUnavailable, LakegateError
from governance.identity import InvalidName, canonical_user
from governance.plan import ROW_FILTER_VIOLATION, Planned, Planner
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import load_policy_dir
from governance.resolve import Namespace
from governance.rewrite import PolicySql
from governance.verify import verify_plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from audit import AuditEvent, AuditLog, AuditWriteError, statement_hash

AUDIT_TABLE = "system.access.audit"


class StatementFailed(LakegateError):
    """Spark could not run an allowed statement; the message is Spark's first line."""


@dataclass
class _PolicyState:
    enforcer: PolicyEnforcer
    sql: PolicySql
    stamp: tuple  # file names, sizes and mtimes it was built from


class Lakegate:
    """One governed lakehouse: Spark, the catalog, the policies in force, the audit log."""

    def __init__(self, config: Config, spark: SparkSession | None = None, *,
                 spark_log: Path | None = None) -> None:
        """`spark_log`: send the embedded JVM's console output there (the CLI does)."""
        self.config = config
        self._spark = spark
        self._spark_log = spark_log
        self.catalog = Catalog(open_store(config.catalog), config.warehouse)
        self.audit = AuditLog(config.audit, max_bytes=config.audit_max_bytes,
                              backup_count=config.audit_backup_count)
        self._reload_lock = threading.Lock()
        self._last_check = 0.0
        self._policy: _PolicyState | None = None
        self.reload_policies(initial=True)
        # The audit log as the governed table system.access.audit, read through a temp view
        # whose name no user statement can reach (names resolve only through the catalog).
        self.audit_view = f"__lg_audit_{uuid.uuid4().hex}"
        self._view_plans: dict[str, Any] = {}  # view SQL -> analyzed plan (verifier)
        self._register_audit_table()

    @classmethod
    def open(cls, config: str | Path | Config | None = None, *,
             spark: SparkSession | None = None, spark_log: Path | None = None) -> Lakegate:
        if config is None:
            cfg = Config.load("lakegate.yaml") if Path("lakegate.yaml").is_file() \
                else Config.default()
        elif isinstance(config, Config):
            cfg = config
        else:
            cfg = Config.load(config)
        return cls(cfg, spark, spark_log=spark_log)

    # spark ------------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from governance.spark import build_spark

            self._spark = build_spark(self.config.spark_master, self.config.spark_conf,
                                      log=self._spark_log)
        else:
            from governance.spark import check_spark

            check_spark(self._spark)
        return self._spark

    # policies ---------------------------------------------------------------------------

    def _policy_stamp(self) -> tuple:
        return dir_stamp(self.config.policies)

    def reload_policies(self, *, initial: bool = False) -> bool:
        """Build a new enforcer and swap it in; a broken set keeps the last good one.

        Returns True when a new set took effect. The first load must succeed.
        """
        with self._reload_lock:
            stamp = self._policy_stamp()
            try:
                ps = load_policy_dir(self.config.policies)
                enforcer = PolicyEnforcer(ps)
            except Exception as e:  # fail closed: whatever broke, the last good set stays
                self._audit_reload(False, str(e).splitlines()[0] if str(e) else repr(e), None)
                if initial or self._policy is None:
                    raise
                self._policy = _PolicyState(self._policy.enforcer, self._policy.sql, stamp)
                return False
            self._policy = _PolicyState(enforcer, PolicySql(enforcer), stamp)
            self._audit_reload(True, None, ps.content_hash)
            return True

    def _audit_reload(self, ok: bool, reason: str | None, content_hash: str | None) -> None:
        try:
            self.audit.write([AuditEvent(
                allowed=ok, user="lakegate", cmd="policyReload", proto="cli",
                succeeded=ok, reason=reason, stmt_hash=content_hash,
                src=str(self.config.policies),
            )])
        except AuditWriteError as e:
            raise AuditUnavailable(f"audit log unavailable: {e}") from None

    def maybe_reload(self, min_interval: float = 1.0) -> None:
        """Hot reload: pick up changed policy files at most once per `min_interval`."""
        now = time.monotonic()
        if now - self._last_check < min_interval:
            return
        self._last_check = now
        assert self._policy is not None
        if self._policy_stamp() != self._policy.stamp:
            self.reload_policies()

    @property
    def enforcer(self) -> PolicyEnforcer:
        assert self._policy is not None
        return self._policy.enforcer

    @property
    def policy_sql(self) -> PolicySql:
        assert self._policy is not None
        return self._policy.sql

    # catalog ----------------------------------------------------------------------------

    def register_table(self, name: str, path: str, *, replace: bool = False) -> Any:
        """Register an existing Delta table (an admin act: not governed by user policies)."""
        parts = name.lower().split(".")
        if len(parts) != 3:
            raise LakegateError(f"'{name}' is not a three-part name catalog.schema.table")
        c, s, t = parts
        admin = getpass.getuser()
        try:
            self.catalog.create_catalog(c, if_not_exists=True)
            self.catalog.create_schema(c, s, if_not_exists=True)
            info = read_delta_table(self.spark, c, s, t, str(Path(path).resolve()),
                                    domain=self.enforcer.policy_set.domain_of_schema(c, s))
            stored = self.catalog.register_table(info, replace=replace)
        except Exception as e:
            self._audit_admin(admin, "registerTable", name.lower(), False, str(e))
            raise
        self._audit_admin(admin, "registerTable", name.lower(), True, None)
        return stored

    def _audit_admin(self, user: str, cmd: str, src: str, ok: bool, reason: str | None) -> None:
        """Catalog administration outside governed SQL is on record too (proto=cli)."""
        try:
            self.audit.write([AuditEvent(allowed=True, user=user, cmd=cmd, src=src,
                                         proto="cli", succeeded=ok, reason=reason)])
        except AuditWriteError as e:
            raise AuditUnavailable(f"audit log unavailable: {e}") from None

    def _register_audit_table(self) -> None:
        from audit.spark_table import AUDIT_SCHEMA

        columns = tuple(ColumnInfo(f.name, f.dataType.simpleString(), True, i,
                                   type_json=json.dumps(f.jsonValue()))
                        for i, f in enumerate(AUDIT_SCHEMA.fields))
        current = self.catalog.table(*AUDIT_TABLE.split("."))
        location = str(self.config.audit.resolve())
        if current is not None and current.location == location and current.columns == columns:
            return
        self.catalog.create_catalog("system", if_not_exists=True)
        self.catalog.create_schema("system", "access", if_not_exists=True)
        self.catalog.register_table(TableInfo(
            "system", "access", "audit", location, columns,
            comment="The Lakegate audit log (read-only)",
            properties={"lakegate.kind": "audit"}), replace=True)

    def analyze_view(self, sql: str, fresh: bool = False) -> Any:
        """Spark's analyzed plan of a governed view's body, for the plan verifier; cached by
        text, since views repeat across statements (the verifier re-asks with fresh=True
        before it refuses on a mismatch)."""
        plan = None if fresh else self._view_plans.get(sql)
        if plan is None:
            plan = self.spark.sql(sql)._jdf.queryExecution().analyzed()
            with self._reload_lock:
                if len(self._view_plans) >= 4096:
                    self._view_plans.clear()
                self._view_plans[sql] = plan
        return plan

    def refresh_audit_view(self) -> None:
        """The audit files change with every statement: re-list them per read."""
        from audit.spark_table import audit_dataframe

        audit_dataframe(self.spark, self.config.audit).createOrReplaceTempView(self.audit_view)

    # sessions ---------------------------------------------------------------------------

    def session(self, user: str, **kw: Any) -> GovernedSession:
        return GovernedSession(self, user, **kw)

    def close(self) -> None:
        self.audit.close()
        self.catalog.store.close()


class GovernedSession:
    """One user's governed access. Not thread-safe (it holds a current namespace)."""

    def __init__(self, lg: Lakegate, user: str, *, auth: str = "SIMPLE",
                 via: str | None = None, ip: str = "127.0.0.1", proto: str = "spark",
                 caller_context: str | None = None) -> None:
        try:
            self.user = canonical_user(user)
        except InvalidName as e:
            raise LakegateError(str(e)) from None
        self.lg = lg
        self.auth, self.via, self.ip, self.proto = auth, via, ip, proto
        self.caller_context = caller_context
        self.namespace = Namespace(lg.config.default_catalog, lg.config.default_schema)

    # public API -------------------------------------------------------------------------

    def sql(self, statement: str | bytes) -> DataFrame:
        return self._run(statement)

    def table(self, name: str) -> DataFrame:
        ident = ".".join(f"`{p.replace('`', '``')}`" for p in name.split("."))
        return self._run(f"SELECT * FROM {ident}")

    def explain(self, statement: str | bytes) -> str:
        """The Spark SQL the statement is rewritten to (no Spark needed, nothing audited)."""
        planned = self._planner().plan(statement)
        return planned.sql or planned.describe()

    # internals --------------------------------------------------------------------------

    def _planner(self) -> Planner:
        self.lg.maybe_reload()
        return Planner(
            catalog=self.lg.catalog, enforcer=self.lg.enforcer, policy_sql=self.lg.policy_sql,
            user=self.user, namespace=self.namespace,
            derived={AUDIT_TABLE: self.lg.audit_view},
        )

    def _run(self, statement: str | bytes) -> DataFrame:
        started = time.perf_counter()
        query_id = uuid.uuid4().hex
        raw = statement if isinstance(statement, bytes) \
            else str(statement).encode("utf-8", "surrogatepass")
        stmt_hash = statement_hash(raw.decode("utf-8", "replace"))
        planned: Planned | None = None
        planner: Planner | None = None
        try:
            planner = self._planner()
            planned = planner.plan(statement)
            self._check_audit()
            df = self._execute(planned)
        except AccessDenied as e:
            self._audit_denied(e, query_id, stmt_hash, started, planner)
            raise
        except LakegateError as e:
            self._audit_failed(str(e), query_id, stmt_hash, started, planned, planner)
            raise
        except Exception as e:
            msg = self._spark_error(e, planned)
            if isinstance(msg, AccessDenied):
                self._audit_denied(msg, query_id, stmt_hash, started, planner)
                raise msg from None
            self._audit_failed(msg, query_id, stmt_hash, started, planned, planner)
            raise StatementFailed(msg) from None
        self._audit_ok(planned, query_id, stmt_hash, started)
        if planned.namespace is not None:
            self.namespace = planned.namespace
        return df

    def _check_audit(self) -> None:
        """Fail before running anything if the audit log cannot take the record."""
        d = self.lg.config.audit
        if not d.is_dir():
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise AuditUnavailable(f"audit log unavailable: {e}") from None

    def _execute(self, planned: Planned) -> DataFrame:
        spark = self.lg.spark
        if planned.derived:
            self.lg.refresh_audit_view()
        if planned.before is not None:
            planned.before(self.lg, spark)
        if planned.local_rows is not None:
            return spark.createDataFrame(planned.local_rows, planned.local_schema)
        assert planned.sql is not None
        verify = self.lg.config.verify_plans
        analyze = self.lg.analyze_view

        if planned.is_query:
            df = spark.sql(planned.sql)
            qe = df._jdf.queryExecution()
            if verify:
                verify_plan(qe.analyzed(), planned.expected, analyze)
            # optimize now, inside the governed error handling; execution reuses this plan
            qe.optimizedPlan()
        else:
            if verify:
                verify_plan(analyze_only(spark, planned.sql), planned.expected, analyze)
            df = spark.sql(planned.sql)
        if planned.after is not None:
            planned.after(self.lg, spark)
        return df

    def _spark_error(self, e: Exception, planned: Planned | None) -> str | AccessDenied:
        """Spark's error as one line, or AccessDenied when it names a hidden column."""
        raw = str(getattr(e, "desc", None) or e)
        if ROW_FILTER_VIOLATION in raw and planned is not None:
            t = planned.target
            return AccessDenied(
                f"access denied: a row written by user {self.user} is outside their row filter "
                f"on {planned.target_name}; nothing was written", cmd=planned.cmd,
                tables=(planned.target_name or "",),
                policies=t.policy_ids if t else (),
                row_filters=tuple(f.id for f in t.row_filters) if t else ())
        lines = [ln for ln in raw.strip().splitlines() if ln.strip()]
        first = lines[0] if lines else type(e).__name__
        if first.startswith("An error occurred while calling") and len(lines) > 1:
            first = lines[1].lstrip(": ")
        first = first.split("; line ")[0].split(";\n")[0]
        if planned is not None:
            m = re.search(r"name `([^`]+)`(?:\.`([^`]+)`)? cannot be resolved", first)
            if m:
                hidden = planned.hidden_column(m.group(2) or m.group(1)) or \
                    planned.hidden_column(m.group(1))
                if hidden is not None:
                    return AccessDenied(
                        f"access denied: user {self.user} may not read column {hidden[1]} of "
                        f"table {hidden[0]}", cmd=planned.cmd, tables=(hidden[0],))
            for v in planned.placeholders:
                first = first.replace(v, "")
        return f"statement failed: {first[:500]}"

    # audit ------------------------------------------------------------------------------

    def _event(self, **kw: Any) -> AuditEvent:
        return AuditEvent(user=self.user, auth=self.auth, via=self.via, ip=self.ip,
                          proto=self.proto, caller_context=self.caller_context, **kw)

    def _write(self, events: list[AuditEvent]) -> None:
        try:
            self.lg.audit.write(events)
        except AuditWriteError as e:
            raise AuditUnavailable(f"audit log unavailable, access refused: {e}") from None

    def _audit_ok(self, planned: Planned, qid: str, sh: str, started: float) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        events = [self._event(allowed=True, succeeded=True, query_id=qid, stmt_hash=sh,
                              duration_ms=ms, **line) for line in planned.audit_lines()]
        self._write(events)

    def _audit_denied(self, e: AccessDenied, qid: str, sh: str, started: float,
                      planner: Planner | None) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        cmd = e.cmd if e.cmd in ("refused", "parseError") or planner is None else planner.cmd
        tables = e.tables or (None,)
        events = []
        for t in tables:
            policies = e.policies or (planner.decided.get(t, ()) if planner and t else ())
            filters = e.row_filters or (planner.filters.get(t, ()) if planner and t else ())
            events.append(self._event(
                allowed=False, succeeded=False, cmd=cmd, src=t, query_id=qid, stmt_hash=sh,
                reason=str(e), duration_ms=ms, policies=policies, row_filters=filters))
        self._write(events)

    def _audit_failed(self, reason: str, qid: str, sh: str, started: float,
                      planned: Planned | None, planner: Planner | None) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        if planned is not None:
            lines = planned.audit_lines()
        else:
            lines = [{"cmd": planner.cmd if planner else "refused", "src": None}]
        self._write([self._event(allowed=planned is not None, succeeded=False, query_id=qid,
                                 stmt_hash=sh, reason=reason, duration_ms=ms, **line)
                     for line in lines])


def analyze_only(spark: SparkSession, sql: str) -> Any:
    """Spark's analyzed plan of a statement without running it (commands run eagerly in
    spark.sql, so verify them through the parser and analyzer directly)."""
    state = spark._jsparkSession.sessionState()
    parsed = state.sqlParser().parsePlan(sql)
    analyzed = state.analyzer().execute(parsed)
    state.analyzer().checkAnalysis(analyzed)
    return analyzed


def remove_managed_files(lg: Lakegate, location: str) -> None:
    """DROP TABLE deletes data only for tables inside the warehouse (managed tables)."""
    loc = Path(location).resolve()
    if lg.catalog.warehouse in loc.parents and loc.is_dir():
        shutil.rmtree(loc)
