"""Helpers for the security tests: what each demo persona must never see.

The demo lakehouse (tests/conftest.py `lakehouse`) holds the raw values below. For every
persona we list the raw values that the reference policies hide from them (masked PII,
denied columns, rows outside their row filters, tables they have no grant on). A governed
result or an error message that contains one of them is a leak.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

EMAILS = [
    "anna@example.de",
    "ben@example.com",
    "chen@example.cn",
    "dom@example.fr",
    "eve@example.com",
    "farah@example.uk",
]
PHONES = [
    "+49 30 1234567",
    "+1 212 5550199",
    "+86 10 8888 1234",
    "+33 1 4567 8910",
    "+1 415 5550142",
    "+44 20 7946 0958",
]
SSNS = ["111-22-3333", "222-33-4444", "333-44-5555", "444-55-6666", "555-66-7777", "666-77-8888"]
SALARIES = ["185000.0", "172000.0", "191000.0", "185000", "172000", "191000"]
BIRTH_DATES = ["1986-12-09", "1992-06-23", "1995-12-10"]
CAMPAIGNS = ["Spring launch", "Summer sale", "50000.0", "20000.0"]
TEST_ORDER = ["999.99"]  # order 5, is_test: hidden from every analyst
# rows outside carol's filters: non-EMEA orders, customers outside DE/FR/UK
CAROL_HIDDEN_ROWS = [
    "AMER",
    "APAC",
    "75.50",
    "310.25",
    "18.75",
    "230.00",
    "Ben Carter",
    "Chen Wei",
    "Eve Moore",
]

ALL_NAMES = [
    "Anna Schmidt",
    "Ben Carter",
    "Chen Wei",
    "Dominique Leroy",
    "Eve Moore",
    "Farah Khan",
    "Grace Hopper",
    "Alan Turing",
    "Ada Lovelace",
]

HIDDEN: dict[str, list[str]] = {
    # analyst: PII hashed, ssn and salary denied, test orders filtered out
    "alice": EMAILS + PHONES + SSNS + SALARIES + BIRTH_DATES + CAMPAIGNS + TEST_ORDER,
    "bob": EMAILS + PHONES + SSNS + SALARIES + BIRTH_DATES + CAMPAIGNS + TEST_ORDER,
    # EMEA analyst: EMEA rows only, phone last 4 only
    "carol": EMAILS
    + PHONES
    + SSNS
    + SALARIES
    + BIRTH_DATES
    + CAMPAIGNS
    + TEST_ORDER
    + CAROL_HIDDEN_ROWS,
    # PII reader: clear email/phone, still no ssn, no salary, no test orders
    "dana": SSNS + SALARIES + BIRTH_DATES + CAMPAIGNS + TEST_ORDER,
    # sales owner: manage on main.sales, PII hashed (ssn too); nothing in hr/marketing
    "erin": EMAILS + PHONES + SSNS + SALARIES + BIRTH_DATES + CAMPAIGNS,
    # auditor: nothing in main at all
    "frank": EMAILS + PHONES + SSNS + SALARIES + BIRTH_DATES + CAMPAIGNS + TEST_ORDER + ALL_NAMES,
}


def flatten(value: Any) -> Iterator[str]:
    """Every scalar inside a collected value (Rows, structs, arrays, maps) as text."""
    if value is None:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(k)
            yield from flatten(v)
    elif isinstance(value, list | tuple):  # pyspark Row is a tuple
        for v in value:
            yield from flatten(v)
    elif isinstance(value, bytes | bytearray):
        yield bytes(value).decode("utf-8", "replace")
    elif isinstance(value, dt.date | dt.datetime):
        yield value.isoformat()
    elif isinstance(value, Decimal | float | int | bool):
        yield str(value)
    else:
        yield str(value)


def leaked(user: str, texts: Iterable[str]) -> list[str]:
    """The hidden raw values of `user` that occur in any of `texts`."""
    hidden = HIDDEN.get(user, [])
    found: list[str] = []
    for t in texts:
        for h in hidden:
            if h in t and h not in found:
                found.append(h)
    return found


def assert_no_leak(user: str, rows: Any, what: str = "result") -> None:
    bad = leaked(user, list(flatten(rows)))
    assert not bad, f"{what} for {user} contains hidden raw value(s) {bad}"


def assert_message_clean(user: str, message: str) -> None:
    bad = leaked(user, [message])
    assert not bad, f"error shown to {user} echoes hidden value(s) {bad}: {message[:300]}"
