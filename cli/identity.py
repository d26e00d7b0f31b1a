"""`lakegate identity`: the organisation's identity sources (issue 37).

`lakegate identity ldap-sync --once` reads the groups of `identity.ldap` once, as the
schedule in `lakegate serve` does, and says what it found (counts; `--verbose` adds each
group's members): a check of the bind, base, filter and attributes before a server relies
on them. It only reads; the server's schedule is what applies the groups.
"""

from __future__ import annotations

import json

import click

from cli.kit import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    config_option,
    config_path,
    fail,
    output_option,
)


@click.group("identity")
@config_option
def identity() -> None:
    """The organisation's identity sources: LDAP groups."""


@identity.command("ldap-sync")
@config_option
@click.option("--once", is_flag=True, required=True, help="read the directory's groups once")
@click.option("--verbose", "-v", is_flag=True, help="list each group's members too")
@output_option("table", "json", default="table")
def cmd_ldap_sync(once: bool, verbose: bool, output: str) -> int:
    """Read identity.ldap's groups once and print what was found.

    Exit 1 when the directory cannot be read (unreachable, bind refused, no groups)."""
    from api.ldap_sync import LdapSync
    from governance.config import Config

    ldap = Config.load(config_path()).identity.ldap
    if ldap is None:
        fail(f"{config_path()} has no identity.ldap section")
        return EXIT_USAGE
    found: dict[str, frozenset[str]] = {}
    result = LdapSync(ldap, found.update).run_once()
    if result.error is not None:
        fail(result.error)
        return EXIT_FAILED
    summary = {
        "url": ldap.url,
        "groups": result.groups,
        "users": result.members,
        "memberships": sum(len(m) for m in found.values()),
        "skipped": dict(result.skipped_by_reason),
        "seconds": round(result.duration, 3),
    }
    if verbose:
        summary["members"] = {g: sorted(m) for g, m in sorted(found.items())}
    if output == "json":
        click.echo(json.dumps(summary, indent=1))
        return EXIT_OK
    click.echo(
        f"{ldap.url}: {result.groups} groups, {result.members} users, "
        f"{summary['memberships']} memberships, {result.skipped} skipped "
        f"({result.duration:.2f} s)"
    )
    for why, n in result.skipped_by_reason:
        click.echo(f"  skipped {n}: {why}")
    if verbose:
        for group, members in sorted(found.items()):
            click.echo(f"  {group}: {', '.join(sorted(members)) or '(no members)'}")
    return EXIT_OK
