"""The stock Spark Connect clients analysts install today, each fresh in its own environment,
answer the conformance list through the gateway exactly as the embedded governed session
answers the same user.

Each client line (stock_clients.CLIENT_LINES) runs stock_conformance.py as a subprocess that
imports nothing of Lakegate. The expected answers come from `lg.session(user).sql(...)` on
the same data and policies; refusals from the embedded session's own words where it has
them, else the gateway's line.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from connect_testkit import token_of
from stock_clients import CLIENT_LINES
from stock_conformance import table

from governance.errors import LakegateError

HERE = Path(__file__).resolve().parent
ORDERS = "main.sales.orders"
CUSTOMERS = "main.sales.customers"
WRITE_IDS = {line: 9100 + 100 * i for i, line in enumerate(CLIENT_LINES)}
#: case -> ("sql", user, query[, ordered]) | ("columns", user, query) | ("refused", user, query)
#: | ("gateway", text) | ("write", user)
EXPECTED: dict[str, tuple[Any, ...]] = {
    "sql_count": ("sql", "alice", f"SELECT count(*) AS n FROM {ORDERS}"),
    "sql_orders_filtered": ("sql", "carol", f"SELECT id, region, amount, order_date FROM {ORDERS}"),
    "sql_customers_masked": (
        "sql",
        "carol",
        f"SELECT id, name, email, phone, country FROM {CUSTOMERS}",
    ),
    "sql_show_tables": ("sql", "alice", "SHOW TABLES IN main.sales"),
    "df_columns_hidden": ("columns", "bob", f"SELECT * FROM {CUSTOMERS}"),
    "df_groupby_count": (
        "sql",
        "alice",
        f"SELECT region, count(*) AS count FROM {ORDERS} GROUP BY region",
    ),
    "df_select_filter": ("sql", "carol", f"SELECT id, amount FROM {ORDERS} WHERE amount > 50"),
    "df_agg": (
        "sql",
        "carol",
        f"SELECT region, sum(amount) AS total, count(*) AS n FROM {ORDERS} GROUP BY region",
    ),
    "df_join": (
        "sql",
        "alice",
        f"SELECT o.id, c.email FROM {ORDERS} o JOIN {CUSTOMERS} c ON o.customer_id = c.id",
    ),
    "df_with_column": ("sql", "carol", f"SELECT id, amount * 2 AS twice FROM {ORDERS}"),
    "df_order_by_limit": (
        "sql",
        "carol",
        f"SELECT id, amount FROM {ORDERS} ORDER BY amount DESC, id LIMIT 3",
        True,
    ),
    "df_to_pandas": ("sql", "carol", f"SELECT id, region, amount FROM {ORDERS}"),
    "temp_view_sql": (
        "sql",
        "carol",
        f"SELECT count(*) AS n, sum(amount) AS total FROM {ORDERS} WHERE region = 'EMEA'",
    ),
    "temp_view_table": ("sql", "carol", f"SELECT id, amount FROM {ORDERS} WHERE amount > 50"),
    "writes_insert_into_save_as_table": ("write", "carol"),
    "refused_column": ("refused", "alice", "SELECT salary FROM main.hr.employees"),
    "refused_path_read": ("gateway", "path reads (spark.read.load/parquet/json/csv/format)"),
    "refused_time_zone": (
        "gateway",
        "configuration spark.sql.session.timeZone is not on the gateway's allow-list for set",
    ),
    "refused_udf": ("gateway", "Python and Scala UDFs are refused through the Lakegate gateway"),
    "refused_global_view": ("gateway", "global temporary views are refused"),
}


@pytest.fixture(scope="module")
def expected(connect_lakegate) -> dict[str, Any]:
    """Each case's answer in the embedded governed session."""
    lg = connect_lakegate
    out: dict[str, Any] = {}
    for name, spec in EXPECTED.items():
        kind = spec[0]
        if kind == "sql":
            df = lg.session(spec[1]).sql(spec[2])
            ordered = len(spec) > 3 and spec[3]
            out[name] = table(df.columns, [tuple(r) for r in df.collect()], ordered)
        elif kind == "columns":
            out[name] = {"columns": lg.session(spec[1]).sql(spec[2]).columns}
        elif kind == "refused":
            with pytest.raises(LakegateError) as e:
                lg.session(spec[1]).sql(spec[2]).collect()
            out[name] = str(e.value).splitlines()[0]
        elif kind == "gateway":
            out[name] = spec[1]
        else:
            out[name] = _embedded_writes(lg, spec[1], 9000)
    return out


def _embedded_writes(lg: Any, user: str, base: int) -> dict[str, Any]:
    """The writes case through `s.sql`: the same two rows inserted, read back, deleted."""
    s = lg.session(user)
    s.sql(
        f"INSERT INTO {ORDERS} VALUES ({base}, 1, 'EMEA', 2.50, DATE'2026-05-01', false), "
        f"({base + 1}, 2, 'EMEA', 3.75, DATE'2026-05-02', false)"
    )
    df = s.sql(
        f"SELECT id - {base} AS k, customer_id, region, amount, order_date FROM {ORDERS} "
        f"WHERE id IN ({base}, {base + 1})"
    )
    got = table(df.columns, [tuple(r) for r in df.collect()])
    s.sql(f"DELETE FROM {ORDERS} WHERE id IN ({base}, {base + 1})")
    return got


def run_stock_client(
    python: Path, url: str, users: list[str], base_id: int, ca: Path | None, tmp: Path
) -> dict[str, Any]:
    """The conformance script under a stock client's interpreter, isolated from this repo."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp)}
    if ca is not None:
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(ca)
    proc = subprocess.run(
        [
            str(python),
            "-I",
            str(HERE / "stock_conformance.py"),
            url,
            json.dumps({u: token_of(u) for u in users}),
            str(base_id),
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard, not a measurement
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("line", list(CLIENT_LINES))
def test_stock_client_answers_equal_the_governed_session(
    line, stock_clients, gateway, connect_lakegate, expected, tmp_path
) -> None:
    users = sorted({spec[1] for spec in EXPECTED.values() if spec[0] != "gateway"})
    users = sorted({*users, "alice"})
    got = run_stock_client(
        stock_clients[line],
        f"sc://127.0.0.1:{gateway.port}/;use_ssl=true",
        users,
        WRITE_IDS[line],
        connect_lakegate.ca,
        tmp_path,
    )
    assert got["version"] == CLIENT_LINES[line][0].split("==")[1]
    cases = got["cases"]
    assert set(cases) == set(EXPECTED)
    wrong = {}
    for name, spec in EXPECTED.items():
        answer = cases[name]
        if spec[0] in ("refused", "gateway"):
            ok = expected[name] in answer.get("error", "")
        elif spec[0] == "write":
            ok = _rebased(answer, WRITE_IDS[line]) == expected[name]
        else:
            ok = answer == expected[name]
        if not ok:
            wrong[name] = {"got": answer, "want": expected[name]}
    assert not wrong, json.dumps(wrong, indent=1)


def _rebased(answer: dict[str, Any], base: int) -> dict[str, Any]:
    """The writes case's rows with ids as offsets from the line's base id (`k`)."""
    if "rows" not in answer:
        return answer
    rows = sorted(([r[0] - base, *r[1:]] for r in answer["rows"]), key=repr)
    return {"columns": ["k", *answer["columns"][1:]], "rows": rows}
