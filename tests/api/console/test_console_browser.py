"""The console in a real browser (Debian's chromium through Playwright): sign in with a
token, click through every page by its navigation as an analyst, a steward and an admin,
find nothing the viewer may not see in any page, pass an axe-core scan with no serious or
critical violation, draw the audit charts under the content security policy, reach the
pages by keyboard, page back through the audit log, and sign out (the cookie, copied before,
opens nothing afterwards). Screenshots of every page are kept in
tests/api/console/screenshots/ (ignored by git) for review."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from api_testkit import token_of
from console_testkit import FORBIDDEN

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parent / "screenshots"
NAV = ("Catalog", "Effective access", "Policy changes", "Audit")


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (make test installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _sign_in(browser, base: str, user: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/ui/catalog")
    assert page.url == f"{base}/ui/signin"
    page.get_by_label("API token").fill(token_of(user))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/ui/catalog")
    return context, page, errors


def _serious(page) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']}: {v['help']} ({len(v['nodes'])} node(s))"
        for v in results.response["violations"]
        if v.get("impact") in ("serious", "critical")
    ]


def _check(page, user: str, name: str) -> None:
    """No forbidden string in the page, no serious accessibility violation; a screenshot."""
    html = page.content().lower()
    forbidden = FORBIDDEN.get(user, ())
    assert [w for w in forbidden if w.lower() in html] == [], (user, name)
    assert _serious(page) == [], (user, name)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{user}-{name}.png"), full_page=True)


@pytest.mark.parametrize("user", ["alice", "erin", "root"])
def test_every_page_shows_the_viewer_only_what_they_may_see_and_passes_axe(
    user: str, browser, console_server: str
) -> None:
    context, page, errors = _sign_in(browser, console_server, user)
    try:
        assert page.locator("#whoami").inner_text() == user
        _check(page, user, "catalog")
        page.get_by_role("link", name="customers").first.click()
        page.wait_for_url("**/ui/catalog/main.sales.customers")
        assert page.get_by_role("heading", level=1).inner_text() == "main.sales.customers"
        _check(page, user, "table")
        page.get_by_role("navigation").get_by_role("link", name="Catalog").click()
        page.wait_for_url("**/ui/catalog")
        page.get_by_label("Search tables, columns, tags and descriptions").fill("pii")
        page.get_by_role("button", name="Search").click()
        page.wait_for_url("**/ui/catalog?q=pii")
        _check(page, user, "search")
        page.get_by_role("navigation").get_by_role("link", name="Effective access").click()
        page.wait_for_url("**/ui/access")
        _check(page, user, "access-person")
        page.get_by_label("Who can read a table").select_option("main.sales.orders")
        page.get_by_role("button", name="Show readers").click()
        page.wait_for_url("**/ui/access?table=main.sales.orders")
        _check(page, user, "access-table")
        page.get_by_role("navigation").get_by_role("link", name="Policy changes").click()
        page.wait_for_url("**/ui/policies")
        assert page.get_by_role("heading", name="Gains").count() >= 1
        _check(page, user, "policies")
        page.get_by_role("navigation").get_by_role("link", name="Audit").click()
        page.wait_for_url("**/ui/audit")
        page.locator(".chart .main-svg").first.wait_for()
        assert "Verified" in page.locator("#chain").inner_text()
        _check(page, user, "audit")
        page.goto(f"{console_server}/ui/audit?size=5")
        page.get_by_role("link", name="Older lines").click()
        page.wait_for_url("**/ui/audit?*before=*")
        assert "Verified for this page" in page.locator("#chain").inner_text()
        page.wait_for_function(  # drawn, or "No lines." (the page may hold no reads)
            "[...document.querySelectorAll('[data-chart]')].every(e => e.textContent || "
            "e.querySelector('.main-svg'))"
        )
        _check(page, user, "audit-older")
        assert errors == []  # no CSP violation, no script error
        kept = context.cookies()  # what a thief would have copied
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url("**/ui/signin")
        page.goto(f"{console_server}/ui/audit")
        assert page.url == f"{console_server}/ui/signin"
    finally:
        context.close()
    replay = browser.new_context()
    try:  # the copied cookie after sign-out: the session is gone on the server
        replay.add_cookies([c for c in kept if c["name"] == "lakegate_session"])
        again = replay.new_page()
        again.goto(f"{console_server}/ui/catalog")
        assert again.url == f"{console_server}/ui/signin"
    finally:
        replay.close()


def test_the_pages_are_reachable_by_keyboard(browser, console_server: str) -> None:
    context, page, _ = _sign_in(browser, console_server, "alice")
    try:
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        for _ in range(len(NAV) + 1):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.textContent") == "Audit":
                break
        page.keyboard.press("Enter")
        page.wait_for_url("**/ui/audit")
        _check(page, "alice", "audit-keyboard")
    finally:
        context.close()


def test_an_admin_pastes_a_proposed_policy_and_sees_its_impact(
    browser, console_server: str, policy_repo: Path
) -> None:
    """root pastes a sales.yaml that widens carol's EMEA filter to APAC and submits the
    policy-changes page's impact form: the result table names carol on the orders with more
    rows after than before, and the page passes axe with no script or CSP error."""
    text = (policy_repo / "sales.yaml").read_text()
    widened = text.replace("where: \"region = 'EMEA'\"", "where: \"region IN ('EMEA', 'APAC')\"")
    assert widened != text
    context, page, errors = _sign_in(browser, console_server, "root")
    try:
        page.get_by_role("navigation").get_by_role("link", name="Policy changes").click()
        page.wait_for_url("**/ui/policies")
        page.locator("#impact-old").fill("live")  # its label text is in another's too
        page.get_by_label("Proposed policy file").fill(widened)
        page.get_by_label("File name of the proposed file").fill("sales.yaml")
        page.get_by_role("button", name="Compute impact").click()
        page.wait_for_url("**/ui/policies/impact")
        rows = page.locator("#impact-table tbody tr")
        found = [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())]
        cells = next(r for r in found if r[:2] == ["carol", "main.sales.orders"])
        assert int(cells[4]) > int(cells[3]) and cells[5].startswith("+")
        assert "full count" in page.locator("#impact-method").inner_text()
        _check(page, "root", "policy-impact")
        assert errors == []
    finally:
        context.close()
