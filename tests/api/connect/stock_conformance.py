"""The Connect conformance list, run by a stock client in its own environment.

`python -I stock_conformance.py URL_BASE TOKENS_JSON BASE_ID`: one stock Spark Connect
session per user (`URL_BASE;token=<token>`), each case run and its answer printed as one
JSON object (case name -> {"columns", "rows"} or {"error": first line}). It imports nothing
of Lakegate: it is what an analyst's notebook can do. `normalize` is shared with the test,
which computes the expected answers in the embedded governed session.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from collections.abc import Callable
from typing import Any

ORDERS = "main.sales.orders"
CUSTOMERS = "main.sales.customers"


def normalize(value: Any) -> Any:
    """One JSON value per cell, the same for a classic Row, a Connect Row and pandas."""
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()  # numpy scalars from toPandas
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if value != value else repr(value)
    if isinstance(value, decimal.Decimal | dt.date | dt.datetime):
        return str(value)
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return repr(value)


def table(columns: list[str], rows: list[Any], ordered: bool = False) -> dict[str, Any]:
    out = [[normalize(v) for v in r] for r in rows]
    return {"columns": list(columns), "rows": out if ordered else sorted(out, key=repr)}


def frame(df: Any, ordered: bool = False) -> dict[str, Any]:
    return table(df.columns, [tuple(r) for r in df.collect()], ordered)


def cases(base_id: int) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """name -> (user, what the client does with that user's session)."""
    from pyspark.sql import functions as F

    def writes(s: Any) -> Any:
        o = s.table(ORDERS)
        rows = [(base_id, 1, "EMEA", decimal.Decimal("2.50"), dt.date(2026, 5, 1), False)]
        s.createDataFrame(rows, o.schema).write.insertInto(ORDERS)
        more = [(base_id + 1, 2, "EMEA", decimal.Decimal("3.75"), dt.date(2026, 5, 2), False)]
        s.createDataFrame(more, o.schema).write.mode("append").saveAsTable(ORDERS)
        got = frame(
            s.table(ORDERS)
            .filter(F.col("id").isin(base_id, base_id + 1))
            .select("id", "customer_id", "region", "amount", "order_date")
        )
        s.sql(f"DELETE FROM {ORDERS} WHERE id IN ({base_id}, {base_id + 1})")
        return got

    def temp_view_sql(s: Any) -> Any:
        s.sql(f"SELECT * FROM {ORDERS} WHERE region = 'EMEA'").createOrReplaceTempView("emea")
        return frame(s.sql("SELECT count(*) AS n, sum(amount) AS total FROM emea"))

    def temp_view_table(s: Any) -> Any:
        s.table(ORDERS).select("id", "amount").createOrReplaceTempView("o2")
        return frame(s.table("o2").filter("amount > 50"))

    return {
        "sql_count": ("alice", lambda s: frame(s.sql(f"SELECT count(*) AS n FROM {ORDERS}"))),
        "sql_orders_filtered": (
            "carol",
            lambda s: frame(s.sql(f"SELECT id, region, amount, order_date FROM {ORDERS}")),
        ),
        "sql_customers_masked": (
            "carol",
            lambda s: frame(s.sql(f"SELECT id, name, email, phone, country FROM {CUSTOMERS}")),
        ),
        "sql_show_tables": ("alice", lambda s: frame(s.sql("SHOW TABLES IN main.sales"))),
        "df_columns_hidden": ("bob", lambda s: {"columns": s.table(CUSTOMERS).columns}),
        "df_groupby_count": ("alice", lambda s: frame(s.table(ORDERS).groupBy("region").count())),
        "df_select_filter": (
            "carol",
            lambda s: frame(s.table(ORDERS).filter(F.col("amount") > 50).select("id", "amount")),
        ),
        "df_agg": (
            "carol",
            lambda s: frame(
                s.table(ORDERS)
                .groupBy("region")
                .agg(F.sum("amount").alias("total"), F.count("*").alias("n"))
            ),
        ),
        "df_join": (
            "alice",
            lambda s: frame(
                s.table(ORDERS)
                .alias("o")
                .join(s.table(CUSTOMERS).alias("c"), F.col("o.customer_id") == F.col("c.id"))
                .select(F.col("o.id"), F.col("c.email"))
            ),
        ),
        "df_with_column": (
            "carol",
            lambda s: frame(
                s.table(ORDERS).withColumn("twice", F.col("amount") * 2).select("id", "twice")
            ),
        ),
        "df_order_by_limit": (
            "carol",
            lambda s: frame(
                s.table(ORDERS).orderBy(F.desc("amount"), "id").limit(3).select("id", "amount"),
                ordered=True,
            ),
        ),
        "df_to_pandas": (
            "carol",
            lambda s: (
                lambda pdf: table(
                    list(pdf.columns), [tuple(r) for r in pdf.itertuples(index=False)]
                )
            )(s.table(ORDERS).select("id", "region", "amount").toPandas()),
        ),
        "temp_view_sql": ("carol", temp_view_sql),
        "temp_view_table": ("carol", temp_view_table),
        "writes_insert_into_save_as_table": ("carol", writes),
        "refused_column": ("alice", lambda s: frame(s.sql("SELECT salary FROM main.hr.employees"))),
        "refused_path_read": ("alice", lambda s: frame(s.read.parquet("/tmp"))),
        "refused_time_zone": (
            "alice",
            lambda s: s.conf.set("spark.sql.session.timeZone", "Etc/GMT+12"),
        ),
        "refused_udf": (
            "alice",
            lambda s: frame(s.range(1).select(F.udf(lambda x: x, "long")("id"))),
        ),
        "refused_global_view": (
            "alice",
            lambda s: s.table(ORDERS).createOrReplaceGlobalTempView("g"),
        ),
    }


def main(url: str, tokens: dict[str, str], base_id: int) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    sessions: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for name, (user, run) in cases(base_id).items():
        try:
            if user not in sessions:
                sessions[user] = SparkSession.builder.remote(f"{url};token={tokens[user]}").create()
            got = run(sessions[user])
            out[name] = got if isinstance(got, dict) else {"done": True}
        except Exception as e:
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            out[name] = {"error": lines[0] if lines else type(e).__name__}
    for s in sessions.values():
        s.stop()
    return out


def first_error(url: str) -> dict[str, Any]:
    """What a client sees from its first statement at `url` (one line), and how long it took."""
    import time

    from pyspark.sql import SparkSession

    t0 = time.perf_counter()
    try:
        SparkSession.builder.remote(url).create().sql("SELECT 1").collect()
        line = ""
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        line = lines[0] if lines else type(e).__name__
    return {"error": line, "seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":
    import pyspark

    if sys.argv[1] == "--first-error":
        print(json.dumps(first_error(sys.argv[2])))
    else:
        result = main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))
        print(json.dumps({"version": pyspark.__version__, "cases": result}))
