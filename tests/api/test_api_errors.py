"""REST POST /statements: an error while collecting rows is its class and the audit line's
query id only (issue 10, item 1b); the full text is in the server log."""

from __future__ import annotations

import re

from api_testkit import LG, read_audit

from governance.session.governed import route_error_log


def test_rest_collect_error_is_class_and_query_id_only(as_user, api_lakegate, tmp_path):
    log = tmp_path / "lakegate-server.log"
    route_error_log(log)
    r = as_user("alice").post(
        f"{LG}/statements",
        json={"statement": "SELECT to_number(name, '9') AS n FROM main.sales.customers"},
    )
    assert r.status_code == 400, r.text
    m = re.search(r"statement failed: \[[A-Z][A-Z_.]*\] \(query ([0-9a-f]{32})\)", r.text)
    names = ("Anna", "Ben", "Chen", "Dominique", "Eve", "Farah")  # the demo's customers
    assert m and not any(n in r.text for n in names), r.text
    assert m.group(1) in {ln.get("queryId") for ln in read_audit(api_lakegate)}
    text = log.read_text()
    assert m.group(1) in text and any(n in text for n in names)  # the full text stays here
