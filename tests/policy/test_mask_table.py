"""The masks are one table (governance/policy/masks.py): everything that knows mask kinds derives
from it, so a new mask is one entry. Offline: no JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.models import MaskedColumn, MaskInfo
from governance.errors import Refused
from governance.policy.masks import MASK_KINDS, mask_expr, masked_type
from governance.policy.model import MASKS

SCHEMA = json.loads((Path(__file__).parents[2] / "policies" / "schema.json").read_text())


def test_policy_model_masks_are_the_table_keys() -> None:
    assert tuple(MASK_KINDS) == MASKS


def test_json_schema_mask_enum_is_the_table_keys() -> None:
    mask = SCHEMA["$defs"]["columnMask"]["properties"]["mask"]["anyOf"][0]["enum"]
    assert tuple(mask) == tuple(MASK_KINDS)


@pytest.mark.parametrize("model", [MaskInfo, MaskedColumn])
def test_api_documents_every_mask_kind_with_its_description(model) -> None:
    text = model.model_json_schema()["properties"]["kind"]["description"]
    for kind in MASK_KINDS.values():
        assert f"{kind.name}: {kind.description}" in text


@pytest.mark.parametrize(
    ("mask", "type_text", "shown"),
    [
        ("redact", "string", "string"),
        ("redact", "varchar(10)", "string"),
        ("redact", "int", "int"),
        ("null", "decimal(10,2)", "decimal(10,2)"),
        ("hash", "bigint", "string"),
        ("last4", "int", "string"),
        ("first4", "string", "string"),
        ("email_domain", "string", "string"),
        ("year", "date", "date"),
        ("year", "timestamp", "timestamp"),
        ("year", "string", "date"),
        ("custom", "int", "masked"),
        ("no-such-mask", "int", "int"),
    ],
)
def test_describe_shows_the_type_the_mask_leaves(mask: str, type_text: str, shown: str) -> None:
    assert masked_type(mask, type_text) == shown


@pytest.mark.parametrize(
    ("mask", "type_text", "sql"),
    [
        ("redact", "string", "'REDACTED'"),
        ("redact", "int", "CAST(NULL AS INT)"),
        ("null", "date", "CAST(NULL AS DATE)"),
        ("hash", "string", "SHA2(CAST(`c` AS STRING), 256)"),
        (
            "last4",
            "string",
            "CONCAT(REPEAT('*', GREATEST(LENGTH(CAST(`c` AS STRING)) - 4, 0)), "
            "RIGHT(CAST(`c` AS STRING), 4))",
        ),
        (
            "first4",
            "string",
            "CONCAT(LEFT(CAST(`c` AS STRING), 4), "
            "REPEAT('*', GREATEST(LENGTH(CAST(`c` AS STRING)) - 4, 0)))",
        ),
        ("email_domain", "string", "REGEXP_EXTRACT(CAST(`c` AS STRING), '^.*@(.*)$', 1)"),
        ("year", "date", "TRUNC(`c`, 'year')"),
        ("year", "timestamp", "DATE_TRUNC('year', `c`)"),
        ("year", "string", "TRUNC(CAST(`c` AS DATE), 'year')"),
    ],
)
def test_builtin_mask_generates_exactly(mask: str, type_text: str, sql: str) -> None:
    assert mask_expr(mask, "c", type_text).sql("spark") == sql


def test_unknown_mask_is_refused_by_name() -> None:
    with pytest.raises(Refused, match=r"unknown mask 'rot13' on column c"):
        mask_expr("rot13", "c", "string")


def test_custom_mask_without_expression_is_refused() -> None:
    with pytest.raises(Refused, match=r"custom mask on column c has no expression"):
        mask_expr("custom", "c", "string")
