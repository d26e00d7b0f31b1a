"""The audit lines a governed statement writes (spec/audit-format.md, "Line" and "Rules").

Reads run on the shared demo `lakehouse` (reference policies; nothing here changes its
tables: every write attempted on it is denied); allowed writes run on a private lakehouse.
Lines are parsed as the spec promises: split on tabs, then on the first '='.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from governance import AccessDenied, LakegateError

KEYS = [
    "allowed",
    "ugi",
    "ip",
    "cmd",
    "src",
    "dst",
    "perm",
    "proto",
    "callerContext",
    "succeeded",
    "eventId",
    "ts",
    "queryId",
    "stmtHash",
    "columns",
    "masked",
    "rowFilters",
    "policies",
    "reason",
    "durationMs",
    "writer",
    "seq",
    "prevHash",
    "hash",
]
# the session writes the extension keys (audit/README.md) before the chain keys
KEYS_EXT = [*KEYS[:20], "policyVersion", "phase", *KEYS[20:]]
# the fields a test states exactly; the rest are ids, times and the hash chain
STATED = [
    "allowed",
    "ugi",
    "ip",
    "cmd",
    "src",
    "dst",
    "perm",
    "proto",
    "callerContext",
    "succeeded",
    "columns",
    "masked",
    "rowFilters",
    "policies",
    "reason",
]
PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO lakegate\.audit: ")


def parse(line: str) -> dict[str, str]:
    m = PREFIX.match(line)
    assert m, line
    fields: dict[str, str] = {}
    for part in line[m.end() :].split("\t"):
        key, sep, value = part.partition("=")
        assert sep and value != "", f"blank or malformed field {part!r}"
        fields[key] = value
    assert list(fields) == KEYS_EXT
    return fields


def run(lg, user: str, sql: str) -> tuple[Exception | None, list[dict[str, str]]]:
    """Run one statement; return its error (if any) and the audit lines it wrote.

    The lines are read as soon as `sql()` returns, before any result is fetched: the record
    must be in the file before the result is handed back."""
    log = lg.config.audit / "audit.log"
    start = log.stat().st_size if log.exists() else 0
    error: Exception | None = None
    try:
        lg.session(user).sql(sql)
    except LakegateError as e:
        error = e
    with open(log, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    return error, [parse(ln) for ln in text.splitlines()]


def stated(line: dict[str, str]) -> dict[str, str]:
    return {k: line[k] for k in STATED}


def line(user: str, **kw: Any) -> dict[str, str]:
    out = {
        "allowed": "true",
        "ugi": f"{user} (auth:SIMPLE)",
        "ip": "/127.0.0.1",
        "cmd": "select",
        "src": "null",
        "dst": "null",
        "perm": "null",
        "proto": "spark",
        "callerContext": "null",
        "succeeded": "true",
        "columns": "null",
        "masked": "null",
        "rowFilters": "null",
        "policies": "null",
        "reason": "null",
    }
    out.update({k.replace("row_filters", "rowFilters"): v for k, v in kw.items()})
    return out


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# allowed reads ---------------------------------------------------------------------------


def test_a_join_writes_one_line_per_table_sharing_the_query_id(lakehouse):
    sql = (
        "SELECT o.id, c.phone FROM main.sales.orders o "
        "JOIN main.sales.customers c ON o.customer_id = c.id"
    )
    error, lines = run(lakehouse, "carol", sql)
    assert error is None
    assert sorted((stated(ln) for ln in lines), key=lambda d: d["src"]) == [
        line(
            "carol",
            src="main.sales.customers",
            columns="id,phone",
            masked="phone:last4",
            row_filters="own-region-customers",
            policies="analysts-no-ssn,analysts-read-sales,own-region-customers,hide-pii,"
            "phone-last4",
        ),
        line(
            "carol",
            src="main.sales.orders",
            columns="id,customer_id",
            row_filters="emea-only,no-test-orders",
            policies="analysts-read-sales,emea-only,no-test-orders",
        ),
    ]
    assert len({ln["queryId"] for ln in lines}) == 1
    assert len({ln["eventId"] for ln in lines}) == 2
    assert {ln["stmtHash"] for ln in lines} == {sha(sql)}


@pytest.mark.parametrize(
    ("user", "sql", "expected"),
    [
        (
            "carol",
            "SELECT * FROM main.sales.customers",
            [
                line(
                    "carol",
                    src="main.sales.customers",
                    columns="id,name,email,phone,country",
                    masked="email:hash,phone:last4",
                    row_filters="own-region-customers",
                    policies="analysts-no-ssn,analysts-read-sales,own-region-customers,hide-pii,"
                    "phone-last4",
                )
            ],
        ),
        (
            "alice",
            "SELECT a.id FROM main.sales.orders a JOIN main.sales.orders b ON a.id = b.id",
            [
                line(
                    "alice",
                    src="main.sales.orders",
                    columns="id",
                    row_filters="no-test-orders",
                    policies="analysts-read-sales,no-test-orders",
                )
            ],
        ),
        (
            "dana",
            "SELECT email FROM main.sales.customers",
            [
                line(
                    "dana",
                    src="main.sales.customers",
                    columns="email",
                    policies="analysts-no-ssn,analysts-read-sales",
                )
            ],
        ),
        pytest.param(
            "alice",
            "SELECT count(*) FROM main.hr.employees",
            [
                line(
                    "alice",
                    src="main.hr.employees",
                    policies="analysts-read-employees,analysts-no-salary,birth-year-only",
                )
            ],
        ),
        ("alice", "SELECT 1 AS x", [line("alice")]),
        (
            "alice",
            "DESCRIBE main.sales.customers",
            [
                line(
                    "alice",
                    cmd="describe",
                    src="main.sales.customers",
                    policies="analysts-no-ssn,analysts-read-sales,hide-pii",
                )
            ],
        ),
        ("alice", "SHOW TABLES IN main.sales", [line("alice", cmd="show")]),
    ],
)
def test_allowed_statement_lines(lakehouse, user, sql, expected):
    error, lines = run(lakehouse, user, sql)
    assert error is None
    assert [stated(ln) for ln in lines] == expected
    assert {ln["stmtHash"] for ln in lines} == {sha(sql)}


def test_statement_text_is_never_logged(lakehouse):
    sql = "SELECT 'canary-7f3a9e' AS x"
    log = lakehouse.config.audit / "audit.log"
    _, lines = run(lakehouse, "alice", sql)
    assert [ln["stmtHash"] for ln in lines] == [sha(sql)]
    assert "canary-7f3a9e" not in log.read_text()


# denied, refused, unparsable, failed -----------------------------------------------------


@pytest.mark.parametrize(
    ("user", "sql", "src", "reason"),
    [
        (
            "frank",
            "SELECT * FROM main.sales.orders",
            "main.sales.orders",
            "access denied: user frank has no SELECT privilege on table main.sales.orders "
            "(or it does not exist)",
        ),
        (
            "frank",
            "SELECT * FROM main.sales.no_such_table",
            "main.sales.no_such_table",
            "access denied: user frank has no SELECT privilege on table main.sales.no_such_table "
            "(or it does not exist)",
        ),
        (
            "bob",
            "SELECT phone FROM main.sales.customers",
            "main.sales.customers",
            "access denied: user bob may not read column phone of table main.sales.customers",
        ),
        (
            "alice",
            "SELECT * FROM main.sales.orders JOIN main.marketing.campaigns",
            "main.marketing.campaigns",
            "access denied: user alice has no SELECT privilege on table main.marketing.campaigns "
            "(or it does not exist)",
        ),
    ],
)
def test_denied_select_is_logged_with_allowed_false(lakehouse, user, sql, src, reason):
    error, lines = run(lakehouse, user, sql)
    assert type(error) is AccessDenied
    assert str(error) == reason
    policies = "bob-no-phone" if user == "bob" else "null"  # the grant that hid the column
    assert [stated(ln) for ln in lines] == [
        line(user, allowed="false", succeeded="false", src=src, reason=reason, policies=policies)
    ]
    assert lines[0]["stmtHash"] == sha(sql)


def test_denial_by_a_deny_grant_names_that_policy(lakehouse):
    _, lines = run(lakehouse, "bob", "SELECT name, phone FROM main.sales.customers")
    assert [(ln["allowed"], ln["policies"]) for ln in lines] == [("false", "bob-no-phone")]


@pytest.mark.parametrize(
    ("sql", "cmd", "reason"),
    [
        (
            "SET spark.sql.ansi.enabled=true",
            "refused",
            "statement kind SET is not governed by Lakegate",
        ),
        ("ADD JAR /tmp/evil.jar", "refused", "statement kind ADD is not governed by Lakegate"),
        (
            "SELECT * FROM delta.`/tmp/x`",
            "refused",
            "path-based table reference delta.`...` is not allowed; query tables by their catalog "
            "name",
        ),
        (
            "SELECT 1; SELECT 2",
            "refused",
            "multiple statements (2) in one call; send one at a time",
        ),
        (
            "SELECT reflect('java.lang.System', 'getenv', 'HOME')",
            "refused",
            "function reflect() is refused in a statement",
        ),
        (
            "SELEC 1",
            "parseError",
            "cannot parse statement: Invalid expression / Unexpected token at line 1, column 7",
        ),
        ("SELECT 1\x00", "parseError", "statement contains a NUL character"),
        ("", "parseError", "empty statement"),
    ],
)
def test_refused_and_unparsable_statements_are_logged_with_allowed_false(
    lakehouse, sql, cmd, reason
):
    error, lines = run(lakehouse, "alice", sql)
    assert isinstance(error, AccessDenied)
    assert str(error) == reason
    assert [stated(ln) for ln in lines] == [
        line("alice", allowed="false", succeeded="false", cmd=cmd, reason=reason)
    ]


def test_failed_statement_is_logged_allowed_but_not_succeeded(lakehouse):
    error, lines = run(lakehouse, "alice", "SELECT no_such_column FROM main.sales.orders")
    assert error is not None and not isinstance(error, AccessDenied)
    assert [stated(ln) for ln in lines] == [
        line(
            "alice",
            succeeded="false",
            src="main.sales.orders",
            row_filters="no-test-orders",
            policies="analysts-read-sales,no-test-orders",
            reason=str(error),
        )
    ]
    assert str(error).startswith("statement failed: ")


@pytest.mark.parametrize(
    ("user", "sql", "cmd", "src"),
    [
        ("frank", "SELECT id FROM main.sales.orders", "select", "main.sales.orders"),
        ("alice", "CREATE TABLE main.sales.alice_x (a INT)", "create", "main.sales.alice_x"),
        # denied at run time, after Spark checked the row: nothing is written
        (
            "carol",
            "INSERT INTO main.sales.orders (id, region, is_test) VALUES (99, 'AMER', false)",
            "insert",
            "main.sales.orders",
        ),
        (
            "alice",
            "INSERT INTO main.sales.customers (id) VALUES (99)",
            "insert",
            "main.sales.customers",
        ),
        ("alice", "UPDATE main.sales.customers SET name = 'x'", "update", "main.sales.customers"),
        ("alice", "DELETE FROM main.sales.customers", "delete", "main.sales.customers"),
        (
            "alice",
            "MERGE INTO main.sales.customers t USING (SELECT 1 AS id) s "
            "ON t.id = s.id WHEN MATCHED THEN DELETE",
            "merge",
            "main.sales.customers",
        ),
        ("alice", "DROP TABLE main.sales.orders", "drop", "main.sales.orders"),
        ("frank", "DESCRIBE main.sales.customers", "describe", "main.sales.customers"),
    ],
)
def test_denied_statement_is_logged_under_its_own_cmd(lakehouse, user, sql, cmd, src):
    error, lines = run(lakehouse, user, sql)
    assert type(error) is AccessDenied
    # a write denied at run time had its intent recorded first; its outcome is the denial
    lines = [ln for ln in lines if ln["phase"] != "intent"]
    assert [(ln["allowed"], ln["succeeded"], ln["cmd"], ln["src"]) for ln in lines] == [
        ("false", "false", cmd, src)
    ]
    assert lines[0]["reason"] == str(error)


# writes ----------------------------------------------------------------------------------

WRITE_POLICIES = """
groups:
  admins: [admin]
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: u-all, principals: [u], privileges: [select, modify, create], on: "a.s.*"}
row_filters:
  - {id: u-small, on: a.s.src, principals: [u], where: "id < 3"}
column_masks:
  - {id: u-hash, on: a.s.src, columns: [email], mask: hash, principals: [u]}
"""


@pytest.fixture(scope="module")
def wlake(make_lakegate):
    return make_lakegate(
        "audit-writes",
        WRITE_POLICIES,
        [
            "CREATE CATALOG a",
            "CREATE SCHEMA a.s",
            "CREATE TABLE a.s.src (id INT, email STRING)",
            "INSERT INTO a.s.src VALUES (1, 'a@x.de'), (2, 'b@x.de'), (3, 'c@x.de')",
        ],
    )


SRC_LINE = {
    "src": "a.s.src",
    "columns": "id",
    "row_filters": "u-small",
    "policies": "u-all,u-small,u-hash",
}
# (user, statement, expected lines); run in this order: CTAS creates a.s.dst, DROP removes it
WRITES = [
    (
        "u",
        "CREATE TABLE a.s.dst AS SELECT id FROM a.s.src",
        [
            line("u", cmd="create", dst="a.s.dst", **SRC_LINE),
            line("u", cmd="create", src="a.s.dst", dst="a.s.dst", policies="u-all"),
        ],
    ),
    (
        "u",
        "INSERT INTO a.s.dst (id) SELECT id + 10 FROM a.s.src",
        [
            line("u", cmd="insert", dst="a.s.dst", **SRC_LINE),
            line("u", cmd="insert", src="a.s.dst", dst="a.s.dst", policies="u-all"),
        ],
    ),
    (
        "u",
        "INSERT INTO a.s.dst (id) VALUES (7)",
        [line("u", cmd="insert", src="a.s.dst", policies="u-all")],
    ),
    (
        "u",
        "UPDATE a.s.dst SET id = id + 100 WHERE id > 10",
        [line("u", cmd="update", src="a.s.dst", policies="u-all")],
    ),
    (
        "u",
        "DELETE FROM a.s.dst WHERE id = 7",
        [line("u", cmd="delete", src="a.s.dst", policies="u-all")],
    ),
    (
        "u",
        "INSERT INTO a.s.dst (id) SELECT length(email) FROM a.s.src",
        [
            line(
                "u",
                allowed="false",
                succeeded="false",
                cmd="insert",
                src="a.s.dst",
                policies="u-hash,u-all",
                reason="access denied: a write may not read masked column(s) a.s.src.email "
                "(user u)",
            )
        ],
    ),
    (
        "admin",
        "DROP TABLE a.s.dst",
        [line("admin", cmd="drop", src="a.s.dst", policies="admin-all")],
    ),
]


@pytest.fixture(scope="module")
def runs(wlake) -> list[list[dict[str, str]]]:
    return [run(wlake, user, sql)[1] for user, sql, _ in WRITES]


@pytest.fixture(scope="module")
def written(runs) -> list[list[dict[str, str]]]:
    """The records of each statement's outcome (or its denial): intents left out."""
    return [[ln for ln in lines if ln["phase"] != "intent"] for lines in runs]


@pytest.mark.parametrize("i", range(len(WRITES)), ids=[w[1] for w in WRITES])
def test_an_allowed_write_records_its_intent_before_its_outcome(runs, i):
    lines = runs[i]
    if WRITES[i][2][0]["allowed"] == "false":  # denied while planning: nothing to intend
        assert [ln["phase"] for ln in lines] == ["null"]
        return
    n = len(WRITES[i][2])
    assert [ln["phase"] for ln in lines] == ["intent"] * n + ["outcome"] * n
    assert [ln["succeeded"] for ln in lines[:n]] == ["false"] * n
    assert [{**stated(ln), "succeeded": "true"} for ln in lines[:n]] == [
        stated(ln) for ln in lines[n:]
    ]


@pytest.mark.parametrize("i", range(len(WRITES)), ids=[w[1] for w in WRITES])
def test_write_lines_name_source_and_destination(written, i):
    lines = written[i]
    assert [{k: v for k, v in stated(ln).items() if k != "policies"} for ln in lines] == [
        {k: v for k, v in ln.items() if k != "policies"} for ln in WRITES[i][2]
    ]
    assert len({ln["queryId"] for ln in lines}) == 1
    assert {ln["stmtHash"] for ln in lines} == {sha(WRITES[i][1])}


@pytest.mark.parametrize("i", range(len(WRITES)), ids=[w[1] for w in WRITES])
def test_write_lines_name_the_deciding_policies(written, i):
    assert [ln["policies"] for ln in written[i]] == [ln["policies"] for ln in WRITES[i][2]]
