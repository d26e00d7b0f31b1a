"""One walk over a statement's tree (issue 31): the nodes each planning step looks at,
gathered by a single compiled sqlglot traversal instead of one traversal per step.

sqlglot's walk costs about the same whatever it looks for, so planning a query walked its
tree once per step (hints, comma joins, constructs, columns named, words Spark may
resolve), and resolving tables walked it once more in Python. `collect` walks it once and
keeps, per step, the nodes of that step's kinds in the order sqlglot's breadth-first
`find_all` yields them: a step reading its list sees what its own walk would have seen on
the tree as collected (resolve_tables orders its tables itself, governance/sql/resolve.py).

A step that replaces or drops nodes a later step counts (an identity function folded to a
literal, a table's time travel dropped by the rewrite) marks the record `stale`; `valid`
then gives None and the next step walks the tree again (a statement stripped of hints or
re-parsed with temp views is walked again at once). Names the rewrite replaces (a CTE's, a
table's qualifiers) stay in `unnamed`: the words check may then keep every visible column
of a view, never fewer. Where Spark's generator may reshape the tree in place (`RESHAPED`),
the words check walks the generated tree itself, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from governance.sql.constructs import GOVERNED_NODES

#: columns_named's kinds (governance/rewrite/columns.py), and check_hidden_columns' Column.
NAMED = (exp.Column, exp.Star, exp.Dot)
#: The kinds words_spark_may_resolve looks at for a column read without being named.
UNNAMED = (exp.Star, exp.Join, exp.Identifier, exp.TableAlias, exp.Pivot)
#: The kinds Spark's sqlglot generator may reshape in place (its preprocess transforms:
#: QUALIFY, DISTINCT ON, UNNEST, ANY, pivots, WITHIN GROUP, struct arrays, sequences). A
#: tree holding one is walked again after generation where the generated tree counts.
RESHAPED = (
    exp.Qualify,
    exp.Distinct,
    exp.Unnest,
    exp.Any,
    exp.Pivot,
    exp.WithinGroup,
    exp.Array,
    exp.GenerateSeries,
)
#: (list name, kinds), in the order of Walked's lists
LISTS: tuple[tuple[str, tuple[type[exp.Expression], ...]], ...] = (
    ("hints", (exp.Hint,)),
    ("joins", (exp.Join,)),
    ("governed", GOVERNED_NODES),
    ("named", NAMED),
    ("unnamed", UNNAMED),
    ("aliases", (exp.Alias,)),
    ("tables", (exp.Table,)),
    ("withs", (exp.With,)),
    ("reshaped", RESHAPED),
)
# node type -> positions of the lists it belongs to (filled as types are met)
_SLOTS: dict[type, tuple[int, ...]] = {}


@dataclass
class Walked:
    """The nodes of one tree (`root`) each step looks at, each list in breadth-first order."""

    root: exp.Expression
    hints: list[exp.Hint] = field(default_factory=list)
    joins: list[exp.Join] = field(default_factory=list)
    governed: list[exp.Expression] = field(default_factory=list)
    named: list[exp.Expression] = field(default_factory=list)
    unnamed: list[exp.Expression] = field(default_factory=list)
    aliases: list[exp.Alias] = field(default_factory=list)
    tables: list[exp.Table] = field(default_factory=list)
    withs: list[exp.With] = field(default_factory=list)
    reshaped: list[exp.Expression] = field(default_factory=list)
    stale: bool = False  # a step changed the tree in a way these lists do not show

    @property
    def columns(self) -> list[exp.Column]:
        return [n for n in self.named if isinstance(n, exp.Column)]

    def reshaped_by_generation(self) -> bool:
        """Whether generating SQL from the tree may change it (a transform applies): a
        DISTINCT only with ON, an array only inheriting struct field names."""
        for node in self.reshaped:
            if isinstance(node, exp.Distinct):
                if node.args.get("on"):
                    return True
            elif not isinstance(node, exp.Array) or node.args.get("struct_name_inheritance"):
                return True
        return False


def collect(root: exp.Expression) -> Walked:
    """Every list of `root`'s tree, from one breadth-first walk (sqlglot's, compiled)."""
    walked = Walked(root)
    lists = (
        walked.hints,
        walked.joins,
        walked.governed,
        walked.named,
        walked.unnamed,
        walked.aliases,
        walked.tables,
        walked.withs,
        walked.reshaped,
    )
    appends = [found.append for found in lists]
    slots = _SLOTS
    for node in root.walk():
        kind = type(node)
        found = slots.get(kind)
        if found is None:
            found = slots[kind] = tuple(
                i for i, (_, kinds) in enumerate(LISTS) if issubclass(kind, kinds)
            )
        if found:  # most nodes belong to no list
            for i in found:
                appends[i](node)
    return walked


def valid(tree: exp.Expression, walked: Walked | None) -> Walked | None:
    """`walked` if it is a current record of `tree`, else None (the step walks itself)."""
    if walked is None or walked.stale or walked.root is not tree:
        return None
    return walked
