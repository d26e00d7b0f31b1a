"""Through the gateway too, a readable analysis error names only what the caller may see
(issue 25, item 4): Spark's line is checked against the words of the request the client
sent and the views it read (governance/verify/readable.py)."""

from __future__ import annotations

import re

import pytest

ALICE_SEES = {"id", "name", "department", "birth_date"}  # of main.hr.employees


def _suggested(text: str) -> set[str]:
    return set(re.findall(r"`(\w+)`", text.split("Did you mean")[1]))


@pytest.mark.parametrize("kind", ["sql", "dataframe"])
def test_a_misspelt_column_keeps_its_readable_line_without_hidden_columns(remote, kind) -> None:
    s = remote("alice")
    with pytest.raises(Exception) as e:
        if kind == "sql":
            s.sql("SELECT nme FROM main.hr.employees").collect()
        else:
            s.table("main.hr.employees").select("nme").collect()
    text = str(e.value)
    assert "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in text and "`nme`" in text
    assert _suggested(text) and _suggested(text) <= ALICE_SEES  # a SQL view is narrowed
    assert "salary" not in text


def test_an_error_naming_the_requests_own_words_stays_readable(remote) -> None:
    """`substr` with one argument: WRONG_NUM_ARGS names the function (a built-in, which the
    rewriter respells `substring`) and Spark's fixed parameters (argument counts, its
    documentation root)."""
    with pytest.raises(Exception) as e:
        remote("alice").sql("SELECT substr(name) FROM main.hr.employees").collect()
    assert "[WRONG_NUM_ARGS.WITHOUT_SUGGESTION] The `substring` requires" in str(e.value)
