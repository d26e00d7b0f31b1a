"""The audit page pages through the log newest first (a page size and a cursor), reads only
what a page needs instead of the whole log, and checks the hash chain of exactly the lines
it read: a line edited inside the page shows as broken, one outside it does not."""

from __future__ import annotations

import uuid

import httpx
from api_testkit import LG, serve, token_of
from console_testkit import signed_in


def _pages(client: httpx.Client, size: int, **filters: str) -> list[dict]:
    out, before = [], None
    while True:
        params = {"size": size, **filters, **({"before": before} if before else {})}
        r = client.get(f"{LG}/audit/page", params=params)
        assert r.status_code == 200, r.text
        out.append(r.json())
        before = out[-1]["next"]
        if before is None:
            return out


def test_pages_walk_every_visible_line_newest_first_once(console_server, bearer) -> None:
    root = bearer("root")
    everything = root.get(f"{LG}/audit/records", params={"limit": 5000}).json()["records"]
    pages = _pages(root, 7)
    walked = [r["eventId"] for p in pages for r in p["records"]]
    newest_first = [r["eventId"] for r in everything]
    # the first page is read after the records (whose request is a line of its own): the
    # walk holds those lines and the few written in between, each once, in the same order
    assert len(newest_first) < 5000
    extra = len(walked) - len(newest_first)
    assert 0 <= extra <= 3
    assert walked[extra:] == newest_first
    assert len(set(walked)) == len(walked)
    assert all(len(p["records"]) == 7 for p in pages[:-1])
    assert all(p["chain"]["ok"] for p in pages)
    ts = [r["ts"] for p in pages for r in p["records"]]
    assert ts == sorted(ts, reverse=True)


def test_a_page_reads_only_as_far_as_it_needs(bearer) -> None:
    first = bearer("root").get(f"{LG}/audit/page", params={"size": 3}).json()
    assert len(first["records"]) == 3 and first["scanned"] == 3  # root sees every line
    assert first["next"] is not None


def test_an_analysts_pages_hold_only_their_own_lines(bearer) -> None:
    pages = _pages(bearer("alice"), 4)
    users = {r["user"] for p in pages for r in p["records"]}
    assert users == {"alice"}
    assert all(p["scope"] == "own" and "breaks" not in p["chain"] for p in pages)


def test_a_cursor_not_from_this_log_is_refused_in_one_line(bearer) -> None:
    for bad in ("0" * 32 + ".5", "f" * 32 + ".99999999999"):
        r = bearer("root").get(f"{LG}/audit/page", params={"before": bad})
        assert (r.status_code, r.json()["message"]) == (
            404,
            "that page is no longer in the audit log; start again",
        )
    r = bearer("root").get(f"{LG}/audit/page", params={"before": "not-a-cursor"})
    assert r.status_code == 400 and r.json()["message"].startswith("invalid query.before")


def test_the_page_checks_the_chain_of_the_lines_it_read(console_lakegate) -> None:
    """An edited line inside the page is a break on that page, and not on a page that did
    not read it (the line is put back afterwards)."""
    from api.app import create_app

    log = console_lakegate.config.audit / "audit.log"
    marker = f"edit-{uuid.uuid4().hex}"
    try:
        with serve(create_app(console_lakegate)) as url:
            headers = {"Authorization": f"Bearer {token_of('root')}"}
            with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                c.get(f"{LG}/whoami", headers={"X-Lakegate-Caller-Context": marker})
                text = log.read_text()
                assert marker in text
                log.write_text(text.replace(marker, marker[:-1] + "X"))
                near = c.get(f"{LG}/audit/page", params={"size": 20}).json()
                assert near["chain"]["ok"] is False
                assert any("content does not match its hash" in b for b in near["chain"]["breaks"])
                far = c.get(f"{LG}/audit/page", params={"size": 20, "before": near["next"]})
                assert far.json()["chain"]["ok"] is True
            with signed_in(url, "root") as browser:
                html = browser.get("/ui/audit?size=20").text
            assert "BROKEN: lines read for this page fail the hash chain check." in html
    finally:  # the shared log as it was: the edited line back (same length, in place)
        log.write_text(log.read_text().replace(marker[:-1] + "X", marker))
