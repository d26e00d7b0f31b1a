"""One location, one table through REST (issue 25, item 2): a CREATE TABLE sent to
`/statements` whose managed location is already another registered table's is refused with
the Python API's line, before Spark writes a file."""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from pathlib import Path

import pytest
from api_testkit import LG

from governance.errors import Refused


def test_rest_create_table_at_a_registered_location_is_refused(as_user, api_lakegate) -> None:
    cat = api_lakegate.catalog
    target = Path(cat.managed_location("main", "sales", "fresh_rest"))
    orders = cat.table("main", "sales", "orders")
    # a catalog from before issue 25 may hold a table there under another name
    cat.store.put_table(dataclasses.replace(orders, name="holder_rest", location=str(target)))
    statement = "CREATE TABLE main.sales.fresh_rest (id INT)"
    try:
        with pytest.raises(Refused) as expected:
            api_lakegate.session("root").sql(statement)
        r = as_user("root").post(
            f"{LG}/statements",
            json={"statement": statement},
            headers={"X-Lakegate-Caller-Context": f"sql-{uuid.uuid4().hex}"},
        )
        assert r.status_code == 403, r.text  # a refusal, as every Refused over REST
        assert r.json() == {"error_code": "PERMISSION_DENIED", "message": str(expected.value)}
        assert str(expected.value) == (
            f"CREATE TABLE main.sales.fresh_rest refused: table main.sales.fresh_rest: location "
            f"{target} equals the location of another registered table; one location holds "
            "one table"
        )
        assert not target.exists()
        assert cat.table("main", "sales", "fresh_rest") is None
    finally:
        cat.drop_table("main", "sales", "holder_rest")
        cat.drop_table("main", "sales", "fresh_rest")
        if target.exists():
            shutil.rmtree(target)
