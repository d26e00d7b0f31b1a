"""What every `lakegate` sub-command shares: exit codes, `--config` anywhere, `--output`.

Kept apart from app.py so the policy and audit command groups can use it without
importing the whole command tree.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from governance.errors import LakegateError
from governance.identity import InvalidName, canonical_user

# One meaning each; listed in `lakegate --help` and README.md ("Command line").
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and found a problem, or a statement failed in Spark
EXIT_USAGE = 2  # bad option, argument or path; missing or broken configuration; nothing to check
EXIT_DENIED = 3  # access denied or statement refused by the policies
EXIT_PARSE = 4  # the SQL statement does not parse
EXIT_UNAVAILABLE = 5  # could not start: port in use, Java or Spark unavailable

EXIT_CODES_HELP = """\b
Exit codes:
  0  success
  1  the command ran and found a problem (broken audit chain, policy errors, failed
     policy tests, widened access under --fail-on, failed checks) or Spark failed
  2  usage error: bad option, argument or path, missing or broken configuration,
     nothing to check
  3  access denied (or the statement is refused) by the policies
  4  the SQL statement does not parse
  5  could not start: address in use, Java or Spark unavailable"""

_CONFIG_KEY = "lakegate.config"


class Unavailable(LakegateError):
    """Something the command needs could not start (Spark, Java): exit 5, not a failure of
    the statement."""


F = TypeVar("F", bound=Callable[..., Any])


def _remember_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A `--config` typed on the command line wins wherever it stands; LAKEGATE_CONFIG fills
    in only when none was typed."""
    meta = ctx.find_root().meta
    typed = ctx.get_parameter_source(param.name or "config") is ParameterSource.COMMANDLINE
    if value is not None and (typed or _CONFIG_KEY not in meta):
        meta[_CONFIG_KEY] = value


def config_option(f: F) -> F:
    """`--config PATH` (env LAKEGATE_CONFIG), accepted before or after any sub-command."""
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        envvar="LAKEGATE_CONFIG",
        expose_value=False,
        callback=_remember_config,
        is_eager=True,
        help="path of lakegate.yaml (env LAKEGATE_CONFIG; default ./lakegate.yaml)",
    )(f)


def config_path() -> Path:
    """The configuration file this invocation uses."""
    return Path(click.get_current_context().find_root().meta.get(_CONFIG_KEY, "lakegate.yaml"))


def output_option(*choices: str, default: str) -> Callable[[F], F]:
    """`-o/--output` on every command that prints data; `--format` is the old spelling."""
    return click.option(
        "-o",
        "--output",
        "--format",
        "output",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="output format",
    )


def user_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """The one identity rule (governance/identity.py): look-alikes are a usage error."""
    try:
        return canonical_user(value)
    except InvalidName as e:
        raise click.BadParameter(str(e)) from None


def user_option(f: F) -> F:
    return click.option(
        "--user",
        "-u",
        required=True,
        envvar="LAKEGATE_USER",
        callback=user_name,
        help="the user to act as (env LAKEGATE_USER)",
    )(f)


def status(message: str) -> None:
    """Progress for long steps, on a terminal only: scripts read stderr as one error line."""
    if sys.stderr.isatty():
        click.echo(f"lakegate: {message}...", err=True)


def fail(message: str) -> None:
    """The one line a failing command leaves on stderr."""
    click.echo(f"lakegate: {message}", err=True)


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> None:
    """Rows as a headed table, a JSON array of objects or CSV with a header line."""
    if fmt == "json":
        click.echo(
            json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str, indent=1)
        )
    elif fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        for line in [columns, *cells]:
            click.echo(" | ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
            if line is columns:
                click.echo("-+-".join("-" * w for w in widths))
        click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


#: What a Spark line's extra installs (pyproject.toml): importing one without it means the
#: command needs Spark.
SPARK_PACKAGES = frozenset({"pyspark", "delta"})


def run(command: click.Command, argv: Sequence[str] | None, prog: str) -> int:
    """Run a click command and turn what it raises into one line and one exit code."""
    from catalog.catalog import CatalogError
    from catalog.delta import NotADeltaTable
    from governance.errors import AccessDenied, ConfigError, SqlParseError

    try:
        rv = command.main(
            args=None if argv is None else list(argv), prog_name=prog, standalone_mode=False
        )
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.UsageError as e:  # one line, like every other mistake
        where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        fail(f"{e.format_message()}{where}")
        return EXIT_USAGE
    except click.ClickException as e:
        e.show()
        return EXIT_FAILED
    except click.Abort:
        fail("aborted")
        return EXIT_FAILED
    except SqlParseError as e:
        fail(str(e))
        return EXIT_PARSE
    except AccessDenied as e:
        fail(str(e))
        return EXIT_DENIED
    except (ConfigError, CatalogError, NotADeltaTable) as e:
        fail(str(e))
        return EXIT_USAGE
    except Unavailable as e:
        fail(str(e))
        return EXIT_UNAVAILABLE
    except LakegateError as e:
        fail(str(e))
        return EXIT_FAILED
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in SPARK_PACKAGES:
            fail(f"unexpected error ({type(e).__name__})")
            return EXIT_FAILED
        from governance.spark_line import NO_SPARK

        fail(NO_SPARK)  # a command that needs Spark, installed without a Spark line
        return EXIT_UNAVAILABLE
    except Exception as e:  # a runtime error's message may carry data: its class only
        logged_unexpected(prog)
        fail(f"unexpected error ({type(e).__name__})")
        return EXIT_FAILED
    return int(rv or 0)


def logged_unexpected(prog: str) -> None:
    """The whole error, traceback and all, into the server log (`lakegate-server.log`), where
    a command has routed one, so a failure the caller sees only by its class can be read
    there. Without a routed log nothing is written: Python's last-resort handler would print
    it on the caller's stderr."""
    log = logging.getLogger("lakegate.errors")  # governance/execute/run.py's ERROR_LOG
    if log.handlers:
        log.exception("%s: unexpected error", prog)
