"""The policy set in force: loaded from the policy directory (or a git commit of it), swapped
in whole when a consistent new set loads, kept when a new one is broken (fail closed).

Kept apart from the session, which only asks for the set in force for each statement.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from catalog.catalog import Catalog
from catalog.products import dir_stamp
from governance.config import Config
from governance.errors import LakegateError
from governance.execute.run import ERROR_LOG
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.loader import is_policy_file, load_policy_dir, load_policy_text
from governance.policy.model import PolicySet
from governance.rewrite.dynamic_views import PolicySql

#: Hears every load: (took effect, first line of why not, content hash, version in force).
OnReload = Callable[[bool, str | None, str | None, str | None], None]


@dataclass(frozen=True)
class PolicyState:
    enforcer: PolicyEnforcer
    sql: PolicySql
    stamp: tuple  # file names, sizes and mtimes it was built from (git mode: the commit)
    version: str  # the policyVersion audit key: sha256:<content hash> or git:<commit>


class PoliciesInForce:
    """The current `PolicyState`; the first load must succeed, later ones may be refused."""

    def __init__(self, config: Config, catalog: Catalog, on_reload: OnReload) -> None:
        self.config = config
        self._catalog = catalog
        self._on_reload = on_reload
        self._reload_lock = threading.Lock()
        self._last_check = 0.0
        self._seen: tuple[tuple, float] | None = None  # a changed stamp and when first seen
        self._policy: PolicyState | None = None
        self.reload(initial=True)

    @property
    def current(self) -> PolicyState:
        assert self._policy is not None  # the first load succeeded, or __init__ raised
        return self._policy

    def _policy_stamp(self) -> tuple:
        """What identifies the policy set on disk: the configured ref's commit in git mode,
        else the YAML files' names, sizes and mtimes."""
        if self.config.policies_ref:
            return (git_commit(self.config.policies, self.config.policies_ref),)
        return dir_stamp(self.config.policies)

    def _load_snapshot(self, stamp: tuple) -> tuple[PolicySet, str]:
        """The policy set of `stamp` and its version: a git commit's tree (never the working
        files) or the directory (the caller re-checks the stamp afterwards)."""
        if self.config.policies_ref:
            commit = stamp[0]
            groups = self.config.identity.provider_groups()
            return git_policy_set(self.config.policies, commit, groups), f"git:{commit}"
        ps = load_policy_dir(self.config.policies, self.config.identity.provider_groups())
        return ps, ps.content_hash

    def reload(self, *, initial: bool = False) -> bool:
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
                    self._on_reload(
                        False, str(e).splitlines()[0] if str(e) else repr(e), None, kept
                    )
                    if initial or self._policy is None:
                        raise
                    self._policy = PolicyState(
                        self._policy.enforcer, self._policy.sql, stamp, self._policy.version
                    )
                    return False
                if self._policy_stamp() == stamp:
                    self._policy = PolicyState(
                        enforcer,
                        PolicySql(enforcer, self._catalog, self.config.mapping_inline_max_keys),
                        stamp,
                        version,
                    )
                    self._seen = None
                    self._on_reload(True, None, ps.content_hash, version)
                    return True
                time.sleep(0.05)
            if self._policy is None:
                raise LakegateError(
                    f"policy directory {self.config.policies} keeps changing; "
                    "no consistent snapshot to load"
                )
            return False

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
            self.reload()


def git_run(policies: Path, *args: str) -> bytes:
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


def git_commit(policies: Path, ref: str) -> str:
    """The commit `ref` names now (`--end-of-options`: a ref is never taken as an option)."""
    return (
        git_run(policies, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
        .decode()
        .strip()
    )


def git_policy_set(
    policies: Path, commit: str, provider_groups: Collection[str] | None = None
) -> PolicySet:
    """The policy files of the directory as committed in `commit`, never the working files."""
    return load_policy_text(git_policy_files(policies, commit), provider_groups)


def git_policy_files(policies: Path, commit: str) -> dict[str, str]:
    """The policy files' texts as committed in `commit`, by path relative to the directory."""
    # ls-tree lists paths relative to the policy directory; `commit:./name` reads them so
    names = git_run(policies, "ls-tree", "-r", "-z", "--name-only", commit, "--", ".")
    files: dict[str, str] = {}
    for name in names.decode().split("\0"):
        if name and is_policy_file(name):
            files[name] = git_run(policies, "show", f"{commit}:./{name}").decode("utf-8")
    return files
