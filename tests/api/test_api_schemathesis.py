"""Property-based run over our own OpenAPI schema with schemathesis: no input makes the
server fail (5xx), and every answer matches what the schema documents (status code, content
type, body). Valid and invalid inputs, bounded examples per operation.

(schemathesis' pytest plugin does not load under this pytest, so the operations' hypothesis
strategies are driven directly.)
"""

from __future__ import annotations

import pytest
import schemathesis
from api_testkit import token_of
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode, checks
from schemathesis.specs.openapi import checks as openapi_checks

CHECKS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]


@pytest.fixture(scope="session")
def operations(app) -> dict:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    return {op.label: op for op in (r.ok() for r in schema.get_all_operations())}


def test_schema_covers_every_route(operations) -> None:
    ids = {op.definition.raw.get("operationId") for op in operations.values()}
    assert {
        "listCatalogs",
        "getCatalog",
        "listSchemas",
        "getSchema",
        "listTables",
        "getTable",
        "getTableExists",
        "generateTemporaryTableCredentials",
        "generateTemporaryPathCredentials",
        "generateTemporaryVolumeCredentials",
        "generateTemporaryModelVersionCredentials",
        "getTableDetail",
        "getTableHistory",
        "search",
        "whoami",
        "listDomains",
        "getDomain",
        "listDomainTables",
        "listDomainProducts",
        "listProducts",
        "getProduct",
        "createProduct",
        "updateProduct",
        "retireProduct",
        "executeStatement",
    } <= ids


def _checks(op) -> list:
    """UC's credential-vending routes answer a documented 501 by design (credentials are
    never vended); the conformance checks still hold them to it."""
    return CHECKS[1:] if "501" in op.definition.raw["responses"] else CHECKS


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("user", ["erin", "bob"])
def test_no_input_makes_the_server_fail(operations, mode: GenerationMode, user: str) -> None:
    """As erin (a domain owner: product writes get past the ownership check) and bob."""
    headers = {"Authorization": f"Bearer {token_of(user)}"}
    failures: list[str] = []
    for label, op in sorted(operations.items()):
        examples = 6 if "statements" in label else 15

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case) -> None:
            case.call_and_validate(headers=headers, checks=_checks(case.operation))

        try:
            run()
        except Exception as e:  # collect every operation's failure, not only the first
            failures.append(f"{label}: {str(e)[:1500]}")
    assert not failures, "\n\n".join(failures)


# What the schema cannot say: the policies decide which domains and tables a product may
# name, and the SQL parser which statements are valid; both answer 400 to well-formed bodies.
SEMANTIC_400 = {"createProduct", "executeStatement"}


def test_schema_valid_requests_are_accepted(operations) -> None:
    """A request the schema calls valid is never refused as invalid (400): the schema states
    every name format, page token and non-null field the server checks."""
    headers = {"Authorization": f"Bearer {token_of('erin')}"}
    failures: list[str] = []
    for label, op in sorted(operations.items()):
        if op.definition.raw.get("operationId") in SEMANTIC_400:
            continue

        @given(case=op.as_strategy(generation_mode=GenerationMode.POSITIVE))
        @settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case) -> None:
            case.call_and_validate(
                headers=headers, checks=[openapi_checks.positive_data_acceptance]
            )

        try:
            run()
        except Exception as e:
            failures.append(f"{label}: {str(e)[:1500]}")
    assert not failures, "\n\n".join(failures)
