"""Which columns a statement names and reads, from its tree: what the audit records as read,
which visible columns a query's views must project, and a named hidden column as an
access-denied error rather than "column not found". Pure functions over sqlglot trees.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from sqlglot import exp

from governance.errors import AccessDenied
from governance.sql.walk import Walked, collect

if TYPE_CHECKING:
    from governance.policy.enforcer import TableAccess
    from governance.rewrite.dynamic_views import ReadView


def columns_named(
    stmt: exp.Expression, walked: Walked | None = None
) -> tuple[set[str], set[str], bool, set[str]]:
    """Column names (lower), their qualifiers, whether an unqualified `*` occurs, and the
    qualifiers of `t.*`; a conservative picture of what a statement reads. `walked`: the
    statement's one walk (governance/sql/walk.py), if current."""
    names: set[str] = set()
    qualifiers: set[str] = set()
    qualified_stars: set[str] = set()
    star = False
    for node in (walked or collect(stmt)).named:  # Column, Star and Dot nodes
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                qualified_stars.add(node.table.lower())
            else:
                names.update(p.name.lower() for p in node.parts)  # `this` is one of them
                if node.table:
                    qualifiers.add(node.table.lower())
        elif isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count):
            star = True
        elif isinstance(node, exp.Dot):  # `s.field`: the identifiers it names
            for part in node.iter_expressions():
                if isinstance(part, exp.Identifier):
                    names.add(part.this.lower())
    return names, qualifiers, star, qualified_stars


_WORD = re.compile(r"[a-z_][a-z0-9_]*")
_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def words_spark_may_resolve(
    stmt: exp.Expression, text: str, walked: Walked | None = None
) -> frozenset[str] | None:
    """Every word of the generated statement (lower-case): a superset of the column names
    Spark can resolve in it, since Spark parses that very text. None when a column may be
    read without being named (`*`, `t.*`, NATURAL JOIN, PIVOT/UNPIVOT's implicit columns,
    a column alias list `t (a, b)`, which renames by position),
    when the text is not ASCII (Java's case-insensitive matching of non-ASCII letters is
    not Python's), or when a quoted name is no plain word (Spark may read it as a regex).
    `walked`: the statement's one walk (governance/sql/walk.py), if current."""
    if not text.isascii():
        return None
    for node in (walked or collect(stmt)).unnamed:
        if _unnamed_read(node):
            return None
    return frozenset(_WORD.findall(text.lower()))


def _unnamed_read(node: exp.Expression) -> bool:
    """Whether the node reads columns it does not name, or names one that is no word."""
    if isinstance(node, exp.Star):
        return not isinstance(node.parent, exp.Count)
    if isinstance(node, exp.Join):
        return "NATURAL" in node.method.upper()
    if isinstance(node, exp.Identifier):
        return node.quoted and not _SIMPLE_NAME.fullmatch(node.this)
    if isinstance(node, exp.TableAlias):  # `t (a, b, c)` renames columns by position
        return bool(node.args.get("columns"))
    return isinstance(node, exp.Pivot)


def columns_to_project(access: TableAccess, words: frozenset[str]) -> tuple[int, ...] | None:
    """Positions of the visible columns a query can name (None: all of them). Analysing a
    view costs Spark per projected column, so a query naming 3 of 30 columns gets a
    3-column view; a column whose name is no plain word is always kept. At least one column
    stays (a projection cannot be empty): the first unmasked one if any."""
    visible = access.visible_columns
    kept = tuple(i for i, (low, plain) in enumerate(_words(visible)) if not plain or low in words)
    if len(kept) == len(visible):
        return None
    if not kept and visible:
        plain = [i for i, c in enumerate(visible) if c.lower() not in access.masks]
        kept = (plain[0] if plain else 0,)
    return kept


def columns_read(view: ReadView, names: set[str], star: bool, qstars: set[str]) -> list[str]:
    if star or view.alias.lower() in qstars:
        return list(view.access.visible_columns)
    return [c for c, low in _lowered(view.access.visible_columns) if low in names]


@functools.lru_cache(maxsize=4096)
def _words(columns: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """Each column's lower-case name and whether it is a plain word, once per column list."""
    return tuple((c.lower(), _SIMPLE_NAME.fullmatch(c) is not None) for c in columns)


@functools.lru_cache(maxsize=4096)
def _lowered(columns: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Each column with its lower-case name, once per column list, not per statement."""
    return tuple((c, c.lower()) for c in columns)


def check_hidden_columns(
    stmt: exp.Expression, views: list[ReadView], user: str, walked: Walked | None = None
) -> None:
    """Naming a denied column is an access-denied error, not 'column not found'. `walked`:
    the statement's one walk (governance/sql/walk.py), if current."""
    hiddens = {id(v): {h.lower(): h for h in v.access.hidden_columns} for v in views}
    if not any(hiddens.values()):
        return  # nothing is hidden: no name can be a denied column (skips the walk)
    nodes = walked or collect(stmt)
    visible = {c.lower() for v in views for c in v.access.visible_columns}
    aliases = {a.alias.lower() for a in nodes.aliases}
    by_alias = {v.alias.lower(): v for v in views}
    for join in nodes.joins:
        for ident in join.args.get("using") or []:
            name = ident.name.lower()
            for v in views:
                hidden = hiddens[id(v)]
                if name in hidden and name not in visible:
                    raise AccessDenied(
                        f"access denied: user {user} may not read column {hidden[name]} of "
                        f"table {v.access.table.full_name}",
                        cmd="select",
                        tables=(v.access.table.full_name,),
                        policies=v.access.hidden_by.get(name) or v.access.grant_ids,
                    )
    for col in nodes.columns:
        if isinstance(col.this, exp.Star):
            continue
        name = col.name.lower()
        qualifier = col.table.lower() if col.table else ""
        candidates = (
            [by_alias[qualifier]] if qualifier in by_alias else (views if not qualifier else [])
        )
        if not candidates and qualifier:
            # `t.col.field`: the qualifier may be a column of an unaliased source
            name = qualifier
            candidates = views
        for v in candidates:
            hidden = hiddens[id(v)]
            if name in hidden and (
                qualifier in by_alias or (name not in visible and name not in aliases)
            ):
                raise AccessDenied(
                    f"access denied: user {user} may not read column {hidden[name]} of table "
                    f"{v.access.table.full_name}",
                    cmd="select",
                    tables=(v.access.table.full_name,),
                    policies=v.access.hidden_by.get(name) or v.access.grant_ids,
                )
