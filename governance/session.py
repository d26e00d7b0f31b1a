"""The governed session: parse -> resolve -> decide -> rewrite -> verify -> execute -> audit.

`Lakegate` holds what is shared (Spark, catalog, the current policy enforcer, the audit
log); `GovernedSession` is one user's identity and current namespace. Each statement is
planned in `governance.planning` without Spark, verified against Spark's analyzed plan, run
(its DDL actions through `governance.actions`), and recorded in the audit log before its
result is handed back.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.catalog import Catalog
from catalog.delta import read_delta_table
from catalog.model import ColumnInfo, TableInfo
from catalog.products import dir_stamp
from catalog.store import open_store
from governance.config import Config
from governance.errors import AccessDenied, AuditUnavailable, LakegateError, Refused
from governance.execute import (
    ERROR_LOG,
    StatementFailed,
    error_class,
    governed_frame,
    route_error_log,
    run_planned,
    spark_error,
)

# re-exported: callers (api/statements.py, tests) import these from the session
from governance.execute import analyze_only as analyze_only
from governance.execute import failure_message as failure_message
from governance.guard import query_frame, secure
from governance.identity import InvalidName, canonical_user
from governance.planning.cache import PlanCache, plan_key
from governance.planning.dispatch import Planner
from governance.planning.planned import Planned
from governance.planning.views import TempViews, ViewPlanned
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import is_policy_file, load_policy_dir, load_policy_text
from governance.policy.model import PolicySet
from governance.resolve import Namespace
from governance.rewrite import PolicySql
from governance.sources import PinnedSources

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from governance.planning.context import PlanningContext

from audit import AuditEvent, AuditLog, AuditWriteError, statement_hash

AUDIT_TABLE = "system.access.audit"
#: Statement kinds that change nothing: everything else gets an intent record before it runs.
READ_ONLY_CMDS = frozenset({"select", "describe", "show", "use"})


@dataclass
class _PolicyState:
    enforcer: PolicyEnforcer
    sql: PolicySql
    stamp: tuple  # file names, sizes and mtimes it was built from (git mode: the commit)
    version: str  # the policyVersion audit key: sha256:<content hash> or git:<commit>


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
        if error_log is not None:
            route_error_log(error_log)
        self._spark = spark
        self._spark_checked = False  # a handed-in SparkSession is checked on first use
        self._spark_log = spark_log
        self.catalog = Catalog(open_store(config.catalog), config.warehouse)
        self.audit = AuditLog(
            config.audit, max_bytes=config.audit_max_bytes, backup_count=config.audit_backup_count
        )
        self._reload_lock = threading.Lock()
        self._last_check = 0.0
        self._seen: tuple[tuple, float] | None = None  # a changed stamp and when first seen
        self._policy: _PolicyState | None = None
        self.reload_policies(initial=True)
        # The audit log as the governed table system.access.audit, read through a temp view
        # whose name no user statement can reach (names resolve only through the catalog).
        self.audit_view = f"__lg_audit_{uuid.uuid4().hex}"
        self._view_plans: dict[str, Any] = {}  # view SQL -> analyzed plan (verifier)
        self.plans = PlanCache()  # query plans by everything they depend on, across sessions
        # a query's tables read through DataFrames loaded once (governance/sources.py)
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
    def spark(self) -> SparkSession:
        if self._spark is None:
            from governance.spark import build_spark

            self._spark = build_spark(
                self.config.spark_master, self.config.spark_conf, log=self._spark_log
            )
        elif not self._spark_checked:  # checked once: six py4j calls per access otherwise
            from governance.spark import check_spark

            check_spark(self._spark)
        if not self._spark_checked:  # once: each statement re-checks in its own JVM call
            changed = secure(self._spark)
            if changed:
                ERROR_LOG.warning("governed Spark settings put back: %s", ", ".join(changed))
            self._spark_checked = True
        return self._spark

    # policies ---------------------------------------------------------------------------

    def _policy_stamp(self) -> tuple:
        """What identifies the policy set on disk: the configured ref's commit in git mode,
        else the YAML files' names, sizes and mtimes."""
        if self.config.policies_ref:
            return (_git_commit(self.config.policies, self.config.policies_ref),)
        return dir_stamp(self.config.policies)

    def _load_snapshot(self, stamp: tuple) -> tuple[PolicySet, str]:
        """The policy set of `stamp` and its version: a git commit's tree (never the working
        files) or the directory (the caller re-checks the stamp afterwards)."""
        if self.config.policies_ref:
            commit = stamp[0]
            return _git_policy_set(self.config.policies, commit), f"git:{commit}"
        ps = load_policy_dir(self.config.policies)
        return ps, ps.content_hash

    def reload_policies(self, *, initial: bool = False) -> bool:
        """Build a new enforcer and swap it in; a broken set keeps the last good one.

        Returns True when a new set took effect. The first load must succeed. A directory
        that changed while it was read is not a consistent snapshot: that load is discarded
        (the first load retries a few times, a hot reload tries again after the settle time).
        """
        with self._reload_lock:
            for _ in range(20 if initial else 1):
                stamp = self._policy_stamp()
                try:
                    ps, version = self._load_snapshot(stamp)
                    enforcer = PolicyEnforcer(ps)
                except Exception as e:  # fail closed: whatever broke, the last good set stays
                    kept = self._policy.version if self._policy else None
                    ERROR_LOG.warning(
                        "policy reload rejected, %s stays in force: %s", kept or "nothing", e
                    )
                    self._audit_reload(
                        False, str(e).splitlines()[0] if str(e) else repr(e), None, kept
                    )
                    if initial or self._policy is None:
                        raise
                    self._policy = _PolicyState(
                        self._policy.enforcer, self._policy.sql, stamp, self._policy.version
                    )
                    return False
                if self._policy_stamp() == stamp:
                    self._policy = _PolicyState(
                        enforcer, PolicySql(enforcer, self.catalog), stamp, version
                    )
                    self._seen = None
                    self._audit_reload(True, None, ps.content_hash, version)
                    return True
                time.sleep(0.05)
            if self._policy is None:
                raise LakegateError(
                    f"policy directory {self.config.policies} keeps changing; "
                    "no consistent snapshot to load"
                )
            return False

    def _audit_reload(
        self, ok: bool, reason: str | None, content_hash: str | None, version: str | None
    ) -> None:
        try:
            self.audit.write(
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
                ]
            )
        except AuditWriteError as e:
            raise AuditUnavailable(f"audit log unavailable: {e}") from None

    def maybe_reload(self, min_interval: float = 1.0) -> None:
        """Hot reload: pick up changed policy files at most once per `min_interval`, and only
        once their stamp has stayed the same for `policies_settle` seconds (a `git checkout`
        deletes and re-creates files: a half-written set must never take effect)."""
        now = time.monotonic()
        if now - self._last_check < min_interval:
            return
        self._last_check = now
        assert self._policy is not None
        stamp = self._policy_stamp()
        if stamp == self._policy.stamp:
            self._seen = None
            return
        if self._seen is None or self._seen[0] != stamp:
            self._seen = (stamp, now)
            if self.config.policies_settle > 0:
                return
        if now - self._seen[1] >= self.config.policies_settle:
            self.reload_policies()

    @property
    def policy_version(self) -> str:
        """The policyVersion of the set in force (audit key)."""
        assert self._policy is not None
        return self._policy.version

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
        self._audit_admin(admin, "registerTable", name.lower(), True, None, phase="intent")
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
            self._audit_admin(admin, "registerTable", name.lower(), False, reason, phase="outcome")
            raise
        self._audit_admin(admin, "registerTable", name.lower(), True, None, phase="outcome")
        return stored

    def _audit_admin(
        self,
        user: str,
        cmd: str,
        src: str,
        ok: bool,
        reason: str | None,
        *,
        phase: str | None = None,
    ) -> None:
        """Catalog administration outside governed SQL is on record too (proto=cli): an
        intent before it runs (nothing runs without it) and the outcome after."""
        try:
            self.audit.write(
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
                    )
                ]
            )
        except AuditWriteError as e:
            if phase == "outcome":
                ERROR_LOG.error("%s %s ran but its outcome is not on record: %s", cmd, src, e)
                raise AuditUnavailable(
                    f"audit log unavailable: {cmd} {src} ran, its intent is on record but its "
                    "outcome could not be written"
                ) from None
            raise AuditUnavailable(f"audit log unavailable: {e}") from None

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
        before it refuses on a mismatch)."""
        plan = None if fresh else self._view_plans.get(sql)
        if plan is None:
            plan = query_frame(self.spark, sql)._jdf.queryExecution().analyzed()
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
    ) -> None:
        try:
            self.user = canonical_user(user)
        except InvalidName as e:
            raise LakegateError(str(e)) from None
        self.lg = lg
        self.auth, self.via, self.ip, self.proto = auth, via, ip, proto
        self.caller_context = caller_context
        self.namespace = Namespace(lg.config.default_catalog, lg.config.default_schema)
        self.last_query_id: str | None = None  # queryId of the last statement's audit lines
        # the last statement's plan (rewritten SQL, expected views): entry points that run
        # it elsewhere (api/connect) send this SQL and verify against `expected`
        self.last_planned: Planned | None = None
        self._policy_version: str | None = None  # of the set that planned the statement
        self._phase: str | None = None  # audit phase of the statement's next record
        # this session's temporary views (never Spark's, which every user shares); a REST
        # statement runs in a session of its own, so there they are refused
        self.temp_views: TempViews | None = None if proto == "rest" else TempViews()

    # public API -------------------------------------------------------------------------

    def sql(self, statement: str | bytes) -> DataFrame:
        return self._run(statement)

    def table(self, name: str) -> DataFrame:
        return self._run(table_statement(name))

    def explain(self, statement: str | bytes) -> str:
        """The Spark SQL the statement is rewritten to (no Spark needed, nothing audited).
        Views read `delta.`<location>``, which says which table; a query runs over the
        table's pinned source instead (governance/sources.py), a name of this process."""
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
        state = self.lg._policy
        assert state is not None
        self._policy_version = state.version  # one state: what decides is what is recorded
        return Planner(
            catalog=self.lg.catalog,
            enforcer=state.enforcer,
            policy_sql=state.sql,
            user=self.user,
            namespace=self.namespace,
            derived={AUDIT_TABLE: self.lg.audit_view},
            temp_views=self.temp_views,
            pin=self.lg.sources.name if pinned and self.lg.sources is not None else None,
        )

    def _plan(self, planner: Planner, statement: str | bytes) -> Planned:
        """The statement's plan through the layer's plan cache (governance.planning.cache);
        the catalog generation is read before planning, so an entry is never newer-keyed
        than the catalog it was planned against."""
        ctx = planner.ctx
        key = plan_key(
            statement,
            user=self.user,
            namespace=self.namespace,
            policy=ctx.enforcer,
            policy_version=self._policy_version or "",
            generation=self.lg.catalog.store.generation(),
            temp_views=self.temp_views,
            derived=ctx.derived,
        )
        return self.lg.plans.plan(planner, statement, key)

    def plan_read(self, statement: str | bytes) -> Planned:
        """A governed read planned (through the plan cache) and audited, but not run here:
        the Connect gateway places its SQL into the client's plan, which the backend
        analyses and `PlanGovernor.verify` checks before anything runs. Anything but a
        plain query is refused (and audited as refused), before any intent record."""
        return self._govern(statement, run=False)[0]

    def _run(self, statement: str | bytes) -> DataFrame:
        df = self._govern(statement, run=True)[1]
        assert df is not None
        return df

    def _govern(self, statement: str | bytes, *, run: bool) -> tuple[Planned, DataFrame | None]:
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
    ) -> tuple[Planned, DataFrame | None]:
        """One statement's life, whatever its entry point: plan, the intent of a change on
        record before `execute`, then the outcome line; every failure audited, Spark's text
        scrubbed from what the caller sees."""
        started = time.perf_counter()
        query_id = uuid.uuid4().hex
        self.last_query_id = query_id
        self._phase = None
        self.last_planned = None
        self._policy_version = self.lg.policy_version
        planned: Planned | None = None
        planner: Planner | None = None
        try:
            planner = self._planner()
            planned = self.last_planned = plan(planner)
            self._check_audit()
            if planned.cmd not in READ_ONLY_CMDS:
                self._audit_intent(planned, query_id, stmt_hash)
            df = execute(planned)
            if isinstance(planned, ViewPlanned):
                df = self._apply_view(planned)
        except AccessDenied as e:
            self._audit_denied(e, query_id, stmt_hash, started, planner)
            raise
        except LakegateError as e:
            self._audit_failed(str(e), query_id, stmt_hash, started, planned, planner)
            raise
        except Exception as e:
            if planned is not None and self.lg.sources is not None:
                self.lg.sources.failed(error_class(e), planned.pins)
            msg = self._spark_error(e, planned, query_id)
            if isinstance(msg, AccessDenied):
                self._audit_denied(msg, query_id, stmt_hash, started, planner)
                raise msg from None
            self._audit_failed(msg, query_id, stmt_hash, started, planned, planner)
            raise StatementFailed(msg) from None
        self._audit_ok(planned, query_id, stmt_hash, started)
        if planned.namespace is not None:
            self.namespace = planned.namespace
        return planned, df

    def _apply_view(self, planned: ViewPlanned) -> DataFrame:
        """A temp view changes once its intent is on record and its query was analysed and
        verified; the statement's result is empty, as Spark's is."""
        assert self.temp_views is not None
        planned.apply(self.temp_views)
        return self.lg.spark.createDataFrame([], "result string")

    def _check_audit(self) -> None:
        """Fail before running anything if the audit log cannot take the record."""
        d = self.lg.config.audit
        if not d.is_dir():
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise AuditUnavailable(f"audit log unavailable: {e}") from None

    def _execute(self, planned: Planned) -> DataFrame:
        lg = self.lg
        return run_planned(
            planned,
            lg.spark,
            lg.catalog,
            verify=lg.config.verify_plans,
            analyze=lg.analyze_view,
            refresh_derived=lg.refresh_audit_view,
            sources=lg.sources,
        )

    def _spark_error(
        self, e: Exception, planned: Planned | None, query_id: str
    ) -> str | AccessDenied:
        """Spark's error as the caller may see it (see `governance.execute.spark_error`)."""
        return spark_error(e, planned, query_id, self.user)

    # audit ------------------------------------------------------------------------------

    def _event(self, **kw: Any) -> AuditEvent:
        return AuditEvent(
            user=self.user,
            auth=self.auth,
            via=self.via,
            ip=self.ip,
            proto=self.proto,
            caller_context=self.caller_context,
            policy_version=self._policy_version,
            phase=self._phase,
            **kw,
        )

    def _write(self, events: list[AuditEvent]) -> None:
        try:
            self.lg.audit.write(events)
        except AuditWriteError as e:
            if self._phase == "outcome":  # the effect may have happened: say so
                ERROR_LOG.error(
                    "query %s ran but its outcome is not on record: %s", self.last_query_id, e
                )
                raise AuditUnavailable(
                    f"audit log unavailable: the statement ran and its intent is on record "
                    f"(query {self.last_query_id}), but its outcome could not be written"
                ) from None
            raise AuditUnavailable(f"audit log unavailable, access refused: {e}") from None

    def _audit_intent(self, planned: Planned, qid: str, sh: str) -> None:
        """Audit before effect: the intent is flushed before anything runs; when it cannot
        be written nothing runs. Every later record of the statement is its outcome."""
        self._phase = "intent"
        self._write(
            [
                self._event(allowed=True, succeeded=False, query_id=qid, stmt_hash=sh, **line)
                for line in planned.audit_lines()
            ]
        )
        self._phase = "outcome"

    def _audit_ok(self, planned: Planned, qid: str, sh: str, started: float) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        events = [
            self._event(
                allowed=True, succeeded=True, query_id=qid, stmt_hash=sh, duration_ms=ms, **line
            )
            for line in planned.audit_lines()
        ]
        self._write(events)

    def _audit_denied(
        self, e: AccessDenied, qid: str, sh: str, started: float, planner: Planner | None
    ) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        cmd = e.cmd if e.cmd in ("refused", "parseError") or planner is None else planner.cmd
        tables = e.tables or (None,)
        events = []
        for t in tables:
            policies = e.policies or (planner.decided.get(t, ()) if planner and t else ())
            filters = e.row_filters or (planner.filters.get(t, ()) if planner and t else ())
            events.append(
                self._event(
                    allowed=False,
                    succeeded=False,
                    cmd=cmd,
                    src=t,
                    query_id=qid,
                    stmt_hash=sh,
                    reason=str(e),
                    duration_ms=ms,
                    policies=policies,
                    row_filters=filters,
                )
            )
        self._write(events)

    def _audit_failed(
        self,
        reason: str,
        qid: str,
        sh: str,
        started: float,
        planned: Planned | None,
        planner: Planner | None,
    ) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        if planned is not None:
            lines = planned.audit_lines()
        else:
            lines = [{"cmd": planner.cmd if planner else "refused", "src": None}]
        self._write(
            [
                self._event(
                    allowed=planned is not None,
                    succeeded=False,
                    query_id=qid,
                    stmt_hash=sh,
                    reason=reason,
                    duration_ms=ms,
                    **line,
                )
                for line in lines
            ]
        )


def table_statement(name: str) -> str:
    """`SELECT * FROM name` for a dotted table name, every part quoted (spark.table)."""
    ident = ".".join(f"`{p.replace('`', '``')}`" for p in name.split("."))
    return f"SELECT * FROM {ident}"


def _git(policies: Path, *args: str) -> bytes:
    """Run git in the policy directory; one clear line when it fails (fail closed)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(policies), *args], capture_output=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise LakegateError(
            f"policies_ref: git {args[0]} failed in {policies}: {type(e).__name__}"
        ) from None
    return done.stdout


def _git_commit(policies: Path, ref: str) -> str:
    """The commit `ref` names now (`--end-of-options`: a ref is never taken as an option)."""
    return (
        _git(policies, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
        .decode()
        .strip()
    )


def _git_policy_set(policies: Path, commit: str) -> PolicySet:
    """The policy files of the directory as committed in `commit`, never the working files."""
    # ls-tree lists paths relative to the policy directory; `commit:./name` reads them so
    names = _git(policies, "ls-tree", "-r", "-z", "--name-only", commit, "--", ".")
    files: dict[str, str] = {}
    for name in names.decode().split("\0"):
        if name and is_policy_file(name):
            files[name] = _git(policies, "show", f"{commit}:./{name}").decode("utf-8")
    return load_policy_text(files)
