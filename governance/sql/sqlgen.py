"""A statement's Spark SQL from its tree, without Spark's SELECT transforms when its one walk
shows they have nothing to rewrite (issue 31).

sqlglot's Spark generator runs four transforms on every SELECT before writing it: QUALIFY,
DISTINCT ON, UNNEST and ANY become what Spark parses. Each looks for its own node kind
(`any_to_exists` walks the SELECT's whole subtree, so nested queries are walked again per
level): a quarter of generating a TPC-DS query. A tree holding none of those kinds comes
out of them unchanged, so it is written by the same generator with SELECT dispatched
straight to `select_sql`, which is what the transforms end in: the same text, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from governance.sql.spark_dialect import SPARK
from governance.sql.walk import Walked


def _plain_dispatch() -> dict[type[exp.Expression], Callable[..., str]] | None:
    """The Spark generator's node -> writer table with SELECT written directly; None when
    this sqlglot keeps no such table (every tree then takes the transforms)."""
    generator = SPARK.generator()
    table = getattr(generator, "_dispatch", None)
    writer = getattr(SPARK.generator_class, "select_sql", None)
    if not isinstance(table, dict) or exp.Select not in table or writer is None:
        return None
    plain = {**table, exp.Select: writer}
    try:
        generator._dispatch = plain  # settable on this sqlglot's compiled generator
    except (AttributeError, TypeError):
        return None
    return plain


#: The table with SELECT written directly (None: this sqlglot has none to replace)
PLAIN_DISPATCH = _plain_dispatch()


def spark_sql(tree: exp.Expression, walked: Walked | None) -> str:
    """`tree.sql(SPARK, copy=False)`. `walked`: the tree's one walk if current (else None);
    a tree it shows free of what generation may reshape skips the SELECT transforms."""
    generator = SPARK.generator()
    if walked is not None and PLAIN_DISPATCH is not None and not walked.reshaped_by_generation():
        generator._dispatch = PLAIN_DISPATCH
    return generator.generate(tree, copy=False)
