"""`lakegate audit report --html`: the page opened in a real browser (Debian's chromium,
headless, through Playwright) shows rendered plotly charts whose numbers, and the tables'
numbers, are those `lakegate audit query` and `lakegate audit question` give for the same
log; it loads nothing from the network; a tampered log shows a failed status."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

# Plain `pytest` (project not installed) must import the `audit` package, not tests/audit.
if (_ROOT := Path(__file__).resolve().parents[2]) and str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, sync_playwright

from audit import AuditEvent, AuditLog
from cli.audit import audit
from cli.kit import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from cli.kit import run as run_cli
from governance.config import Config

CHROMIUM = "/usr/bin/chromium"
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
H = timedelta(hours=1)
CUSTOMERS, ORDERS = "main.sales.customers", "main.sales.orders"
CHARTS = ("chart-access-table", "chart-access-user", "chart-denials", "chart-masked",
          "chart-readers")  # fmt: skip

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no /usr/bin/chromium")


def ev(qid: str, user: str, cmd: str, src: str, at: datetime, **kw: Any) -> AuditEvent:
    values: dict[str, Any] = {"allowed": True, "succeeded": True} | kw
    return AuditEvent(user=user, cmd=cmd, src=src, ts=at, query_id=qid, **values)


def planted(cfg: Config) -> None:
    """Reads of tagged columns (email, phone, ssn: tagged in policies/sales.yaml) clear and
    masked, an untagged table, denials with two reasons, a write with intent and outcome,
    an engine line (policyRead) the access counts leave out."""
    no_select = f"no select on {CUSTOMERS}"
    batches = [
        [ev("q1", "alice", "select", CUSTOMERS, T0, columns=("id", "email"),
            masked=(("email", "hash"),))],
        [ev("q2", "bob", "select", CUSTOMERS, T0 + H, columns=("id", "email", "phone"))],
        [ev("q3", "alice", "select", CUSTOMERS, T0 + 2 * H, columns=("email", "ssn"),
            masked=(("email", "hash"), ("ssn", "redact")))],
        [ev("q3", "alice", "policyRead", "main.sales.regions", T0 + 2 * H, columns=("r",))],
        [ev("q4", "carol", "select", ORDERS, T0 + 2 * H, columns=("id", "amount")),
         ev("q4", "carol", "select", CUSTOMERS, T0 + 2 * H, columns=("id", "email"))],
        [ev("q5", "dave", "select", CUSTOMERS, T0 + 3 * H, allowed=False, succeeded=False,
            reason=no_select)],
        [ev("q6", "dave", "select", CUSTOMERS, T0 + 4 * H, allowed=False, succeeded=False,
            reason=no_select)],
        [ev("q7", "eve", "insert", ORDERS, T0 + 4 * H, allowed=False, succeeded=False,
            reason=f"no modify on {ORDERS}")],
        [ev("q8", "alice", "insert", ORDERS, T0 + 5 * H, succeeded=False, phase="intent")],
        [ev("q8", "alice", "insert", ORDERS, T0 + 5 * H, phase="outcome")],
        [ev("q9", "bob", "select", CUSTOMERS, T0 + 6 * H, columns=("phone",))],
    ]  # fmt: skip
    with AuditLog(cfg.audit, max_bytes=2500, checkpoints=cfg.audit_checkpoints) as log:
        for batch in batches:
            log.write(batch)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "lakegate.yaml"
    path.write_text(
        f"policies: {_ROOT / 'policies'}\n"
        "audit: audit\n"
        "audit_checkpoints:\n"
        "  key: keys/audit.pem\n"
        "  every_lines: 4\n"
        "  every_seconds: 3600\n"
        "  witness: witness\n"
    )
    assert cli(path, "keygen") == EXIT_OK
    planted(Config.load(path))
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


def cli(config: Path, *argv: str) -> int:
    return run_cli(audit, ["--config", str(config), *argv], prog="lakegate audit")


def cli_json(config: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert cli(config, *argv, "-o", "json") == EXIT_OK
    return json.loads(capsys.readouterr().out)


def open_report(browser: Browser, html: Path, requests: list[str] | None = None) -> Page:
    page = browser.new_page()
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    page.goto(html.as_uri())
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot').length === {len(CHARTS)}")
    return page


def table_rows(page: Page, table_id: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"#{table_id} tbody tr",
        "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))",
    )


def chart_traces(page: Page, div_id: str) -> list[dict[str, Any]]:
    """The data plotly drew in a chart: trace name and values, from the plot div."""
    return page.evaluate(
        f"""() => document.getElementById('{div_id}').data.map(
            t => ({{name: t.name, x: Array.from(t.x), y: Array.from(t.y)}}))"""
    )


def statements_by(records: list[dict[str, Any]], key: str) -> dict[str, dict[str, int]]:
    """Distinct query ids per table (src and dst) or user per hour, from `audit query`."""
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in records:
        if r["cmd"] in ("policyRead", "tagPropagate"):
            continue
        names = {r["src"], r["dst"]} - {None} if key == "table" else {r["user"]}
        for name in names:
            seen[name][r["ts"][:13] + ":00Z"].add(r["queryId"])
    return {name: {b: len(ids) for b, ids in s.items()} for name, s in seen.items()}


def test_report_charts_render_and_agree_with_audit_query_and_questions(
    config: Path, tmp_path: Path, browser: Browser, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "report.html"
    assert cli(config, "report", "--html", str(html)) == EXIT_OK
    page = open_report(browser, html)
    for div_id in CHARTS:
        traces = chart_traces(page, div_id)
        assert traces and all(t["y"] for t in traces), div_id
        assert page.locator(f"#{div_id} .main-svg").count() > 0  # plotly drew the SVG

    records = cli_json(config, capsys, "query")
    by_table, by_user = statements_by(records, "table"), statements_by(records, "user")
    for div_id, expected in (("chart-access-table", by_table), ("chart-access-user", by_user)):
        drawn = {
            t["name"]: {x: y for x, y in zip(t["x"], t["y"], strict=True) if y}
            for t in chart_traces(page, div_id)
        }
        assert drawn == expected
    assert table_rows(page, "table-access-users") == [
        [user, str(len({r["queryId"] for r in records if r["user"] == user}))]
        for user in sorted(by_user)
    ]
    per_table = {
        name: cli_json(config, capsys, "query", "--table", name) for name in sorted(by_table)
    }
    assert table_rows(page, "table-access-tables") == [
        [name,
         str(len({r["queryId"] for r in rows if r["cmd"] != "policyRead"})),
         str(len({r["queryId"] for r in rows if not r["allowed"]})),
         str(len({r["user"] for r in rows if r["cmd"] != "policyRead"}))]
        for name, rows in per_table.items()
    ]  # fmt: skip
    assert sorted(per_table) == [CUSTOMERS, ORDERS]  # the policy's mapping table is left out

    denials = cli_json(config, capsys, "question", "denials")
    assert table_rows(page, "table-denials") == [
        [str(row[c]) for c in ("table", "cmd", "reason", "denials", "users", "last")]
        for row in denials
    ]
    assert len(denials) == 2

    tagged = table_rows(page, "table-tagged")
    assert [row[:3] for row in tagged] == [
        [CUSTOMERS, "email", "pii"], [CUSTOMERS, "phone", "pii"],
        [CUSTOMERS, "ssn", "pii, restricted"],
    ]  # fmt: skip
    for table, column, _tags, clear, masked, top in tagged:
        answer = cli_json(
            config, capsys, "question", "who-read-column", "--table", table, "--column", column
        )
        assert int(clear) == sum(a["statements"] for a in answer if a["mask"] == "clear")
        assert int(masked) == sum(a["statements"] for a in answer if a["mask"] != "clear")
        readers: dict[str, int] = defaultdict(int)
        for a in answer:
            readers[a["user"]] += a["statements"]
        ranked = sorted(readers.items(), key=lambda item: (-item[1], item[0]))
        assert top == ", ".join(f"{u} ({n})" for u, n in ranked)
    assert [row[3:6] for row in tagged] == [
        ["2", "2", "alice (2), bob (1), carol (1)"], ["2", "0", "bob (2)"], ["0", "1", "alice (1)"]
    ]  # fmt: skip
    masked_chart = {t["name"]: t["y"] for t in chart_traces(page, "chart-masked")}
    assert masked_chart == {"clear": [2, 2, 0], "masked": [2, 0, 1]}

    embedded = json.loads(page.locator("#report-data").text_content() or "")
    assert embedded["denials"]["rows"] == [list(row.values()) for row in denials]
    assert page.get_attribute("#chain-status", "data-ok") == "true"
    assert page.get_attribute("#tree-status", "data-ok") == "true"
    assert "witness" in (page.text_content("#tree-status") or "")
    page.close()


def test_report_range_and_table_agree_with_audit_query_with_the_same_filters(
    config: Path, tmp_path: Path, browser: Browser, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "report.html"
    scope = ["--since", "2026-11-20T09:00", "--until", "2026-11-20T14:00", "--table", "customers"]
    assert cli(config, "report", "--html", str(html), *scope) == EXIT_OK
    page = open_report(browser, html)
    records = cli_json(config, capsys, "query", *scope)
    assert {r["queryId"] for r in records} == {"q2", "q3", "q4", "q5", "q6"}
    assert table_rows(page, "table-access-tables") == [
        [CUSTOMERS, str(len({r["queryId"] for r in records if r["cmd"] == "select"})),
         str(len({r["queryId"] for r in records if not r["allowed"]})),
         str(len({r["user"] for r in records}))]
    ]  # fmt: skip
    drawn = {t["name"] for t in chart_traces(page, "chart-access-table")}
    assert drawn == {CUSTOMERS}
    denials = cli_json(config, capsys, "question", "denials", *scope)
    assert [row[3] for row in table_rows(page, "table-denials")] == [
        str(row["denials"]) for row in denials
    ]
    assert page.text_content("#scope-table") == "customers"
    page.close()


def test_report_loads_no_network_resource(config: Path, tmp_path: Path, browser: Browser) -> None:
    html = tmp_path / "report.html"
    assert cli(config, "report", "--html", str(html)) == EXIT_OK
    requests: list[str] = []
    page = open_report(browser, html, requests)
    page.wait_for_load_state("networkidle")
    assert requests == [html.as_uri()]
    assert "cdn" not in html.read_text(encoding="utf-8").lower().split("<script>", 2)[0]
    page.close()


def test_report_of_a_tampered_log_shows_failed_chain_and_tree(
    config: Path, tmp_path: Path, browser: Browser, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = Config.load(config).audit
    # a line inside a file, not its first (whose edit changes the file's id: `replaced`)
    files = {
        f: f.read_text(encoding="ascii").splitlines(True) for f in directory.glob("audit.log*")
    }
    log, at = next(
        (f, i)
        for f, lines in sorted(files.items())
        for i, line in enumerate(lines)
        if i > 0 and "ugi=dave (auth:" in line
    )
    lines = files[log]
    lines[at] = lines[at].replace("ugi=dave (auth:", "ugi=dan (auth:")
    log.write_text("".join(lines), encoding="ascii")
    html = tmp_path / "report.html"
    capsys.readouterr()
    assert cli(config, "report", "--html", str(html)) == EXIT_FAILED
    assert "the log FAILED verification" in capsys.readouterr().out
    page = open_report(browser, html)
    assert page.get_attribute("#chain-status", "data-ok") == "false"
    assert "FAILED" in (page.text_content("#chain-status") or "")
    assert f"edited line at {log.name}:" in (page.text_content("#chain-breaks") or "")
    assert page.get_attribute("#tree-status", "data-ok") == "false"
    assert "rewritten" in (page.text_content("#tree-breaks") or "")
    page.close()


def test_report_shows_hostile_names_as_text(config: Path, tmp_path: Path, browser: Browser) -> None:
    cfg = Config.load(config)
    hostile = '<img src=x onerror="document.title=1">'
    with AuditLog(cfg.audit, checkpoints=cfg.audit_checkpoints) as log:
        log.write([ev("q10", hostile, "select", CUSTOMERS, T0 + 7 * H, allowed=False,
                      succeeded=False, reason="</script><b>no</b>")])  # fmt: skip
    html = tmp_path / "report.html"
    assert cli(config, "report", "--html", str(html)) == EXIT_OK
    page = open_report(browser, html)
    assert page.locator("img").count() == 0
    assert page.title() == "Lakegate audit report"
    assert [hostile, "1"] in table_rows(page, "table-access-users")
    legend = page.eval_on_selector_all(
        "#chart-access-user .legendtext", "items => items.map(i => i.textContent)"
    )
    assert hostile in legend  # drawn as the text it is
    assert "</script><b>no</b>" in [row[2] for row in table_rows(page, "table-denials")]
    page.close()


def test_report_has_no_serious_accessibility_violations(
    config: Path, tmp_path: Path, browser: Browser
) -> None:
    html = tmp_path / "report.html"
    assert cli(config, "report", "--html", str(html)) == EXIT_OK
    page = open_report(browser, html)
    results = Axe().run(page)
    serious = [
        f"{v['id']} ({v['impact']}): {len(v['nodes'])}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == []
    page.close()


def embedded_data(html: Path) -> dict[str, Any]:
    text = html.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="report-data">')
    body = text[text.index(">", start) + 1 : text.index("</script>", start)]
    return json.loads(body)


def test_report_counts_tags_lakegate_applied_in_the_catalog_too(
    config: Path, tmp_path: Path
) -> None:
    from catalog.catalog import Catalog
    from catalog.model import ColumnInfo, TableInfo
    from catalog.store import open_store
    from governance.policy.tag_state import GOVERNED_PROPERTY

    cfg = Config.load(config)
    catalog = Catalog(open_store(cfg.catalog), cfg.warehouse)
    catalog.create_catalog("main")
    catalog.create_schema("main", "sales")
    columns = tuple(ColumnInfo(name, "string") for name in ("id", "email", "phone", "ssn"))
    catalog.register_table(
        TableInfo("main", "sales", "customers", "", columns,
                  properties={GOVERNED_PROPERTY: json.dumps({"id": ["internal"]})})
    )  # fmt: skip
    html = tmp_path / "report.html"
    assert cli(config, "report", "--html", str(html)) == EXIT_OK
    tagged = {(t["column"], tuple(t["tags"]), t["clear"]) for t in embedded_data(html)["tagged"]}
    assert tagged == {
        ("email", ("pii",), 2), ("id", ("internal",), 3), ("phone", ("pii",), 2),
        ("ssn", ("pii", "restricted"), 0),
    }  # fmt: skip


def test_report_of_a_directory_without_audit_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    html = tmp_path / "report.html"
    argv = ["report", str(empty), "--html", str(html)]
    assert run_cli(audit, argv, prog="lakegate audit") == EXIT_USAGE
    assert f"no audit log files in {empty}: nothing to report" in capsys.readouterr().err
    assert not html.exists()
