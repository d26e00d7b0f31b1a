"""`lakegate policy ...`: review tools for YAML policies. All but `test --spark` run without
Spark (fast, in any CI)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from cli.kit import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    config_option,
    config_path,
    fail,
    output_option,
    status,
    user_name,
)
from governance.identity import InvalidName, canonical_group
from governance.policy.analysis import (
    diff_policies,
    effective_access,
    groups_who_can_see,
    load_policies,
    tables_from_policies,
    who_can_see,
)
from governance.policy.enforcer import PolicyEnforcer
from governance.policy.validate import format_problems, validate_policy_dir


@click.group("policy")
@config_option
def policy() -> None:
    """Validate, test, diff and explain policies."""


@policy.command("validate")
@config_option
@click.argument("directory", default="policies", metavar="DIR")
@output_option("text", "json", default="text")
@click.option("--strict", is_flag=True, help="warnings fail too (exit 1), e.g. in CI")
def cmd_validate(directory: str, output: str, strict: bool) -> int:
    """Check a policy directory; exit 1 on errors (and on warnings with --strict)."""
    path = Path(directory)
    if not path.is_dir():
        fail(f"policy directory {path} not found")
        return EXIT_USAGE
    catalog = _catalog_tables()
    tables = None if catalog is None else set(catalog)
    problems = validate_policy_dir(path, tables, _provider_groups())
    if catalog is not None:  # tags moved outside Lakegate (governance.policy.tag_rights)
        from governance.policy.tag_rights import tag_state_problems

        problems += tag_state_problems(catalog.values())
    if strict:
        problems = [replace(p, severity="error") for p in problems]
    errors = [p for p in problems if p.severity == "error"]
    if output == "json" or problems:
        click.echo(format_problems(problems, output))  # type: ignore[arg-type]
    if output == "text":
        warnings = len(problems) - len(errors)
        click.echo(f"{path}: {len(errors)} error(s), {warnings} warning(s)")
    return EXIT_FAILED if errors else EXIT_OK


@policy.command("test")
@config_option
@click.argument("directory", default="policies", metavar="DIR")
@click.option("--tests", "tests_dir", help="directory of test files (default DIR/tests)")
@click.option("--spark", is_flag=True, help="also check rows on real Delta tables")
@click.option(
    "--require-spark",
    is_flag=True,
    help="check rows on real Delta tables and fail if any case is skipped",
)
def cmd_test(directory: str, tests_dir: str | None, spark: bool, require_spark: bool) -> int:
    """Run policy test cases (YAML). Without --spark, cases with row expectations are
    skipped and the summary says how many."""
    from governance.tools.policytests import run_tests

    policy_dir = Path(directory)
    where = Path(tests_dir) if tests_dir else policy_dir / "tests"
    files = sorted([*where.rglob("*.yaml"), *where.rglob("*.yml")])
    if not files:
        fail(f"no policy test files under {where}")
        return EXIT_USAGE
    cfg = _config()  # its identity: section, when one is at hand
    if spark or require_spark:
        status("starting Spark to check rows on Delta tables (20-60 s)")
    results = run_tests(
        policy_dir,
        files,
        spark=spark or require_spark,
        spark_log=config_path().resolve().parent / "lakegate-spark.log",
        identity=None if cfg is None else cfg.identity,
    )
    for r in results:
        line = f"{r.status.upper():7} {r.case.file} :: {r.case.name}"
        click.echo(line + (f"\n        {r.message}" if r.message else ""))
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    click.echo(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    if counts["skipped"]:
        click.echo(
            f"WARNING: {counts['skipped']} of {len(results)} case(s) were NOT checked "
            "(row expectations need --spark; --require-spark fails on skips)",
            err=True,
        )
    if counts["failed"] or (require_spark and counts["skipped"]):
        return EXIT_FAILED
    return EXIT_OK


def _config() -> Any:
    """The lakegate.yaml at hand (--config, else ./lakegate.yaml), or None without one."""
    cfg_path = config_path()
    if not cfg_path.is_file():
        return None
    from governance.config import Config

    return Config.load(cfg_path)


def _provider_groups() -> dict[str, str] | None:
    """Group -> identity source that can send it, with an `identity:` section; else None
    (policies then define every group they name, docs/identity.md)."""
    cfg = _config()
    return None if cfg is None else cfg.identity.provider_groups()


def _catalog_tables() -> dict[str, Any] | None:
    """The catalog's tables by full name when a lakegate.yaml is at hand, else None."""
    cfg = _config()
    if cfg is None:
        return None
    from catalog.catalog import Catalog
    from catalog.store import open_store

    return {t.full_name: t for t in Catalog(open_store(cfg.catalog), cfg.warehouse).tables()}


def _group_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> frozenset[str]:
    """`--group` values in their canonical spelling; an invalid name is a usage error."""
    try:
        return frozenset(canonical_group(v) for v in value)
    except InvalidName as e:
        raise click.BadParameter(str(e)) from None


def _tables(enforcer: PolicyEnforcer) -> dict[str, Any]:
    """Catalog tables when a lakegate.yaml is at hand, else the tables policies name."""
    tables = _catalog_tables()
    if tables:
        return tables
    return {t.full_name: t for t in tables_from_policies(enforcer.policy_set)}


@policy.command("explain")
@config_option
@click.option(
    "--user", "-u", required=True, callback=user_name, help="the user whose rights to show"
)
@click.option(
    "--group",
    "-g",
    "groups",
    multiple=True,
    callback=_group_names,
    help="a policy group the user's token carries (repeat; after the source's mapping)",
)
@click.option("--dir", "directory", default="policies", help="policy directory or git revision")
@output_option("text", "json", default="text")
@click.argument("table")
def cmd_explain(user: str, groups: frozenset[str], directory: str, output: str, table: str) -> int:
    """A user's effective rights on a table (with --group: when the identity provider
    puts the user in these groups)."""
    enforcer = PolicyEnforcer(load_policies(directory, provider_groups=_provider_groups()))
    info = _tables(enforcer).get(table.lower())
    if info is None:
        fail(f"table {table} is not in the catalog or the policies")
        return EXIT_USAGE
    acc = effective_access(enforcer, user, info, groups)
    ident = enforcer.identity(user, groups)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "user": user,
                    "groups": sorted(ident.groups),
                    "provider_groups": sorted(groups),
                    "table": info.full_name,
                    **acc.to_dict(),
                },
                indent=1,
            )
        )
        return EXIT_OK
    click.echo(f"{user} (groups: {', '.join(sorted(ident.groups)) or 'none'}) on {info.full_name}")
    none = "none (the table does not exist for this user)"
    click.echo(f"  privileges : {', '.join(acc.privileges) or none}")
    if acc.can_select:
        click.echo(f"  columns    : {', '.join(acc.columns)}")
        for col, mask, pid in acc.masks:
            click.echo(f"  mask       : {col} -> {mask} (policy {pid})")
        for fid, kind, where in acc.row_filters:
            click.echo(f"  row filter : {fid} ({kind}): {where}")
        for pid, mapped in acc.mapping_tables:
            click.echo(f"  mapping    : {mapped} (read by {pid} with the policy's rights)")
        for pid, column, tag in acc.tag_matches:
            click.echo(f"  by tag     : {pid} applies through column {column} (tag {tag})")
        for column, tags in acc.governed_tags:
            click.echo(
                f"  governed   : {column} tagged {', '.join(tags)} (applied or propagated "
                "through Lakegate; removed only with APPLY_TAG)"
            )
        if acc.aggregate is not None:
            ids, size, action, identifying = acc.aggregate
            click.echo(
                f"  aggregate  : aggregate-only, groups of at least {size} rows, smaller "
                f"groups: {action} (policy {', '.join(ids)})"
                + (f"; identifying columns {', '.join(identifying)}" if identifying else "")
            )
    click.echo(f"  decided by : {', '.join(acc.decided_by) or 'default deny'}")
    if acc.error:
        click.echo(f"  ERROR      : {acc.error}")
    return EXIT_OK


@policy.command("who-can-see")
@config_option
@click.option("--dir", "directory", default="policies", help="policy directory or git revision")
@output_option("text", "json", default="text")
@click.argument("target", metavar="CATALOG.SCHEMA.TABLE[.COLUMN]")
def cmd_who_can_see(directory: str, output: str, target: str) -> int:
    """Who can read a table or column."""
    provider = _provider_groups()
    enforcer = PolicyEnforcer(load_policies(directory, provider_groups=provider))
    tables = _tables(enforcer)
    name = target.lower()
    table = tables.get(name)
    column = None
    if table is None and "." in name:
        base, _, column = name.rpartition(".")
        table = tables.get(base)
    if table is None:
        fail(f"{target} is not in the catalog or the policies")
        return EXIT_USAGE
    rows = who_can_see(enforcer, table, column)
    group_rows = groups_who_can_see(enforcer, table, column, provider)
    if output == "json":
        found = [{"user": u, **a.to_dict()} for u, a in rows]
        found += [{"group": g, "source": src, **a.to_dict()} for g, src, a in group_rows]
        click.echo(json.dumps(found, indent=1))
        return EXIT_OK
    click.echo(f"who can see {table.full_name}{'.' + column if column else ''}:")
    for u, acc in rows:
        click.echo(f"  {u:20} {_how(acc, column)}")
    if not rows:
        click.echo("  nobody")
    if group_rows:
        click.echo("a member of (the group alone, as a token would say):")
    for g, src, acc in group_rows:
        label = f"group:{g}" + (" (from provider)" if src == "provider" else "")
        click.echo(f"  {label:20} {_how(acc, column)}")
    return EXIT_OK


def _how(acc: Any, column: str | None) -> str:
    masks = {c.lower(): m for c, m, _ in acc.masks}
    how = f"masked ({masks[column]})" if column and column in masks else "clear"
    detail = how if column else f"{len(acc.columns)} columns, {len(acc.masks)} masked"
    filters = (
        f", rows filtered by {', '.join(f[0] for f in acc.row_filters)}" if acc.row_filters else ""
    )
    return detail + filters


@policy.command("diff")
@config_option
@click.argument("old")
@click.argument("new")
@click.option("--dir", "directory", default="policies", help="policy directory inside the repo")
@output_option("markdown", "json", default="markdown")
@click.option(
    "--fail-on",
    type=click.Choice(["widen", "any"]),
    help="exit 1 when access widens (widen) or changes at all (any): for CI",
)
def cmd_diff(old: str, new: str, directory: str, output: str, fail_on: str | None) -> int:
    """Change in effective access between two policy sets (directories or git revisions,
    e.g. main, HEAD~1)."""
    provider = _provider_groups()
    before = load_policies(old, policy_dir=directory, provider_groups=provider)
    after = load_policies(new, policy_dir=directory, provider_groups=provider)
    tables = list(_tables(PolicyEnforcer(after)).values()) if config_path().is_file() else None
    d = diff_policies(before, after, tables, sorted(provider or ()))
    click.echo(
        json.dumps(d.to_json(), indent=1) if output == "json" else d.to_markdown(),
        nl=output == "json",
    )
    widened = [c for c in d.changes if c.widens]
    if fail_on == "widen" and widened:
        fail(f"policy diff: access widens in {len(widened)} change(s) (--fail-on widen)")
        return EXIT_FAILED
    if fail_on == "any" and d.changes:
        fail(f"policy diff: {len(d.changes)} change(s) in effective access (--fail-on any)")
        return EXIT_FAILED
    return EXIT_OK


@policy.command("impact")
@config_option
@click.argument("old")
@click.argument("new")
@click.option("--dir", "directory", default="policies", help="policy directory inside the repo")
@output_option("markdown", "json", default="markdown")
@click.option(
    "--sample",
    type=click.FloatRange(0, 1, min_open=True),
    help="count a seeded sample of this fraction of each table's rows (estimates)",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(0, min_open=True),
    help="seconds per count; a count that takes longer says `timed out`",
)
@click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    metavar="METRIC>N[:tag=T|:table=C.S.T|:who=NAME]",
    help="exit 1 when an affected user or group goes over N (repeat); METRIC: "
    "gain-rows, lose-rows, unmask-columns",
)
def cmd_impact(
    old: str,
    new: str,
    directory: str,
    output: str,
    sample: float | None,
    time_limit: float | None,
    fail_on: tuple[str, ...],
) -> int:
    """Rows and columns each affected user or group would see before and after a policy
    change, counted on the live tables (counts only; audited as cmd=policyImpact)."""
    from governance.policy.problems import PolicyError
    from governance.session.governed import Lakegate
    from governance.tools.impact import Threshold, audited_impact, policy_impact

    try:
        thresholds = [Threshold.parse(t) for t in fail_on]
    except ValueError as e:
        fail(str(e))
        return EXIT_USAGE
    cfg_path = config_path()
    if not cfg_path.is_file():
        fail(f"{cfg_path} not found: policy impact counts rows on the live tables")
        return EXIT_USAGE
    provider = _provider_groups()
    try:
        before = load_policies(old, policy_dir=directory, provider_groups=provider)
        after = load_policies(new, policy_dir=directory, provider_groups=provider)
    except (PolicyError, ValueError) as e:
        fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
        return EXIT_USAGE
    status("starting Spark to count rows on the live tables (20-60 s)")
    here = cfg_path.resolve().parent
    lg = Lakegate.open(
        cfg_path, spark_log=here / "lakegate-spark.log", error_log=here / "lakegate-server.log"
    )
    try:
        impact = audited_impact(
            lg,
            lambda: policy_impact(
                lg,
                before,
                after,
                provider_groups=sorted(provider or ()),
                sample=sample,
                time_limit=time_limit,
            ),
        )
    finally:
        lg.close()
    click.echo(
        json.dumps(impact.to_json(), indent=1) if output == "json" else impact.to_markdown(),
        nl=output == "json",
    )
    over = [(t, e) for t in thresholds for e in t.exceeded(impact)]
    for t, e in over:
        fail(f"policy impact: {e.who} on {e.table} exceeds --fail-on {t}")
    return EXIT_FAILED if over else EXIT_OK
