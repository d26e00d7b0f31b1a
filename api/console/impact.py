"""The console's policy-impact run: `lakegate policy impact` for an admin in the browser.

Two policy sets are compared: OLD is the set in force (`live`) or a git revision of the
policy directory; NEW is a revision, `live`, or OLD's files with one file replaced (or
added) by YAML pasted into the form (a proposed change before it is committed). The run
counts rows on the live tables with Spark (governance/tools/impact.py), so it is an admin
act: only a caller who manages every table may start it, the form is CSRF-checked like
sign-in's, and an intent line is on the audit log before any count (`Service.write_intent`:
`cmd=consolePolicyImpact`, `proto=rest`), the request's own line its outcome. Only counts and
column states leave it, never a value.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api.access import manages, revision
from api.errors import ApiError
from governance.errors import LakegateError
from governance.policy.analysis import diff_policies
from governance.policy.loader import load_policy_text, policy_files
from governance.policy.model import PolicySet
from governance.policy.problems import PolicyError
from governance.policy.source import is_policy_file
from governance.session.policies_in_force import git_policy_files
from governance.tools.impact import Impact, policy_impact

if TYPE_CHECKING:
    from api.caller import Caller
    from api.deps import Service

LIVE = "live"
MAX_YAML = 256 * 1024  # characters of pasted YAML
MAX_FORM = MAX_YAML * 3 + 8192  # bytes: the YAML form-encoded (a multi-byte char: 9 bytes, rare)
DEFAULT_TIME_LIMIT = 60.0  # seconds per count: a page must answer
_PART = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}"
FILE_NAME = re.compile(rf"^{_PART}(/{_PART}){{0,4}}$")  # a relative path, no `..`


@dataclass
class ImpactForm:
    """What the form asks for, checked."""

    old: str
    new: str
    yaml: str
    file: str
    sample: float | None
    time_limit: float

    @classmethod
    def parse(cls, form: dict[str, str]) -> ImpactForm:
        old = form.get("old", "").strip() or LIVE
        new = form.get("new", "").strip() or LIVE
        text = form.get("yaml", "")
        if len(text) > MAX_YAML:
            raise ApiError(400, f"the pasted YAML is longer than {MAX_YAML} characters")
        name = form.get("file", "").strip() or "proposed.yaml"
        if text.strip() and (not FILE_NAME.fullmatch(name) or not is_policy_file(name)):
            raise ApiError(
                400, "the file name must be a policy file's path in the directory (NAME.yaml)"
            )
        return cls(
            old,
            new,
            text if text.strip() else "",
            name,
            _number(form.get("sample", ""), "sample", 0, 1, None),
            _number(form.get("time_limit", ""), "time limit", 0, 3600, DEFAULT_TIME_LIMIT) or 0,
        )


def _number(text: str, what: str, low: float, high: float, default: float | None) -> float | None:
    if not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, f"{what}: not a number") from None
    if not low < value <= high:
        raise ApiError(400, f"{what}: must be more than {low:g} and at most {high:g}")
    return value


def is_admin(svc: Service, caller: Caller) -> bool:
    """Manages every table of the catalog (the admins' `manage` on `*`)."""
    tables = list(svc.discovery.snapshot().tables.values())
    return bool(tables) and all(manages(caller, t) for t in tables)


def _files(svc: Service, ref: str) -> dict[str, str]:
    """The policy files of a side, by path relative to the directory: a revision's as
    committed; `live`'s as the directory holds them (git mode: the configured ref's)."""
    cfg = svc.lg.config
    if ref == LIVE and not cfg.policies_ref:
        root = cfg.policies
        return {p.relative_to(root).as_posix(): p.read_text("utf-8") for p in policy_files(root)}
    commit = revision(svc, cfg.policies_ref if ref == LIVE else ref)
    try:
        return git_policy_files(cfg.policies, commit)
    except LakegateError:
        raise ApiError(400, "the policy files of that revision cannot be read") from None


def _load(svc: Service, files: dict[str, str]) -> PolicySet:
    try:
        return load_policy_text(files, svc.lg.config.identity.provider_groups())
    except PolicyError as e:
        first = next((p for p in e.problems if p.severity == "error"), None)
        where = f"{first.file}:{first.line}: {first.message}" if first else "invalid policies"
        raise ApiError(400, f"the policies do not load: {where}"[:400]) from None
    except Exception as e:  # fail closed, one line
        raise ApiError(400, f"the policies do not load: {type(e).__name__}") from None


def policy_sets(svc: Service, f: ImpactForm) -> tuple[PolicySet, PolicySet, str, str]:
    """(old set, new set, old label, new label)."""
    if f.old == LIVE:
        before, old_label = svc.lg.enforcer.policy_set, f"live ({svc.lg.policy_version})"
    else:
        old_label = revision(svc, f.old)
        before = _load(svc, _files(svc, f.old))
    if f.yaml:
        files = _files(svc, f.old)
        replaced = f.file in files
        files[f.file] = f.yaml
        verb = "replaced" if replaced else "added"
        return before, _load(svc, files), old_label, f"{old_label} with {f.file} {verb} (pasted)"
    if f.new == LIVE:
        return before, svc.lg.enforcer.policy_set, old_label, f"live ({svc.lg.policy_version})"
    return before, _load(svc, _files(svc, f.new)), old_label, revision(svc, f.new)


def run(svc: Service, caller: Caller, f: ImpactForm) -> dict[str, Any]:
    """The impact and the access diff of OLD -> NEW (blocking: Spark counts rows)."""
    before, after, old_label, new_label = policy_sets(svc, f)
    groups = sorted(svc.lg.config.identity.provider_groups() or ())
    tables = list(svc.lg.catalog.tables())
    diff = diff_policies(before, after, tables, groups)
    svc.write_intent(caller.audit)  # nothing is counted without it; the request's line closes it
    started = time.perf_counter()
    try:
        impact: Impact = policy_impact(
            svc.lg,
            before,
            after,
            provider_groups=groups,
            sample=f.sample,
            time_limit=f.time_limit,
        )
    except Exception as e:
        reason = str(e).splitlines()[0] if isinstance(e, LakegateError) else type(e).__name__
        raise ApiError(400 if isinstance(e, LakegateError) else 500, reason) from None
    by_user: dict[str, dict[str, list]] = {}
    for c in diff.to_json():
        side = "gains" if c["widens"] else "loses"
        by_user.setdefault(c["user"], {"gains": [], "loses": []})[side].append(c)
    return {
        "old_label": old_label,
        "new_label": new_label,
        "impact": impact,
        "entries": [
            {
                **e.to_json(),
                "before_text": e.before.text(impact.estimated),
                "after_text": e.after.text(impact.estimated),
                "gained": e.gained_rows,
                "lost": e.lost_rows,
            }
            for e in impact.entries
        ],
        "markdown": impact.to_markdown(),
        "by_user": sorted(by_user.items()),
        "seconds": round(time.perf_counter() - started, 1),
    }
