"""The TPC-DS tables by kind: the one list the generator, the policies and the harness share
(its own module, so that tpcds.py and tpcds_policies.py do not import each other)."""

from __future__ import annotations

FACT_TABLES: tuple[str, ...] = (
    "catalog_returns",
    "catalog_sales",
    "inventory",
    "store_returns",
    "store_sales",
    "web_returns",
    "web_sales",
)
DIMENSION_TABLES: tuple[str, ...] = (
    "call_center",
    "catalog_page",
    "customer",
    "customer_address",
    "customer_demographics",
    "date_dim",
    "household_demographics",
    "income_band",
    "item",
    "promotion",
    "reason",
    "ship_mode",
    "store",
    "time_dim",
    "warehouse",
    "web_page",
    "web_site",
)
TABLES: tuple[str, ...] = tuple(sorted(FACT_TABLES + DIMENSION_TABLES))
