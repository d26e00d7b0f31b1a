"""The domain registry: domains from the policies, data products from the API and from YAML.

Domains are read from the policy set in force (`domains:`), so ownership changes go through
the same review as any policy. Products live in the catalog's SQLite file; YAML products from
the products directory (beside the policy directory, never inside it: the policy loader reads
every YAML file there) are synced into it whenever their files change.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from api.delta_log import read_log
from catalog.products import (
    DataProduct,
    ProductError,
    ProductStore,
    check_domain,
    dir_stamp,
    load_product_dir,
)

if TYPE_CHECKING:
    from api.caller import Caller
    from api.discovery import Discovery
    from governance.policy.model import Domain
    from governance.session.governed import Lakegate

log = logging.getLogger("lakegate.api")


def dt(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts else None


class Registry:
    def __init__(self, lg: Lakegate, discovery: Discovery) -> None:
        self.lg = lg
        self.discovery = discovery
        self.store = ProductStore(lg.catalog.store)
        self.problems: list[str] = []
        self._stamp: tuple | None = None
        self._last_check = 0.0
        self._lock = threading.Lock()
        self.sync_yaml(force=True)

    # YAML ---------------------------------------------------------------------------------

    def sync_yaml(self, *, force: bool = False, min_interval: float = 1.0) -> None:
        """Pick up changed product files at most once per `min_interval`; a broken file
        keeps the products synced last time (and is reported in `problems`)."""
        now = time.monotonic()
        if not force and now - self._last_check < min_interval:
            return
        with self._lock:
            self._last_check = now
            root = self.lg.config.products_dir
            stamp = dir_stamp(root)
            if stamp == self._stamp and not force:
                return
            self._stamp = stamp
            problems: list[str] = []
            try:
                products = load_product_dir(root)
            except ProductError as e:
                self.problems = [str(e)]
                log.warning("data products not reloaded: %s", e)
                return
            domains = self.domain_schemas()
            good = []
            for p in products:
                try:
                    check_domain(p, domains)
                    good.append(p)
                except ProductError as e:
                    problems.append(f"{p.source[5:]}: {e}")
            skipped = self.store.sync_yaml(good)
            problems += [
                f"product '{n}' is registered through the API; its YAML definition is ignored"
                for n in skipped
            ]
            for msg in problems:
                log.warning("data products: %s", msg)
            self.problems = problems

    # domains --------------------------------------------------------------------------------

    def domains(self, caller: Caller | None = None) -> dict[str, Domain]:
        enf = caller.enforcer if caller is not None else self.lg.enforcer
        return enf.policy_set.domains

    def domain_schemas(self) -> dict[str, tuple[str, ...]]:
        return {n: d.schemas for n, d in self.lg.enforcer.policy_set.domains.items()}

    @staticmethod
    def is_owner(caller: Caller, domain: Domain) -> bool:
        for p in domain.owners:
            if (
                p.kind == "any"
                or (p.kind == "user" and p.name == caller.user)
                or (p.kind == "group" and caller.ident.is_member(p.name))
            ):
                return True
        return False

    def owned_domains(self, caller: Caller) -> list[str]:
        return sorted(n for n, d in self.domains(caller).items() if self.is_owner(caller, d))

    def domain_tables(self, caller: Caller, domain: Domain) -> list:
        """Tables in the domain's schemas that the caller may read, sorted by name."""
        snap = self.discovery.snapshot()
        out = []
        for key in sorted(domain.schemas):
            c, _, s = key.partition(".")
            out += [t for t in snap.schema_tables(c, s) if self.discovery.can_see(caller, t)]
        return out

    # products -------------------------------------------------------------------------------

    def products(self, domain: str | None = None) -> list[DataProduct]:
        self.sync_yaml()
        return self.store.list(domain)

    def product(self, name: str) -> DataProduct | None:
        self.sync_yaml()
        return self.store.get(name)

    def products_by_table(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self.products():
            if p.stage == "retired":
                continue
            for t in p.output_tables:
                out.setdefault(t, []).append(p.name)
        return out

    def view(self, caller: Caller, p: DataProduct) -> dict:
        """A product as the caller may see it: output tables they cannot read are left out
        (owners see all), and the freshness objective is checked against the Delta log."""
        domain = self.domains(caller).get(p.domain)
        owner = domain is not None and self.is_owner(caller, domain)
        snap = self.discovery.snapshot()
        visible = [
            t
            for t in p.output_tables
            if owner or (t in snap.tables and self.discovery.can_see(caller, snap.tables[t]))
        ]
        # Commit times of a table under the caller's row filter show when hidden rows change.
        timed = (
            set(p.output_tables)
            if owner
            else {
                t
                for t in visible
                if not caller.enforcer.table_access(caller.ident, snap.tables[t]).row_filters
            }
        )
        return {
            "name": p.name,
            "domain": p.domain,
            "description": p.description,
            "output_tables": visible,
            "stage": p.stage,
            "tags": list(p.tags),
            "classification": p.classification,
            "freshness": p.freshness,
            "freshness_status": self.freshness(p, set(visible), timed),
            "source": p.source,
            "editable": owner and p.source == "api" and p.stage != "retired",
            "created_at": dt(p.created_at),
            "updated_at": dt(p.updated_at),
            "created_by": p.created_by,
            "updated_by": p.updated_by,
        }

    def freshness(self, p: DataProduct, shown: set[str], timed: set[str]) -> dict | None:
        """Fresh when every output table's newest commit is younger than the objective;
        stale if any is older; unknown when a table or its log is missing, or when its commit
        times are not the caller's to know (not in `timed`: hidden or row-filtered)."""
        objective = p.freshness_seconds
        if objective is None:
            return None
        now = time.time()
        snap = self.discovery.snapshot()
        verdicts: list[bool | None] = []
        tables = []
        for name in p.output_tables:
            info = snap.tables.get(name)
            last_ms = (
                read_log(info.location).last_commit_ms
                if info is not None and name in timed
                else None
            )
            age = None if last_ms is None else max(0.0, now - last_ms / 1000)
            fresh = None if age is None else age <= objective
            verdicts.append(fresh)
            if name in shown:
                tables.append(
                    {
                        "table": name,
                        "last_commit": dt(last_ms / 1000 if last_ms else None),
                        "age_seconds": None if age is None else round(age, 3),
                        "fresh": fresh,
                    }
                )
        if any(v is False for v in verdicts):
            status = "stale"
        elif not verdicts or any(v is None for v in verdicts):
            status = "unknown"
        else:
            status = "fresh"
        return {
            "objective": p.freshness,
            "objective_seconds": objective,
            "status": status,
            "checked_at": dt(now),
            "tables": tables,
        }
