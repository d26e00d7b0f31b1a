"""The `lakegate` command: demo, governed SQL, explain, catalog, policy, audit, serve, whoami,
tables, token, identity and doctor. Built on click for the conventions users expect (`--version`,
`--help` everywhere, shell completion, options before or after sub-commands).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from catalog.catalog import CatalogError
from cli.audit import audit
from cli.certs import certs
from cli.connect import connect
from cli.identity import identity
from cli.kit import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Unavailable,
    config_option,
    config_path,
    fail,
    output_option,
    print_rows,
    run,
    status,
    user_name,
    user_option,
)
from cli.policy import policy
from cli.serve import serve

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="lakegate", prog_name="lakegate", message="%(prog)s %(version)s")
@config_option
def cli() -> None:
    """Lakegate: governed SQL on Delta Lake tables, and the tools to run it."""


cli.add_command(policy)
cli.add_command(audit)
cli.add_command(serve)
cli.add_command(connect)
cli.add_command(certs)
cli.add_command(identity)


def _open() -> Any:
    """Spark's own console output goes to a log beside the config, keeping stdout for
    results and stderr for one-line errors."""
    from governance.session.governed import Lakegate

    path = config_path()
    log = path.resolve().parent / "lakegate-spark.log"

    class Announcing(Lakegate):
        """Says so on a terminal before Spark starts (20-60 s; longer on a busy machine); a Spark
        that cannot start is one line naming the log, not a Java trace."""

        _started = False

        @property
        def spark(self) -> Any:
            if self._started:
                return super().spark
            status("starting Spark (20-60 s; a running gateway answers at once: --gateway)")
            try:
                spark = super().spark
            except Exception as e:
                raise Unavailable(
                    f"Spark could not start ({type(e).__name__}); see {log}"
                ) from None
            self._started = True
            return spark

    return Announcing.open(
        path, spark_log=log, error_log=path.resolve().parent / "lakegate-server.log"
    )


def _config() -> Any:
    from governance.config import Config

    return Config.load(config_path())


@cli.command("demo")
@config_option
@click.option(
    "--dir",
    "directory",
    default="demo-lakehouse",
    show_default=True,
    help="where to build it: a new or empty folder, or a previous demo",
)
@click.option(
    "--force",
    is_flag=True,
    help="build in a non-empty folder (never replacing what the demo did not make)",
)
def cmd_demo(directory: str, force: bool) -> int:
    """Build a demo lakehouse and query it as four personas."""
    from governance.tools.demo import DemoRefused, run_demo

    try:
        return run_demo(Path(directory).resolve(), force=force)
    except DemoRefused as e:
        fail(str(e))
        return EXIT_USAGE


@cli.command("sql")
@config_option
@click.option(
    "--user",
    "-u",
    envvar="LAKEGATE_USER",
    callback=lambda ctx, param, value: None if value is None else user_name(ctx, param, value),
    help="the user to act as (env LAKEGATE_USER); not with --gateway",
)
@click.option(
    "--gateway",
    metavar="sc://HOST:PORT",
    envvar="LAKEGATE_GATEWAY",
    help="send the statement to this `lakegate connect` gateway instead of starting Spark "
    "(env LAKEGATE_GATEWAY)",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="file holding the gateway token (default: env LAKEGATE_TOKEN)",
)
@click.option(
    "--ca-file",
    type=click.Path(dir_okay=False),
    envvar="LAKEGATE_CA_FILE",
    help="PEM CA that signed the gateway's certificate (env LAKEGATE_CA_FILE; "
    "default: the system's)",
)
@click.option(
    "--local",
    is_flag=True,
    help="start Spark here even when a configured gateway is running (needs --user)",
)
@output_option("table", "json", "csv", default="table")
@click.argument("statement")
def cmd_sql(
    user: str | None,
    gateway: str | None,
    token_file: str | None,
    ca_file: str | None,
    local: bool,
    output: str,
    statement: str,
) -> int:
    """Run one governed statement, through a running gateway or here as a user.

    With --gateway, or by default when the config's gateway (`connect:` with TLS) answers and
    a token is at hand, the statement goes to `lakegate connect` over TLS and the gateway acts
    as the token's user: no Spark starts here. --user (acting as someone) is the trusted local
    mode, as is --local; Spark then starts in this process (20-60 s)."""
    from cli.remote import configured_gateway, sql_on, sql_via_gateway

    if gateway is not None:
        if user is not None or local:
            flag = "--user (or LAKEGATE_USER)" if user is not None else "--local"
            fail(f"{flag} cannot go with --gateway: the gateway acts as the token's user")
            return EXIT_USAGE
        return sql_via_gateway(gateway, token_file, ca_file, statement, output)
    if user is None and not local:
        found, why = configured_gateway(config_path(), token_file, ca_file)
        if found is not None:
            return sql_on(found, statement, output)
        fail(
            f"no running gateway to send this to ({why}); give --user to run it here, "
            "starting Spark (20-60 s)"
        )
        return EXIT_USAGE
    if token_file is not None or (
        click.get_current_context().get_parameter_source("ca_file") is ParameterSource.COMMANDLINE
    ):
        fail("--token-file and --ca-file go with --gateway")
        return EXIT_USAGE
    if user is None:
        raise click.MissingParameter(param_hint="'--user' / '-u'", param_type="option")
    lg = _open()
    try:
        df = lg.session(user).sql(statement)
        rows = [tuple(r) for r in df.collect()]
        print_rows(df.columns, rows, output)
    finally:
        lg.close()
    return EXIT_OK


@cli.command("explain")
@config_option
@user_option
@click.argument("statement")
def cmd_explain(user: str, statement: str) -> int:
    """Print the Spark SQL a statement becomes (starts no Spark)."""
    lg = _open()
    try:
        click.echo(lg.session(user).explain(statement))
    finally:
        lg.close()
    return EXIT_OK


@cli.group("catalog")
@config_option
def catalog() -> None:
    """Catalog administration."""


@catalog.command("register")
@config_option
@click.argument("name", metavar="CATALOG.SCHEMA.TABLE")
@click.argument("path", type=click.Path(file_okay=False))
@click.option("--replace", is_flag=True, help="replace a table registered under NAME")
def cmd_catalog_register(name: str, path: str, replace: bool) -> int:
    """Register an existing Delta table.

    The name, the path and whether the name is taken are checked before Spark starts."""
    parts = name.lower().split(".")
    if len(parts) != 3 or not all(parts):
        fail(f"'{name}' is not a three-part name catalog.schema.table")
        return EXIT_USAGE
    location = Path(path).resolve()
    if not location.is_dir():
        fail(f"{location}: no such directory")
        return EXIT_USAGE
    if not (location / "_delta_log").is_dir():
        fail(f"{location} is not a Delta table (no _delta_log)")
        return EXIT_USAGE
    lg = _open()
    try:
        if not replace and lg.catalog.table(*parts) is not None:
            fail(f"table {'.'.join(parts)} already exists (--replace replaces it)")
            return EXIT_USAGE
        try:  # before Spark reads the table (the registration checks again)
            lg.catalog.check_location_free(*parts, str(location))
        except CatalogError as e:
            fail(str(e))
            return EXIT_USAGE
        info = lg.register_table(name, str(location), replace=replace)
        click.echo(f"registered {info.full_name} -> {info.location} ({len(info.columns)} columns)")
    finally:
        lg.close()
    return EXIT_OK


@catalog.command("list")
@config_option
@output_option("table", "json", "csv", default="table")
def cmd_catalog_list(output: str) -> int:
    """List registered tables."""
    from catalog.catalog import Catalog
    from catalog.store import open_store

    cfg = _config()
    cat = Catalog(open_store(cfg.catalog), cfg.warehouse)
    print_rows(
        ["table", "domain", "location"],
        [(t.full_name, t.domain, t.location) for t in cat.tables()],
        output,
    )
    return EXIT_OK


@catalog.command("leftovers")
@config_option
@click.option("--remove", is_flag=True, help="delete them (asks first; each removal audited)")
@click.option("--yes", is_flag=True, help="with --remove: do not ask")
@output_option("table", "json", "csv", default="table")
def cmd_catalog_leftovers(remove: bool, yes: bool, output: str) -> int:
    """List crash leftovers in the warehouse; --remove deletes them.

    Set-aside `<table>.orphan-*` directories and Delta tables no registered table owns
    (a CREATE killed before its registration). No Spark."""
    from governance.execute.leftovers import find_leftovers

    lg = _open()
    try:
        found = find_leftovers(lg.catalog)
        print_rows(["leftover", "kind"], [(str(x.path), x.kind) for x in found], output)
        if not remove or not found:
            return EXIT_OK
        if not yes and not click.confirm(f"delete these {len(found)} director(ies)?", err=True):
            fail("nothing removed")
            return EXIT_FAILED
        for item in found:
            lg.remove_leftover(item.path)
        click.echo(
            f"removed {len(found)} leftover(s); each is on record (cmd=removeLeftover)", err=True
        )
    finally:
        lg.close()
    return EXIT_OK


def _policies() -> Any:
    """The enforcer for the configured policies (no Spark, no audit: nothing changes)."""
    from governance.policy.enforcer import PolicyEnforcer
    from governance.policy.loader import load_policy_dir

    cfg = _config()
    return PolicyEnforcer(load_policy_dir(cfg.policies, cfg.identity.provider_groups()))


@cli.command("whoami")
@config_option
@user_option
@output_option("table", "json", "csv", default="table")
def cmd_whoami(user: str, output: str) -> int:
    """A user's groups and owned domains.

    Groups with nesting resolved, as the REST /whoami answers."""
    enforcer = _policies()
    ident = enforcer.identity(user)
    owned = sorted(
        d.name
        for d in enforcer.policy_set.domains.values()
        if any(
            p.kind == "any"
            or (p.kind == "user" and p.name == ident.user)
            or (p.kind == "group" and p.name in ident.groups)
            for p in d.owners
        )
    )
    if output == "json":
        click.echo(
            json.dumps(
                {"user": ident.user, "groups": sorted(ident.groups), "domains_owned": owned},
                indent=1,
            )
        )
    else:
        print_rows(
            ["user", "groups", "domains_owned"],
            [(ident.user, " ".join(sorted(ident.groups)), " ".join(owned))],
            output,
        )
    return EXIT_OK


@cli.command("tables")
@config_option
@user_option
@output_option("table", "json", "csv", default="table")
def cmd_tables(user: str, output: str) -> int:
    """The tables a user may read.

    Privileges, visible and masked columns, and whether a row filter applies (its text
    stays with the table's managers, as in the REST API)."""
    from catalog.catalog import Catalog
    from catalog.store import open_store
    from governance.policy.analysis import effective_access

    cfg = _config()
    enforcer = _policies()
    rows = []
    for t in Catalog(open_store(cfg.catalog), cfg.warehouse).tables():
        acc = effective_access(enforcer, user, t)
        if acc.can_select:
            rows.append(
                (
                    t.full_name,
                    " ".join(acc.privileges),
                    len(acc.columns),
                    " ".join(m[0] for m in acc.masks),
                    bool(acc.row_filters),
                )
            )
    print_rows(["table", "privileges", "columns", "masked", "row_filter"], rows, output)
    return EXIT_OK


@cli.group("token")
@config_option
def token() -> None:
    """API bearer tokens for `lakegate serve`."""


def _ttl(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """Seconds, or a number with s, m, h or d."""
    if value is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = value.strip().lower()
    scale = units.get(text[-1:], 0)
    digits = text[:-1] if scale else text
    if not digits.isdigit() or int(digits) < 1:
        raise click.BadParameter("a positive number of seconds, or e.g. 30m, 12h, 7d")
    return int(digits) * (scale or 1)


@token.command("create")
@config_option
@user_option
@click.option(
    "--ttl",
    callback=_ttl,
    help="signed token valid this long (e.g. 3600, 12h, 7d); needs api.secret",
)
@click.option(
    "--save",
    is_flag=True,
    help="add the token's SHA-256 under api.tokens in lakegate.yaml (the token itself is "
    "printed once and stored nowhere); running servers accept it within a second",
)
@output_option("text", "json", default="text")
def cmd_token_create(user: str, ttl: int | None, save: bool, output: str) -> int:
    """Print a new token for a user.

    Without --ttl, a random token and the line to add under api.tokens in lakegate.yaml
    (only its SHA-256 is stored; --save adds it); with --ttl, a token signed with
    api.secret that expires."""
    import secrets

    from api.auth import sign_token, token_hash

    user = user.lower()
    if ttl is not None:
        secret = _config().api.secret
        if secret is None:
            fail(f"--ttl signs the token with api.secret, and {config_path()} has none")
            return EXIT_USAGE
        signed = sign_token(secret, user, ttl)
        expires = int(signed.rsplit(".", 2)[1])
        if output == "json":
            click.echo(json.dumps({"user": user, "token": signed, "expires": expires}))
        else:
            click.echo(signed)
            click.echo(
                f"# signed with api.secret; expires in {ttl} s; nothing to add to lakegate.yaml"
            )
        return EXIT_OK
    new = secrets.token_urlsafe(32)
    line = f"- {{user: {user}, sha256: {token_hash(new)}}}"
    if save:
        return _save_token(user, new, output)
    if output == "json":
        click.echo(json.dumps({"user": user, "token": new, "config_line": line}))
    else:
        click.echo(new)
        click.echo(
            "# add under api: tokens: in lakegate.yaml (the token itself is not "
            "stored; keep it secret):"
        )
        click.echo(f"    {line}")
    return EXIT_OK


def _save_token(user: str, token: str, output: str) -> int:
    """Store only the hash, then print the token this once."""
    from api.auth import token_hash
    from cli.settings import update_config

    path = config_path().resolve()
    if not path.is_file():
        fail(f"config file {path} not found")
        return EXIT_USAGE

    def add(cfg: dict[str, Any]) -> None:
        api = cfg.get("api") if isinstance(cfg.get("api"), dict) else {}
        api["tokens"] = [*(api.get("tokens") or []), {"user": user, "sha256": token_hash(token)}]
        cfg["api"] = api

    update_config(path, add)
    if output == "json":
        click.echo(json.dumps({"user": user, "token": token, "saved": str(path)}))
    else:
        click.echo(token)
        click.echo(
            f"# {user}'s token; its SHA-256 is now under api.tokens in {path.name}. It is "
            "shown only now: keep it secret"
        )
    click.echo(
        "lakegate: running `lakegate serve` and `lakegate connect` servers accept it within "
        "a second (they re-read the file's tokens, as policy files)",
        err=True,
    )
    return EXIT_OK


@cli.command("doctor")
@config_option
@output_option("table", "json", "csv", default="table")
def cmd_doctor(output: str) -> int:
    """Check that this setup is ready.

    Config, Java, Delta jars, catalog, policies, audit directory, file modes, crash
    leftovers, secrets, tokens, certificates and identity providers (docs/identity.md); one
    verdict line."""
    from cli.doctor import run_checks

    checks = run_checks(config_path())
    print_rows(
        ["check", "status", "detail"], [(c.name, c.status, c.detail) for c in checks], output
    )
    failed = [c.name for c in checks if c.status == "FAIL"]
    verdict = (
        f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "all checks passed"
    )
    click.echo(f"lakegate doctor: {verdict}", err=output != "table")
    return EXIT_FAILED if failed else EXIT_OK


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def cmd_completion(shell: str) -> int:
    """Print the shell completion script.

    For example: eval "$(lakegate completion bash)"."""
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    assert complete is not None  # every choice above is one of click's shells
    click.echo(complete(cli, {}, "lakegate", "_LAKEGATE_COMPLETE").source())
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    from governance.files import owner_only_umask

    owner_only_umask()  # everything a command writes (and its Spark) is owner-only
    return run(cli, argv, prog="lakegate")
