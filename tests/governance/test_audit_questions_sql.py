"""The named questions as governed SQL over `system.access.audit` (README, audit/README.md
"Named questions") give the same answers as `lakegate audit question` on the same log."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import pytest

from audit import questions as q

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from test_audit_questions import planted

POLICIES = """
groups:
  auditors: [auditor]
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: auditors-read-audit, principals: [group:auditors], privileges: [select],
     on: system.access.audit}
"""

WHO_READ_COLUMN = """
SELECT user, src AS tbl, 'email' AS col,
       coalesce(element_at(map_from_entries(masked), 'email'), 'clear') AS mask,
       count(DISTINCT queryId) AS statements, min(ts) AS first, max(ts) AS last
FROM system.access.audit
WHERE cmd = 'select' AND allowed AND succeeded AND src = 'main.sales.customers'
  AND array_contains(columns, 'email')
GROUP BY user, src, coalesce(element_at(map_from_entries(masked), 'email'), 'clear')
ORDER BY user, tbl, mask
"""

MASKED_FOR = """
SELECT user, src AS tbl, m.column AS col, m.mask AS mask,
       count(DISTINCT queryId) AS statements, max(ts) AS last
FROM system.access.audit LATERAL VIEW explode(masked) x AS m
WHERE user = 'alice' AND allowed
GROUP BY user, src, m.column, m.mask
ORDER BY tbl, col, mask
"""

DENIALS = """
SELECT src AS tbl, cmd, reason, count(*) AS denials,
       array_join(array_sort(collect_set(user)), ',') AS users, max(ts) AS last
FROM system.access.audit
WHERE NOT allowed AND src LIKE 'main.sales.%'
GROUP BY src, cmd, reason
ORDER BY tbl, denials DESC, cmd, reason
"""

DECIDED_BY = """
SELECT eventId, queryId, ts, user, cmd, src AS tbl, phase, policyVersion,
       CASE WHEN policyVersion LIKE 'git:%' THEN substr(policyVersion, 5) END AS gitCommit,
       array_join(policies, ',') AS policies
FROM system.access.audit
WHERE queryId = 'q8' OR eventId = 'q8'
ORDER BY ts
"""

WRITES = """
WITH w AS (
  SELECT * FROM system.access.audit
  WHERE (src = 'main.sales.orders' OR dst = 'main.sales.orders')
    AND cmd NOT IN ('select', 'describe', 'show', 'use', 'policyRead')
)
SELECT coalesce(i.queryId, o.queryId) AS queryId, coalesce(i.user, o.user) AS user,
       coalesce(i.cmd, o.cmd) AS cmd, i.ts AS intent,
       CASE WHEN o.queryId IS NULL THEN 'pending'
            WHEN NOT o.allowed THEN 'denied'
            WHEN o.phase = 'recovered' AND o.succeeded THEN 'recovered: succeeded'
            WHEN o.phase = 'recovered' THEN 'recovered: failed'
            WHEN o.succeeded THEN 'succeeded' ELSE 'failed' END AS outcome,
       o.reason AS reason
FROM (SELECT * FROM w WHERE phase = 'intent') i
FULL OUTER JOIN (SELECT * FROM w WHERE phase IS NULL OR phase <> 'intent') o
  ON i.queryId = o.queryId AND i.cmd = o.cmd
ORDER BY coalesce(i.ts, o.ts), coalesce(i.queryId, o.queryId)
"""


@pytest.fixture(scope="module")
def alake(make_lakegate):
    lg = make_lakegate("audit-questions", POLICIES)
    planted(lg.config.audit)
    return lg


def rows(lg, sql: str) -> list[list[object]]:
    out = []
    for row in lg.session("auditor").sql(sql).collect():
        out.append(
            [v.strftime("%Y-%m-%dT%H:%M:%S.000Z") if isinstance(v, datetime) else v for v in row]
        )
    return out


def test_who_read_column_as_sql(alake):
    assert (
        rows(alake, WHO_READ_COLUMN)
        == q.who_read_column(alake.config.audit, "main.sales.customers", "email")[1]
    )


def test_masked_for_as_sql(alake):
    assert rows(alake, MASKED_FOR) == q.masked_for(alake.config.audit, "alice")[1]


def test_denials_as_sql(alake):
    assert rows(alake, DENIALS) == q.denials(alake.config.audit)[1]


def test_decided_by_as_sql(alake):
    assert rows(alake, DECIDED_BY) == q.decided_by(alake.config.audit, "q8")[1]


def test_writes_as_sql(alake):
    columns, expected = q.writes(alake.config.audit, "main.sales.orders")
    keep = [columns.index(c) for c in ("queryId", "user", "cmd", "intent", "outcome", "reason")]
    assert rows(alake, WRITES) == [[row[i] for i in keep] for row in expected]
