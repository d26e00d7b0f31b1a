"""REST `POST /statements` runs the text Lakegate checked (issue 24): `${...}` references
to the server's environment, JVM properties and Spark settings come back as the text they
are, never as the values."""

from __future__ import annotations

import uuid

AZURE_KEY = "spark.hadoop.fs.azure.account.key.lgtest.dfs.core.windows.net"
REFERENCES = (
    "${env:HOME}",
    "${env:PATH}",
    "${system:user.name}",
    "${spark.app.name}",
    "${hiveconf:spark.app.name}",
    "${" + AZURE_KEY + "}",
)


def test_variable_references_come_back_as_text(as_user, api_lakegate) -> None:
    spark = api_lakegate.spark
    spark.conf.set(AZURE_KEY, "azure-storage-key-must-stay-secret")
    try:
        r = as_user("carol").post(
            "/api/lakegate/v1/statements",
            json={
                "statement": "SELECT "
                + ", ".join(f"'{v}' AS c{i}" for i, v in enumerate(REFERENCES))
            },
            headers={"X-Lakegate-Caller-Context": f"subst-{uuid.uuid4().hex}"},
        )
    finally:
        spark.conf.unset(AZURE_KEY)
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [list(REFERENCES)]


def test_a_set_statement_is_refused(as_user) -> None:
    r = as_user("carol").post(
        "/api/lakegate/v1/statements",
        json={"statement": "SET spark.sql.variable.substitute=true"},
    )
    assert (r.status_code, r.json()["message"]) == (
        403,
        "statement kind SET is not governed by Lakegate",
    ), r.text
