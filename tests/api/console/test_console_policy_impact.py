"""The policy-changes page's data impact (issue 40): an admin pastes a proposed policy file
or names two policy versions and sees, per affected user or group, the rows of each table
before and after and the columns that change state, counted on the live tables. Checked
against counts the governed session gives for the same users (differential), and for what
it must not do: run for a non-admin, run without the form's CSRF value or from another
origin, run without an intent line on the audit log, or show a value."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
import pytest
from api_testkit import LG, read_audit, token_of
from console_testkit import signed_in

# The proposed change: EMEA analysts also read APAC orders and emails in clear.
WIDEN = (
    ("where: \"region = 'EMEA'\"", "where: \"region IN ('EMEA', 'APAC')\""),
    ("    except: [group:pii-readers]\n", "    except: [group:pii-readers, group:emea-analysts]\n"),
)


def _widened(policy_repo: Path) -> str:
    text = (policy_repo / "sales.yaml").read_text()
    for a, b in WIDEN:
        assert text.count(a) == 1, a
        text = text.replace(a, b)
    return text


def _count(base: str, user: str, sql: str) -> int:
    r = httpx.post(
        f"{base}{LG}/statements",
        json={"statement": sql},
        headers={"Authorization": f"Bearer {token_of(user)}"},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    return int(r.json()["rows"][0][0])


def _post(c: httpx.Client, ctx: str, **data: str) -> httpx.Response:
    data.setdefault("csrf", c.cookies["lakegate_csrf"])
    return c.post(
        "/ui/policies/impact",
        data=data,
        headers={"X-Lakegate-Caller-Context": ctx},
        timeout=300,
    )


def _lines(lg, ctx: str) -> list[dict[str, str]]:
    return [ln for ln in read_audit(lg) if ln.get("callerContext") == ctx]


def _rows(html: str) -> list[list[str]]:
    body = html.split('id="impact-table"', 1)[1].split("</table>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", tr, re.S)]
        for tr in re.findall(r"<tr>(.*?)</tr>", body, re.S)
        if "<td>" in tr
    ]


@pytest.fixture(scope="module")
def pasted(console_server: str, console_lakegate, policy_repo: Path) -> tuple[str, str]:
    """root's run: live policies against live with the widened sales.yaml pasted in."""
    ctx = f"impact-{uuid.uuid4().hex}"
    with signed_in(console_server, "root") as c:
        r = _post(c, ctx, old="live", yaml=_widened(policy_repo), file="sales.yaml")
    assert r.status_code == 200, r.text
    return r.text, ctx


def test_an_admin_sees_rows_before_and_after_matching_the_governed_counts(
    pasted: tuple[str, str], console_server: str
) -> None:
    html, _ = pasted
    assert "Rows counted by full count, time limit 60 s per count" in html
    rows = {(r[0], r[1]): r for r in _rows(html)}
    assert set(rows) == {("carol", "main.sales.orders"), ("carol", "main.sales.customers")}
    before = _count(console_server, "carol", "SELECT count(*) FROM main.sales.orders")
    # by hand: what the widened filter keeps, with carol's other filter (no test orders)
    after = _count(
        console_server,
        "root",
        "SELECT count(*) FROM main.sales.orders WHERE region IN ('EMEA', 'APAC') AND NOT is_test",
    )
    assert after > before
    gained = f"+{after - before}"
    assert rows["carol", "main.sales.orders"][3:6] == [str(before), str(after), gained]
    customers = rows["carol", "main.sales.customers"]
    n = _count(console_server, "carol", "SELECT count(*) FROM main.sales.customers")
    assert customers[3:6] == [str(n), str(n), "0"]
    assert "email: masked (hash) → clear" in customers[6]
    assert "pii" in customers[2]
    # the access diff beside it, and the Markdown for a pull request
    assert "carol gains" in html and "mask hash removed from email" in html
    assert "| carol | main.sales.orders |" in html


def test_the_run_shows_no_value(pasted: tuple[str, str], console_server: str) -> None:
    html, _ = pasted
    r = httpx.post(
        f"{console_server}{LG}/statements",
        json={"statement": "SELECT email, name FROM main.sales.customers"},
        headers={"Authorization": f"Bearer {token_of('dana')}"},
        timeout=300,
    )
    values = {str(v) for row in r.json()["rows"] for v in row if v}
    assert values and not [v for v in values if v in html]


def test_the_run_is_an_admin_act_on_record_intent_before_outcome(
    pasted: tuple[str, str], console_lakegate
) -> None:
    _, ctx = pasted
    lines = _lines(console_lakegate, ctx)
    got = [(ln["cmd"], ln.get("phase", ""), ln["allowed"], ln["ugi"].split()[0]) for ln in lines]
    assert got == [
        ("consolePolicyImpact", "intent", "true", "root"),
        ("consolePolicyImpact", "outcome", "true", "root"),
    ], got
    assert [ln["succeeded"] for ln in lines] == ["false", "true"]
    assert {ln["proto"] for ln in lines} == {"rest"}
    assert len({ln["queryId"] for ln in lines}) == 1  # the request's id links the two


def test_two_versions_by_name_live_and_a_revision(console_server: str) -> None:
    """HEAD is the reference set, which is in force: no change, nothing counted."""
    with signed_in(console_server, "root") as c:
        r = _post(c, f"impact-{uuid.uuid4().hex}", old="HEAD", new="live")
    assert r.status_code == 200, r.text
    assert "No user or group would read different rows or columns." in r.text
    assert "No change in effective access." in r.text


def test_a_non_admin_is_refused_and_on_record(console_server: str, console_lakegate) -> None:
    ctx = f"impact-{uuid.uuid4().hex}"
    for user in ("alice", "erin"):  # an analyst; a steward who manages one domain only
        with signed_in(console_server, user) as c:
            assert "/ui/policies/impact" not in c.get("/ui/policies").text  # no form shown
            r = _post(c, ctx, old="HEAD~1", new="HEAD")
        assert r.status_code == 403
        assert "Only admins may run a policy impact." in r.text
    lines = _lines(console_lakegate, ctx)
    assert [(ln["cmd"], ln["allowed"]) for ln in lines] == [("consolePolicyImpact", "false")] * 2
    assert "admins only" in lines[0]["reason"]


@pytest.mark.parametrize(
    ("csrf", "headers", "reason"),
    [
        (None, {}, "the CSRF token of the form does not match"),
        ("forged", {}, "the CSRF token of the form does not match"),
        ("cookie", {"Origin": "https://evil.example"}, "it comes from another origin"),
        ("cookie", {"Sec-Fetch-Site": "cross-site"}, "it comes from another site"),
    ],
)
def test_a_forged_or_cross_site_run_is_refused_before_anything(
    csrf: str | None, headers: dict[str, str], reason: str, console_server: str, console_lakegate
) -> None:
    ctx = f"impact-{uuid.uuid4().hex}"
    with signed_in(console_server, "root") as c:
        data = {"old": "HEAD~1", "new": "HEAD"}
        if csrf is not None:
            data["csrf"] = c.cookies["lakegate_csrf"] if csrf == "cookie" else csrf
        r = c.post(
            "/ui/policies/impact", data=data, headers={**headers, "X-Lakegate-Caller-Context": ctx}
        )
    assert r.status_code == 403
    assert reason in r.text
    lines = _lines(console_lakegate, ctx)
    assert [(ln["cmd"], ln["allowed"]) for ln in lines] == [("consolePolicyImpact", "false")]
    assert reason in lines[0]["reason"]


def test_broken_yaml_is_one_line_and_counts_nothing(console_server: str, console_lakegate) -> None:
    ctx = f"impact-{uuid.uuid4().hex}"
    with signed_in(console_server, "root") as c:
        r = _post(c, ctx, old="live", yaml="grants:\n  - id: x\n    on: [", file="x.yaml")
        bad_name = _post(c, ctx, old="live", yaml="grants: []\n", file="../escape.yaml")
        bad_rev = _post(c, ctx, old="--output=/tmp/x", new="HEAD")
    assert r.status_code == 400 and "the policies do not load" in r.text
    assert bad_name.status_code == 400 and "the file name must be" in bad_name.text
    assert bad_rev.status_code == 400 and "invalid revision" in bad_rev.text
    assert [ln["cmd"] for ln in _lines(console_lakegate, ctx)] == ["consolePolicyImpact"] * 3
