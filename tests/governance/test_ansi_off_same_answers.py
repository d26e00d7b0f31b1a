"""Governed statements run with ANSI mode off on every Spark line (issue 26, item 2).

Spark 4 turns ANSI mode on by default, and ANSI errors quote the offending value
("[CAST_INVALID_INPUT] The value 'Anna Schmidt' of the type ..."). Lakegate keeps it off
for governed execution (governance/runtime/spark.py GOVERNED_CONF), so each error-raising function
family answers NULL (or wraps) exactly as on Spark 3.5; the families that raise whatever
the mode answer with their error class and query id only, never a value.
"""

from __future__ import annotations

import re

import pytest

from governance.runtime.spark import GOVERNED_CONF, check_spark
from governance.session.governed import StatementFailed

CUSTOMER = "FROM main.sales.customers WHERE id = 1"  # Anna Schmidt, visible to alice
ORDER = "FROM main.sales.orders WHERE id = 1"  # 120.00 on 2026-01-05
CLASS_AND_ID = re.compile(r"statement failed: \[[\w.]+\] \(query [0-9a-f]{32}\)")

# (family, expression, source, the answer on every line with ANSI off)
FAMILIES = [
    ("cast string to int", "CAST(name AS INT)", CUSTOMER, None),
    ("cast string to boolean", "CAST(name AS BOOLEAN)", CUSTOMER, None),
    ("cast string to date", "CAST(name AS DATE)", CUSTOMER, None),
    ("cast decimal overflow", "CAST(amount AS DECIMAL(3, 2))", ORDER, None),
    ("integer add overflow", "id + 2147483647", ORDER, -2147483648),
    ("bigint multiply overflow", "(id + 1) * 9223372036854775807", ORDER, -2),
    ("divide by zero", "id / 0", ORDER, None),
    ("modulo by zero", "id % 0", ORDER, None),
    ("date parsing", "to_date(name, 'yyyy-MM-dd')", CUSTOMER, None),
    ("timestamp parsing", "to_timestamp(name)", CUSTOMER, None),
    ("invalid date parts", "make_date(2026, 13, id)", ORDER, None),
    ("array index", "array(1, 2)[id + 5]", ORDER, None),
    ("array element_at", "element_at(array(1, 2), id + 5)", ORDER, None),
    ("map key", "map('a', 1)[name]", CUSTOMER, None),
    ("map element_at", "element_at(map('a', 1), name)", CUSTOMER, None),
]
# Families that raise whatever the mode, with the value in Spark's message.
RAISING = [
    ("number parsing", f"to_number(name, '9') {CUSTOMER}"),
    ("sequence with a zero step", f"sequence(1, id + 1, 0) {ORDER}"),
]


def test_governed_sessions_run_with_ansi_mode_off(spark):
    assert GOVERNED_CONF["spark.sql.ansi.enabled"] == "false"
    assert spark.conf.get("spark.sql.ansi.enabled") == "false"


def test_a_session_handed_in_with_ansi_mode_on_is_turned_off(spark):
    from governance.verify.guard import secure

    other = spark.newSession()
    other.conf.set("spark.sql.ansi.enabled", "true")  # Spark 4's own default
    check_spark(other)  # Delta's static settings; the runtime ones are put back on first use
    assert "spark.sql.ansi.enabled" in secure(other)
    assert other.conf.get("spark.sql.ansi.enabled") == "false"


@pytest.mark.parametrize(
    ("expression", "source", "answer"),
    [pytest.param(e, s, a, id=f) for f, e, s, a in FAMILIES],
)
def test_an_error_raising_function_answers_as_with_ansi_off(lakehouse, expression, source, answer):
    rows = lakehouse.session("alice").sql(f"SELECT {expression} AS v {source}").collect()
    assert [r.v for r in rows] == [answer]


@pytest.mark.parametrize(("statement"), [pytest.param(s, id=f) for f, s in RAISING])
def test_a_function_that_raises_in_any_mode_answers_class_and_query_id(lakehouse, statement):
    df = lakehouse.session("alice").sql(f"SELECT {statement}")
    with pytest.raises(StatementFailed) as caught:
        df.collect()
    message = str(caught.value)
    assert CLASS_AND_ID.fullmatch(message), message
    assert not re.search(r"Anna|Schmidt|1 to 2", message), message
