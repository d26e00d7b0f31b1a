"""Load a directory of YAML policy files into one PolicySet, or refuse it with every problem.

The top of the policy pipeline: source (YAML with locations) -> build (the model) -> validate
(checks). Loading fails closed: with any error nothing is returned, so a reloading caller
keeps its last good policy set instead of running a half-read one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from governance.policy.build import ParseResult, gc_paused, parse_policy_dir, parse_policy_text
from governance.policy.model import PolicySet
from governance.policy.problems import PolicyError, Problem
from governance.policy.source import is_policy_file, policy_files
from governance.policy.validate import validate_parsed

__all__ = [
    "PolicyError",
    "Problem",
    "is_policy_file",
    "load_policy_dir",
    "load_policy_text",
    "policy_files",
]


def load_policy_dir(path: str | Path, provider_groups: Collection[str] | None = None) -> PolicySet:
    """Read, merge and validate every policy file under `path`; raise PolicyError on any error.
    `provider_groups`: what the configured identity sources can send
    (`IdentityConfig.provider_groups`), so policies may name them without `groups:`."""
    return _checked(parse_policy_dir(path), provider_groups)


def load_policy_text(
    files: Mapping[str, str], provider_groups: Collection[str] | None = None
) -> PolicySet:
    """Same as load_policy_dir over in-memory files (name -> YAML), e.g. from a git revision.

    Every given file is loaded; filter names with `is_policy_file` first if they may include
    policy tests.
    """
    return _checked(parse_policy_text(files), provider_groups)


def _checked(result: ParseResult, provider_groups: Collection[str] | None) -> PolicySet:
    with gc_paused():
        problems = result.problems + validate_parsed(result, None, provider_groups)
    if any(p.severity == "error" for p in problems):
        raise PolicyError(problems)
    return result.policy_set
