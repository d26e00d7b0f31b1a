"""The TPC-DS benchmark policies: row filters and masks on every TPC-DS table, all applying
to the user `bench`, so a benchmark run as `bench` pays for every filter and mask. Shared by
the rewrite and TPC-DS scenarios and checked by tests/bench/test_tpcds_harness.py."""

from __future__ import annotations

from typing import Any

import sqlglot
import yaml
from sqlglot import exp

from benchmarks.tpcds_tables import TABLES
from catalog.model import TableInfo

BENCH_USER = "bench"

# Every table: at least one permissive filter that applies to `bench` and keeps every row
# (a primary-key column is never NULL; the ranges cover the whole generated domain), so
# benchmark results stay comparable with the raw run while Spark still evaluates a predicate.
# (table, filter id suffix, principals, kind, predicate)
_FILTERS: tuple[tuple[str, str, tuple[str, ...], str, str], ...] = (
    ("call_center", "pk", ("group:analysts",), "permissive", "cc_call_center_sk IS NOT NULL"),
    ("call_center", "region", ("group:analysts",), "restrictive",
     "is_member('regional') OR cc_state = 'TN'"),
    ("catalog_page", "pk", ("group:analysts",), "permissive", "cp_catalog_page_sk IS NOT NULL"),
    ("catalog_returns", "pk", ("bench",), "permissive", "cr_order_number >= 1"),
    ("catalog_sales", "pk", ("bench",), "permissive", "cs_order_number >= 1"),
    ("catalog_sales", "region", ("group:analysts",), "restrictive",
     "is_member('regional') OR cs_warehouse_sk = 1"),
    ("customer", "pk", ("group:analysts",), "permissive", "c_customer_sk IS NOT NULL"),
    ("customer", "owner", ("bench",), "restrictive",
     "current_user() = 'bench' OR c_preferred_cust_flag = 'N'"),
    ("customer_address", "pk", ("group:analysts",), "permissive", "ca_address_sk IS NOT NULL"),
    ("customer_address", "region", ("group:analysts",), "restrictive",
     "is_member('regional') OR ca_state IN ('TN', 'GA')"),
    ("customer_demographics", "pk", ("group:analysts",), "permissive", "cd_demo_sk >= 1"),
    ("date_dim", "window", ("group:analysts",), "permissive", "d_year BETWEEN 1900 AND 2100"),
    ("household_demographics", "pk", ("group:analysts",), "permissive",
     "hd_demo_sk IS NOT NULL"),
    ("income_band", "pk", ("group:analysts",), "permissive", "ib_income_band_sk IS NOT NULL"),
    ("inventory", "pk", ("bench",), "permissive",
     "inv_item_sk IS NOT NULL AND inv_warehouse_sk IS NOT NULL"),
    ("inventory", "region", ("group:analysts",), "restrictive",
     "is_member('regional') OR inv_warehouse_sk = 1"),
    ("item", "pk", ("group:analysts",), "permissive", "i_item_sk IS NOT NULL"),
    ("promotion", "pk", ("group:analysts",), "permissive", "p_promo_sk IS NOT NULL"),
    ("reason", "pk", ("group:analysts",), "permissive", "r_reason_sk >= 1"),
    ("ship_mode", "pk", ("group:analysts",), "permissive", "sm_ship_mode_sk IS NOT NULL"),
    ("store", "pk", ("group:analysts",), "permissive", "s_store_sk IS NOT NULL"),
    ("store", "region", ("group:regional",), "restrictive",
     "is_member('regional') OR s_state = 'TN'"),
    ("store_returns", "pk", ("bench",), "permissive", "sr_ticket_number >= 1"),
    ("store_sales", "pk", ("bench",), "permissive", "ss_ticket_number >= 1"),
    ("store_sales", "region", ("group:analysts",), "restrictive",
     "is_member('regional') OR ss_store_sk IN (1, 2)"),
    ("time_dim", "window", ("group:analysts",), "permissive", "t_hour BETWEEN 0 AND 23"),
    ("warehouse", "pk", ("group:analysts",), "permissive", "w_warehouse_sk IS NOT NULL"),
    ("warehouse", "region", ("group:analysts",), "restrictive",
     "is_member('regional') OR w_state = 'TN'"),
    ("web_page", "pk", ("group:analysts",), "permissive", "wp_web_page_sk IS NOT NULL"),
    ("web_page", "protected", ("group:analysts",), "restrictive",
     "current_user() IN ('bench', 'admin') OR wp_type <> 'protected'"),
    ("web_returns", "pk", ("bench",), "permissive", "wr_order_number >= 1"),
    ("web_sales", "pk", ("bench",), "permissive", "ws_order_number >= 1"),
    ("web_site", "pk", ("group:analysts",), "permissive", "web_site_sk IS NOT NULL"),
    ("web_site", "region", ("group:regional",), "restrictive",
     "is_member('regional') OR web_state = 'TN'"),
)  # fmt: skip

# Masks that apply to `bench` (principals "*"). Most hit columns no query reads, so answers
# stay comparable; the ones marked USED are read by queries: hashes of business keys keep
# joins and groups intact, the custom ones generalise values (round, top-code).
# (table, mask, columns, custom expression)
_MASKS: tuple[tuple[str, str, tuple[str, ...], str | None], ...] = (
    ("call_center", "hash", ("cc_call_center_id",), None),  # USED q91 (group by)
    ("call_center", "last4", ("cc_zip",), None),
    ("call_center", "redact", ("cc_market_manager", "cc_street_name"), None),
    ("call_center", "year", ("cc_rec_start_date", "cc_rec_end_date"), None),
    ("catalog_page", "hash", ("cp_catalog_page_id",), None),  # USED q5, q80 (output id)
    ("catalog_page", "redact", ("cp_description",), None),
    ("catalog_returns", "null", ("cr_fee", "cr_return_ship_cost"), None),
    ("catalog_sales", "null", ("cs_ext_tax", "cs_net_paid_inc_ship_tax"), None),
    ("customer", "hash", ("c_customer_id",), None),  # USED q1, q4, q11, ... (output, join)
    ("customer", "null", ("c_birth_day",), None),  # USED q30 (output)
    ("customer_address", "hash", ("ca_address_id",), None),
    ("customer_address", "redact", ("ca_street_name",), None),  # USED q64, q81 (output)
    ("customer_address", "last4", ("ca_suite_number",), None),  # USED q81 (output)
    ("customer_demographics", "null", ("cd_credit_rating",), None),  # USED q10, q69 (group by)
    ("date_dim", "hash", ("d_date_id",), None),
    ("household_demographics", "custom", ("hd_vehicle_count",), "least({col}, 4)"),  # USED
    ("income_band", "custom", ("ib_upper_bound",), "least({col}, 200000)"),  # USED q84
    ("inventory", "custom", ("inv_quantity_on_hand",), "round({col}, -1)"),  # USED q21, q22, ...
    ("item", "hash", ("i_product_name",), None),  # USED q22, q41, q44, q64, q67 (group by)
    ("item", "redact", ("i_formulation", "i_container"), None),
    ("item", "year", ("i_rec_start_date", "i_rec_end_date"), None),
    ("promotion", "hash", ("p_promo_id",), None),
    ("promotion", "null", ("p_cost",), None),
    ("promotion", "redact", ("p_promo_name",), None),
    ("reason", "hash", ("r_reason_id",), None),
    ("ship_mode", "hash", ("sm_ship_mode_id",), None),
    ("ship_mode", "redact", ("sm_contract",), None),
    ("store", "null", ("s_floor_space",), None),
    ("store", "redact", ("s_manager", "s_market_manager"), None),
    ("store", "year", ("s_rec_start_date", "s_rec_end_date"), None),
    ("store_returns", "null", ("sr_fee", "sr_return_ship_cost", "sr_store_credit"), None),
    ("store_sales", "null", ("ss_net_paid_inc_tax",), None),
    ("time_dim", "hash", ("t_time_id",), None),
    ("time_dim", "redact", ("t_sub_shift",), None),
    ("warehouse", "hash", ("w_warehouse_id",), None),
    ("warehouse", "last4", ("w_zip",), None),
    ("warehouse", "redact", ("w_street_name",), None),
    ("web_page", "hash", ("wp_web_page_id",), None),
    ("web_page", "redact", ("wp_url",), None),
    ("web_page", "year", ("wp_rec_start_date", "wp_rec_end_date"), None),
    ("web_returns", "null", ("wr_account_credit", "wr_fee"), None),  # wr_fee USED q85 (avg)
    ("web_sales", "null", ("ws_ext_tax", "ws_net_paid_inc_ship_tax"), None),
    ("web_site", "last4", ("web_zip",), None),
    ("web_site", "redact", ("web_manager",), None),
    ("web_site", "year", ("web_rec_start_date", "web_rec_end_date"), None),
)

# Columns classified `pii` and masked through the tag (the rewriter's tag path), not by name.
_PII_TAGGED: tuple[tuple[str, str], ...] = (
    ("customer", "c_email_address"),  # USED q4, q11, q30 (output)
    ("customer", "c_login"),  # USED q30 (output)
)

_MASK_TYPES: dict[str, tuple[str, ...]] = {
    # which Spark types a built-in mask makes sense for (the contract's table)
    "redact": ("string",),
    "last4": ("string",),
    "first4": ("string",),
    "email_domain": ("string",),
    "year": ("date", "timestamp", "timestamp_ntz"),
}


def tpcds_policy_yaml(tables: list[TableInfo], catalog: str = "tpcds", schema: str = "sf1") -> str:
    """A policy set (policy-format.md) with row filters and masks on every given TPC-DS table.

    All of it applies to the user `bench` (directly or through `analysts`/`regional`), so a
    benchmark run as `bench` pays for every filter and mask. Ids are fixed so that runs,
    audit lines and reports can be compared across versions.
    """
    by_name = {t.name.lower(): t for t in tables}
    unknown = sorted(set(by_name) - set(TABLES))
    if unknown:
        raise ValueError(f"not TPC-DS tables: {unknown}")
    prefix = f"{catalog}.{schema}".lower()

    def column_type(table: str, column: str) -> str:
        info = by_name[table].column(column)
        if info is None:
            raise ValueError(f"{prefix}.{table} has no column {column!r}")
        return info.type_text

    row_filters: list[dict[str, Any]] = []
    for table, suffix, principals, kind, where in _FILTERS:
        if table not in by_name:
            continue
        for column in _columns_in(where):
            column_type(table, column)
        row_filters.append(
            {
                "id": f"tpcds-{table.replace('_', '-')}-{suffix}",
                "on": f"{prefix}.{table}",
                "principals": list(principals),
                "where": where,
                "kind": kind,
            }
        )

    column_masks: list[dict[str, Any]] = []
    for table, mask, columns, expression in _MASKS:
        if table not in by_name:
            continue
        for column in columns:
            ctype = column_type(table, column)
            allowed = _MASK_TYPES.get(mask)
            if allowed and ctype not in allowed:
                raise ValueError(f"mask {mask} does not suit {table}.{column} ({ctype})")
        rule: dict[str, Any] = {
            "id": f"tpcds-{table.replace('_', '-')}-{mask}",
            "on": f"{prefix}.{table}",
            "columns": list(columns),
            "mask": mask,
        }
        if expression is not None:
            rule["expression"] = expression
        rule["principals"] = ["*"]
        column_masks.append(rule)

    tags = {f"{prefix}.{t}.{c}": ["pii"] for t, c in _PII_TAGGED if t in by_name}
    for t, c in _PII_TAGGED:
        if t in by_name:
            column_type(t, c)
    if tags:
        column_masks.append(
            {
                "id": "tpcds-pii-hash",
                "on": f"{prefix}.*",
                "tags": ["pii"],
                "mask": "hash",
                "principals": ["*"],
                "except": ["group:pii-readers"],
            }
        )

    doc: dict[str, Any] = {
        "groups": {
            "analysts": [BENCH_USER],
            "regional": [BENCH_USER],
            "pii-readers": ["admin"],
        },
        "tags": tags,
        "grants": [
            {
                "id": "tpcds-analysts-select",
                "principals": ["group:analysts"],
                "privileges": ["select"],
                "on": f"{prefix}.*",
            }
        ],
        "row_filters": row_filters,
        "column_masks": column_masks,
    }
    header = (
        f"# TPC-DS benchmark policies for {prefix}: generated by benchmarks/tpcds.py.\n"
        f"# Every table has a row filter and a column mask that apply to user '{BENCH_USER}'.\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def _columns_in(predicate: str) -> set[str]:
    """Column names a filter predicate reads (Spark dialect), to check them against the table."""
    tree = sqlglot.parse_one(predicate, read="spark")
    return {c.name.lower() for c in tree.find_all(exp.Column)}
