"""`lakegate audit report --html FILE`: the auditor's one-page report (audit/report.py for
the numbers, audit/report_html.py for the page); the column tags come from the configured
policies and the tree check from `audit_checkpoints`, as for `audit verify`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import click

from audit.checkpoint import CheckpointError
from audit.handler import log_files
from audit.query import parse_time
from audit.report import ReportScope, TagLookup, report_data
from audit.report_html import write_report
from cli.audit_tree import tree_check
from cli.kit import EXIT_FAILED, EXIT_OK, EXIT_USAGE, config_option, config_path, fail
from governance.errors import Refused


def policy_tags() -> TagLookup | None:
    """Column tags as the engine sees them: the policy files' `tags:`, and for a table in the
    catalog also its Delta tags and the tags Lakegate applied (governance.policy.tags); None
    without a configuration (the report then counts columns masked at least once). A table
    whose tags cannot be read raises TagsUnreadable: a report that silently missed them would
    under-count reads of tagged columns."""
    from catalog.catalog import Catalog
    from catalog.store import open_store
    from governance.config import Config
    from governance.policy.loader import load_policy_dir
    from governance.policy.tags import column_tags

    cfg = config_path()
    if not cfg.is_file():
        return None
    config = Config.load(cfg)
    policies = load_policy_dir(config.policies, config.identity.provider_groups())
    stored = "://" in config.catalog or Path(config.catalog).exists()
    catalog = Catalog(open_store(config.catalog), config.warehouse) if stored else None
    known: dict[str, Mapping[str, frozenset[str]]] = {}

    def lookup(table: str, column: str) -> frozenset[str]:
        parts = table.lower().split(".")
        if len(parts) != 3:
            return frozenset()
        if table not in known:
            info = catalog.table(*parts) if catalog is not None else None
            known[table] = {} if info is None else column_tags(policies, info).columns
        low = column.lower()
        return frozenset(policies.column_tags(*parts, low)) | known[table].get(low, frozenset())

    return lookup


def register(audit: click.Group, directory: Callable[[str | None, str], Path | None]) -> None:
    """Add `audit report` to the `audit` group."""

    @audit.command("report")
    @config_option
    @click.argument("audit_dir", required=False, metavar="[DIR]")
    @click.option(
        "--html", "html_file", required=True, type=click.Path(dir_okay=False),
        help="write the report to this HTML file (self-contained, opens offline)",
    )  # fmt: skip
    @click.option("--since", help="ISO-8601 time (inclusive, UTC unless zoned)")
    @click.option("--until", help="ISO-8601 time (exclusive)")
    @click.option("--table", help="only this table (full name or trailing parts)")
    @click.option("--public-key", help="check the Merkle tree with this public key (PEM)")
    @click.option("--witness", help="witness directory or URL (default: the configured one)")
    @click.option("--origin", help="the log's checkpoint origin (default: the configured one)")
    def cmd_report(
        audit_dir: str | None,
        html_file: str,
        since: str | None,
        until: str | None,
        table: str | None,
        public_key: str | None,
        witness: str | None,
        origin: str | None,
    ) -> int:
        """Write an HTML report: access over time, denials, tagged columns read clear or
        masked and by whom, chain and checkpoint status. Exit 1 when a chain or the tree is
        broken (the report is written and says so)."""
        where = directory(audit_dir, "report")
        if where is None:
            return EXIT_USAGE
        if not log_files(where):  # a report of nothing would show a chain "OK"
            fail(f"audit report: no audit log files in {where}: nothing to report")
            return EXIT_USAGE
        try:
            scope = ReportScope(
                since=parse_time(since) if since else None,
                until=parse_time(until) if until else None,
                table=table,
            )
            tree = tree_check(where, public_key, witness, origin)
        except (ValueError, CheckpointError) as exc:
            fail(f"audit report: {exc}")
            return EXIT_USAGE
        try:
            data = report_data(
                where, scope, tags=policy_tags(), tree=tree, generated=datetime.now(UTC)
            )
        except Refused as exc:  # a table's tags could not be read
            fail(f"audit report: {exc}")
            return EXIT_FAILED
        try:
            write_report(data, Path(html_file))
        except OSError as exc:
            fail(f"audit report: cannot write {html_file}: {exc.strerror}")
            return EXIT_USAGE
        integrity = data["integrity"]
        ok = integrity["chain"]["ok"] and (integrity["tree"] is None or integrity["tree"]["ok"])
        click.echo(f"audit report: {html_file} ({data['lines']} line(s) in range)"
                   + ("" if ok else "; the log FAILED verification"))  # fmt: skip
        return EXIT_OK if ok else EXIT_FAILED
