"""The governed session: parse -> resolve -> decide -> rewrite -> verify -> execute -> audit.

`Lakegate` holds what is shared (Spark, catalog, the current policy enforcer, the audit
log); `GovernedSession` is one user's identity and current namespace. Each statement is
planned in `governance.planning` without Spark, verified against Spark's analyzed plan, run
(its DDL actions through `governance.execute.actions`), and recorded in the audit log before its
result is handed back.
"""

from __future__ import annotations

import getpass
import json
import shutil
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.catalog import Catalog
from catalog.delta import read_delta_table
from catalog.model import ColumnInfo, TableInfo
from catalog.store import open_store
from governance import metrics
from governance.config import Config
from governance.errors import (
    AccessDenied,
    LakegateError,
    Refused,
)
from governance.execute.run import (
    ERROR_LOG,
    StatementFailed,
    error_class,
    governed_frame,
    route_error_log,
    run_planned,
    spark_error,
    tagged_commits,
)

# re-exported: callers (api/statements.py, tests) import these from the session
from governance.execute.run import analyze_only as analyze_only
from governance.execute.sources import PinnedSources
from governance.files import owner_only_umask
from governance.identity import NO_CLAIMS, IdpClaims, InvalidName, canonical_user
from governance.planning.cache import PlanCache, plan_key
from governance.planning.dispatch import Planner
from governance.planning.planned import Planned
from governance.planning.views import TempViews, ViewPlanned
from governance.policy.enforcer import PolicyEnforcer
from governance.rewrite.dynamic_views import PolicySql
from governance.session.policies_in_force import PoliciesInForce
from governance.session.recorder import StatementRecorder, write_or_refuse
from governance.sql.resolve import Namespace
from governance.verify.guard import query_frame, secure
from governance.verify.plan import analysis_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from governance.planning.context import PlanningContext

from audit import AuditEvent, AuditLog, statement_hash

AUDIT_TABLE = "system.access.audit"
#: Statement kinds that change nothing: everything else gets an intent record before it runs.
READ_ONLY_CMDS = frozenset({"select", "describe", "show", "use"})


class Lakegate:
    """One governed lakehouse: Spark, the catalog, the policies in force, the audit log."""

    def __init__(
        self,
        config: Config,
        spark: SparkSession | None = None,
        *,
        spark_log: Path | None = None,
        error_log: Path | None = None,
    ) -> None:
        """`spark_log`: send the embedded JVM's console output there (the CLI does);
        `error_log`: the server-side log of full Spark error texts (`lakegate.errors`)."""
        self.config = config
        owner_only_umask()  # catalog, audit, logs and the JVM's files: owner-only
        if error_log is not None:
            route_error_log(error_log)
        self._spark = spark
        self._spark_checked = False  # a handed-in SparkSession is checked on first use
        self._spark_log = spark_log
        self.catalog = Catalog(open_store(config.catalog), config.warehouse)
        self.audit = AuditLog(
            config.audit,
            max_bytes=config.audit_max_bytes,
            backup_count=config.audit_backup_count,
            checkpoints=config.audit_checkpoints,
        )
        self._view_lock = threading.Lock()
        self.policies = PoliciesInForce(config, self.catalog, self._audit_reload)
        # The audit log as the governed table system.access.audit, read through a temp view
        # whose name no user statement can reach (names resolve only through the catalog).
        self.audit_view = f"__lg_audit_{uuid.uuid4().hex}"
        self._view_plans: dict[tuple, Any] = {}  # view SQL, tables -> analyzed plan
        self.plans = PlanCache()  # query plans by everything they depend on, across sessions
        metrics.watch_caches(self)  # /metrics: its size against its bound, the JVM heap
        # a query's tables read through DataFrames loaded once (governance/execute/sources.py)
        self.sources = PinnedSources() if config.pinned_sources else None
        self._register_audit_table()

    @classmethod
    def open(
        cls,
        config: str | Path | Config | None = None,
        *,
        spark: SparkSession | None = None,
        spark_log: Path | None = None,
        error_log: Path | None = None,
    ) -> Lakegate:
        if config is None:
            cfg = (
                Config.load("lakegate.yaml")
                if Path("lakegate.yaml").is_file()
                else Config.default()
            )
        elif isinstance(config, Config):
            cfg = config
        else:
            cfg = Config.load(config)
        return cls(cfg, spark, spark_log=spark_log, error_log=error_log)

    # spark ------------------------------------------------------------------------------

    @property
    def spark_started(self) -> bool:
        """Whether Spark is up (readiness), without starting it."""
        return self._spark is not None

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from governance.runtime.spark import build_spark

            self._spark = build_spark(
                self.config.spark_master,
                self.config.spark_conf,
                log=self._spark_log,
                workdir=self.config.state,
            )
        elif not self._spark_checked:  # checked once: six py4j calls per access otherwise
            from governance.runtime.spark import check_spark

            check_spark(self._spark)
        if not self._spark_checked:  # once: each statement re-checks in its own JVM call
            changed = secure(self._spark)
            if changed:
                ERROR_LOG.warning("governed Spark settings put back: %s", ", ".join(changed))
            self._spark_checked = True
        return self._spark

    # policies (governance/session/policies_in_force.py) ---------------------------------------

    def reload_policies(self, *, initial: bool = False) -> bool:
        return self.policies.reload(initial=initial)

    def maybe_reload(self, min_interval: float = 1.0) -> None:
        self.policies.maybe_reload(min_interval)

    @property
    def policy_version(self) -> str:
        """The policyVersion of the set in force (audit key)."""
        return self.policies.current.version

    @property
    def enforcer(self) -> PolicyEnforcer:
        return self.policies.current.enforcer

    @property
    def policy_sql(self) -> PolicySql:
        return self.policies.current.sql

    def _audit_reload(
        self, ok: bool, reason: str | None, content_hash: str | None, version: str | None
    ) -> None:
        metrics.POLICY_RELOADS.labels("ok" if ok else "rejected").inc()
        write_or_refuse(
            self.audit,
            [
                AuditEvent(
                    allowed=ok,
                    user="lakegate",
                    cmd="policyReload",
                    proto="cli",
                    succeeded=ok,
                    reason=reason,
                    stmt_hash=content_hash,
                    src=str(self.config.policies),
                    policy_version=version,
                )
            ],
        )

    # catalog ----------------------------------------------------------------------------

    def register_table(self, name: str, path: str, *, replace: bool = False) -> Any:
        """Register an existing Delta table (an admin act: not governed by user policies)."""
        parts = name.lower().split(".")
        if len(parts) != 3:
            raise LakegateError(f"'{name}' is not a three-part name catalog.schema.table")
        c, s, t = parts
        admin = getpass.getuser()
        audit = partial(self._audit_admin, admin, "registerTable", name.lower(), uuid.uuid4().hex)
        audit(True, None, phase="intent")
        try:
            self.catalog.create_catalog(c, if_not_exists=True)
            self.catalog.create_schema(c, s, if_not_exists=True)
            info = read_delta_table(
                self.spark,
                c,
                s,
                t,
                str(Path(path).resolve()),
                domain=self.enforcer.policy_set.domain_of_schema(c, s),
            )
            stored = self.catalog.register_table(info, replace=replace)
        except Exception as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            audit(False, reason, phase="outcome")
            raise
        audit(True, None, phase="outcome")
        return stored

    def remove_leftover(self, path: Path) -> None:
        """Delete one crash leftover (governance/execute/leftovers.py), checked again here: strictly
        inside the warehouse, no registered table's. An admin act, audited like one."""
        from governance.execute.leftovers import find_leftovers

        path = Path(path)
        if path not in {item.path for item in find_leftovers(self.catalog)}:
            raise LakegateError(f"{path} is not a crash leftover in the warehouse")
        where = self.catalog.check_managed(path)
        audit = partial(
            self._audit_admin, getpass.getuser(), "removeLeftover", str(where), uuid.uuid4().hex
        )
        audit(True, None, phase="intent")
        try:
            shutil.rmtree(where)
        except OSError as e:
            audit(False, f"not removed ({e.strerror})", phase="outcome")
            raise LakegateError(f"{where}: not removed ({e.strerror})") from None
        audit(True, None, phase="outcome")

    def _audit_admin(
        self,
        user: str,
        cmd: str,
        src: str,
        query_id: str,
        ok: bool,
        reason: str | None,
        *,
        phase: str,
    ) -> None:
        """Catalog administration outside governed SQL is on record too (proto=cli): an
        intent before it runs (nothing runs without it) and the outcome after."""
        write_or_refuse(
            self.audit,
            [
                AuditEvent(
                    allowed=True,
                    user=user,
                    cmd=cmd,
                    src=src,
                    proto="cli",
                    succeeded=ok,
                    reason=reason,
                    policy_version=self.policy_version,
                    phase=phase,
                    query_id=query_id,
                )
            ],
            outcome_of=query_id if phase == "outcome" else None,
        )

    def _register_audit_table(self) -> None:
        from audit.spark_table import AUDIT_SCHEMA

        columns = tuple(
            ColumnInfo(
                f.name, f.dataType.simpleString(), True, i, type_json=json.dumps(f.jsonValue())
            )
            for i, f in enumerate(AUDIT_SCHEMA.fields)
        )
        current = self.catalog.table(*AUDIT_TABLE.split("."))
        location = str(self.config.audit.resolve())
        if current is not None and current.location == location and current.columns == columns:
            return
        self.catalog.create_catalog("system", if_not_exists=True)
        self.catalog.create_schema("system", "access", if_not_exists=True)
        self.catalog.register_table(
            TableInfo(
                "system",
                "access",
                "audit",
                location,
                columns,
                comment="The Lakegate audit log (read-only)",
                properties={"lakegate.kind": "audit"},
            ),
            replace=True,
        )

    def analyze_view(self, sql: str, fresh: bool = False) -> Any:
        """Spark's analyzed plan of a governed view's body, for the plan verifier; cached by
        text, since views repeat across statements (the verifier re-asks with fresh=True
        before it refuses on a mismatch) and by the Delta tables it reads (`analysis_key`)."""
        key = analysis_key(sql)
        plan = None if fresh else self._view_plans.get(key)
        if plan is None:
            plan = query_frame(self.spark, sql)._jdf.queryExecution().analyzed()
            with self._view_lock:
                if len(self._view_plans) >= 4096:
                    self._view_plans.clear()
                self._view_plans[key] = plan
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

    def __init__(
        self,
        lg: Lakegate,
        user: str,
        *,
        auth: str = "SIMPLE",
        via: str | None = None,
        ip: str = "127.0.0.1",
        proto: str = "spark",
        caller_context: str | None = None,
        claims: IdpClaims = NO_CLAIMS,
    ) -> None:
        """`claims`: what the organisation's identity provider asserted about the user
        (groups, issuer, subject); an entry point that authenticated a provider's token
        passes them, a trusted local caller has none."""
        try:
            self.user = canonical_user(user)
        except InvalidName as e:
            raise LakegateError(str(e)) from None
        self.lg = lg
        self.auth, self.via, self.ip, self.proto = auth, via, ip, proto
        self.claims = claims
        self.caller_context = caller_context
        self.namespace = Namespace(lg.config.default_catalog, lg.config.default_schema)
        self.last_query_id: str | None = None  # queryId of the last statement's audit lines
        # at most this many rows in each statement's result (None: all): applied before the
        # plan is optimized, so the caller's limit costs no second optimization (REST)
        self.row_limit: int | None = None
        # the last statement's plan (rewritten SQL, expected views): entry points that run
        # it elsewhere (api/connect) send this SQL and verify against `expected`
        self.last_planned: Planned | None = None
        # the statement's audit lines, fail closed (governance/session/recorder.py)
        self.record = StatementRecorder(
            lg.audit,
            lg.config.audit,
            user=self.user,
            auth=auth,
            via=via,
            ip=ip,
            proto=proto,
            caller_context=caller_context,
            claims=claims,
        )
        # this session's temporary views (never Spark's, which every user shares); a REST
        # statement runs in a session of its own, so there they are refused
        self.temp_views: TempViews | None = None if proto == "rest" else TempViews()

    # public API -------------------------------------------------------------------------

    def assert_claims(self, claims: IdpClaims) -> None:
        """The identity provider's newest word on this user (a later token of a long-lived
        session): later statements are decided and recorded with it."""
        self.claims = claims
        self.record.assert_claims(claims)

    def sql(self, statement: str | bytes) -> DataFrame:
        return self._run(statement)

    def table(self, name: str) -> DataFrame:
        return self._run(table_statement(name))

    def explain(self, statement: str | bytes) -> str:
        """The Spark SQL the statement is rewritten to (no Spark needed, nothing audited).
        Views read `delta.`<location>``, which says which table; a query runs over the
        table's pinned source instead (governance/execute/sources.py), a name of this process."""
        planned = self._planner(pinned=False).plan(statement)
        return planned.sql or planned.describe()

    def write(
        self,
        plan: Callable[[PlanningContext], Planned],
        execute: Callable[[Planned], None],
        stmt_hash: str,
    ) -> None:
        """A write that is not SQL text (a Spark Connect DataFrame write), audited as `sql`
        audits one: `plan` decides against this session's policy state, the intent is on
        record before `execute` runs, then the outcome; Spark's errors are scrubbed."""

        def pinned(planner: Planner) -> Planned:
            with planner.ctx.catalog.pinned():
                return plan(planner.ctx)

        self._statement(stmt_hash, pinned, execute)

    # internals --------------------------------------------------------------------------

    def _planner(self, pinned: bool = True) -> Planner:
        self.lg.maybe_reload()
        state = self.lg.policies.current
        self.record.decided_by(state.version)  # one state: what decides is what is recorded
        return Planner(
            catalog=self.lg.catalog,
            enforcer=state.enforcer,
            policy_sql=state.sql,
            user=self.user,
            groups=self.claims.groups,
            namespace=self.namespace,
            derived={AUDIT_TABLE: self.lg.audit_view},
            temp_views=self.temp_views,
            pin=self.lg.sources.name if pinned and self.lg.sources is not None else None,
            pin_view=(
                self.lg.sources.view
                if pinned and self.lg.sources is not None and self.lg.config.governed_views
                else None
            ),
        )

    def _plan(self, planner: Planner, statement: str | bytes) -> Planned:
        """The statement's plan through the layer's plan cache (governance.planning.cache);
        the catalog generation is read before planning, so an entry is never newer-keyed
        than the catalog it was planned against."""
        ctx = planner.ctx
        key = plan_key(
            statement,
            user=self.user,
            groups=self.claims.groups,
            namespace=self.namespace,
            policy=ctx.enforcer,
            policy_version=self.record.policy_version or "",
            generation=self.lg.catalog.store.generation(),
            temp_views=self.temp_views,
            derived=ctx.derived,
        )
        return self.lg.plans.plan(planner, statement, key)

    def plan_read(
        self, statement: str | bytes, held: list[Callable[[str | None], None]]
    ) -> Planned:
        """A governed read planned (through the plan cache), but not run here: the Connect
        gateway places its SQL into the client's plan, which the backend analyses and
        `PlanGovernor.verify` checks before anything runs. Its outcome lines are held
        (`held` gets their writer, StatementRecorder.later) until that analysis says
        which columns the plan reads. Anything but a plain query is refused (and audited
        as refused), before any intent record."""
        return self._govern(statement, run=False, held=held)[0]

    def _run(self, statement: str | bytes) -> DataFrame:
        df = self._govern(statement, run=True)[1]
        assert df is not None
        return df

    def _govern(
        self,
        statement: str | bytes,
        *,
        run: bool,
        held: list[Callable[[str | None], None]] | None = None,
    ) -> tuple[Planned, DataFrame | None]:
        """Plan, audit and (`run`) execute one statement; its plan and governed result."""
        raw = (
            statement
            if isinstance(statement, bytes)
            else str(statement).encode("utf-8", "surrogatepass")
        )

        def plan(planner: Planner) -> Planned:
            planned = self._plan(planner, statement)
            if not run and (type(planned) is not Planned or not planned.is_query):
                raise Refused("only queries can be DataFrames; refused")
            return planned

        planned, df = self._statement(
            statement_hash(raw.decode("utf-8", "replace")),
            plan,
            self._execute if run else lambda _: None,
            held,
        )
        if df is None:
            return planned, None
        sources = self.lg.sources
        on_failure = None if sources is None else partial(sources.failed, pins=planned.pins)
        return planned, governed_frame(df, self.last_query_id, self.user, on_failure)

    def _statement(
        self,
        stmt_hash: str,
        plan: Callable[[Planner], Planned],
        execute: Callable[[Planned], DataFrame | None],
        held: list[Callable[[str | None], None]] | None = None,
    ) -> tuple[Planned, DataFrame | None]:
        """One statement's life, whatever its entry point: plan, the intent of a change on
        record before `execute`, then the outcome line (`held`: its writer, for a read
        run elsewhere); every failure audited, Spark's text scrubbed from what the caller
        sees."""
        started = time.perf_counter()
        query_id = uuid.uuid4().hex
        self.last_query_id = query_id
        self.last_planned = None
        record = self.record
        record.begin(query_id, stmt_hash, self.lg.policy_version)
        planned: Planned | None = None
        planner: Planner | None = None
        try:
            planner = self._planner()
            planned = self.last_planned = plan(planner)
            metrics.PHASE_SECONDS.labels("plan").observe(time.perf_counter() - started)
            record.check()
            if planned.cmd not in READ_ONLY_CMDS:
                record.intent(planned)
            ran = time.perf_counter()
            if planned.cmd not in READ_ONLY_CMDS and (
                planned.sql is not None or planned.before or planned.after
            ):  # its Delta commits name it, an ALTER's (an action's) too
                with tagged_commits(query_id):
                    df = execute(planned)
            else:
                df = execute(planned)
            metrics.PHASE_SECONDS.labels("execute").observe(time.perf_counter() - ran)
            if isinstance(planned, ViewPlanned):
                df = self._apply_view(planned)
        except AccessDenied as e:
            metrics.counted(planner, metrics.DENIED)
            record.denied(e, planner)
            raise
        except LakegateError as e:
            metrics.counted(planner, metrics.FAILED)
            record.failed(str(e), planned, planner)
            raise
        except Exception as e:
            if planned is not None and self.lg.sources is not None:
                self.lg.sources.failed(error_class(e), planned.pins)
            msg = self._spark_error(e, planned, query_id)
            metrics.counted(
                planner, metrics.DENIED if isinstance(msg, AccessDenied) else metrics.FAILED
            )
            if isinstance(msg, AccessDenied):
                record.denied(msg, planner)
                raise msg from None
            record.failed(msg, planned, planner)
            raise StatementFailed(msg) from None
        if held is None:
            record.ok(planned)
        else:
            held.append(record.later(planned))
        metrics.counted(planner, metrics.OK)
        if planned.namespace is not None:
            self.namespace = planned.namespace
        return planned, df

    def _apply_view(self, planned: ViewPlanned) -> DataFrame:
        """A temp view changes once its intent is on record and its query was analysed and
        verified; the statement's result is empty, as Spark's is."""
        assert self.temp_views is not None
        planned.apply(self.temp_views)
        return self.lg.spark.createDataFrame([], "result string")

    def _execute(self, planned: Planned) -> DataFrame:
        lg = self.lg
        return run_planned(
            planned,
            lg.spark,
            lg.catalog,
            verify=lg.config.verify_plans,
            analyze=lg.analyze_view,
            refresh_derived=lg.refresh_audit_view,
            row_limit=self.row_limit,
            sources=lg.sources,
            noted=self.record.carried,
        )

    def _spark_error(
        self, e: Exception, planned: Planned | None, query_id: str
    ) -> str | AccessDenied:
        """Spark's error as the caller may see it (see `governance.execute.run.spark_error`)."""
        return spark_error(e, planned, query_id, self.user)


def table_statement(name: str) -> str:
    """`SELECT * FROM name` for a dotted table name, every part quoted (spark.table)."""
    ident = ".".join(f"`{p.replace('`', '``')}`" for p in name.split("."))
    return f"SELECT * FROM {ident}"
