"""One location, one table: two registrations must never share files (issue 25, item 2).

A table whose location equals, contains or lies inside another table's location reads and
writes the other's files: its manager could then change the other's tags, properties or
rows. Unity Catalog refuses overlapping external locations; so does every entry point here
(`register_table` in Python, the CLI and REST, CREATE TABLE in SQL), through `overlapping`,
which the store calls inside the registering transaction.

Locations are compared as parts after normalisation: `file:` schemes and trailing slashes
dropped, `.`/`..` collapsed, symlinks that exist followed, and case folded where the
filesystem folds it. Nothing else is folded: a Unicode look-alike (a fullwidth letter, a fullwidth
solidus) is another path, both to the filesystem and here, so it can neither alias nor
escape another table's directory. Object-store URLs compare by scheme, bucket (both
case-insensitive) and normalised key path.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from catalog.model import TableInfo


def normalise_location(location: str) -> str:
    """`file:/x/`, `file:///x` and `/x` are one place."""
    loc = location
    if loc.startswith("file://"):
        loc = loc[len("file://") :]
    elif loc.startswith("file:"):
        loc = loc[len("file:") :]
    return loc.rstrip("/") or "/"


def _folds_case(path: Path) -> bool:
    """Whether the filesystem holding `path` folds case: its nearest existing ancestor with
    a cased name is also found under the name's other case."""
    for p in (path, *path.parents):
        if p.exists() and p.name.swapcase() != p.name:
            other = p.with_name(p.name.swapcase())
            try:
                return other.exists() and os.path.samefile(p, other)
            except OSError:
                return False
    return False


def location_parts(location: str) -> tuple[str, ...]:
    """A location as comparable parts: (scheme, authority, *path parts)."""
    loc = normalise_location(location.strip())
    if "://" in loc:
        url = urlsplit(loc)
        path = posixpath.normpath("/" + url.path.lstrip("/"))
        parts = tuple(p for p in path.split("/") if p)
        return (url.scheme.lower(), url.netloc.lower(), *parts)
    resolved = Path(loc).resolve()
    parts = resolved.parts[1:]
    if _folds_case(resolved):
        parts = tuple(p.casefold() for p in parts)
    return ("file", "", *parts)


def overlap(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """How location `a` overlaps `b`: 'equals', 'lies inside', 'contains', or None."""
    if a == b:
        return "equals"
    if len(a) > len(b) and a[: len(b)] == b:
        return "lies inside"
    if len(b) > len(a) and b[: len(a)] == a:
        return "contains"
    return None


class LocationOverlaps(Exception):
    """A table's location equals, contains or lies inside another registered table's.
    The message names the location only; `other` (the other table's name) is for
    administrators' tools, never for an analyst's error line."""

    def __init__(self, name: str, location: str, how: str, other: str) -> None:
        super().__init__(
            f"table {name}: location {location} {how} the location of another registered "
            "table; one location holds one table"
        )
        self.other = other


def overlapping(info: TableInfo, registered: Iterable[TableInfo]) -> None:
    """Raise LocationOverlaps if `info`'s location overlaps a registered table other than
    `info` itself (a re-registration under the same name replaces it)."""
    mine = location_parts(info.location)
    name = info.full_name.lower()
    for t in registered:
        if t.full_name.lower() == name:
            continue
        how = overlap(mine, location_parts(t.location))
        if how is not None:
            raise LocationOverlaps(name, info.location, how, t.full_name)
