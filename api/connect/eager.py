"""Relations Spark's Connect planner runs jobs for while it plans them: their inputs are
verified on their own, innermost first, before the plan that holds them is analysed
(relations.PlanGovernor.verify), so no job runs on an unverified plan.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from pyspark.sql.connect.proto import relations_pb2

from governance.errors import Refused

Relation = relations_pb2.Relation
MAX_DEPTH = 256

#: Relation types whose inputs are verified on their own before the plan is analysed
#: (see `_eager`): planning them may run a Spark job whose result replaces the reads.
EAGER = frozenset(
    {
        "show_string",
        "html_string",
        "approx_quantile",
        "crosstab",
        "cov",
        "corr",
        "describe",
        "summary",
        "freq_items",
        "sample_by",
    }
)


def eager_inputs(rel: Relation) -> list[Relation]:
    """The inputs of every relation in `rel` that Spark's planner may run jobs for while it
    plans it (`_eager`), innermost first: an input is listed after every eager input nested
    in it, so verifying them in order runs no job on an unverified plan."""
    out: list[Relation] = []
    _collect_eager(rel, out, 0)
    return out


def message_children(msg: Any) -> list[Any]:
    """The messages `msg` holds, in singular, repeated and map fields (values only)."""
    out: list[Any] = []
    for field, value in msg.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            out.extend(v for v in value.values() if not isinstance(v, str | bytes))
        else:
            out.extend(value if bool(field.is_repeated) else [value])
    return out


def _collect_eager(msg: Any, out: list[Relation], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Refused(f"plan nests more than {MAX_DEPTH} levels; refused")
    for child in message_children(msg):
        _collect_eager(child, out, depth + 1)
    if isinstance(msg, Relation) and _eager(msg):
        inner = getattr(msg, msg.WhichOneof("rel_type"))
        out.extend(v for _, v in inner.ListFields() if isinstance(v, Relation))


def _eager(rel: Relation) -> bool:
    """Spark 3.5's SparkConnectPlanner runs jobs while planning show_string, html_string,
    approx_quantile, crosstab and a pivot without values (it collects the distinct values),
    and caches the input of a deterministic-order sample that has no orderable column; the
    other stat relations (`EAGER`) are planned lazily today but are DataFrame stat functions
    a Spark version may collect eagerly, so they are treated the same way."""
    kind = rel.WhichOneof("rel_type")
    if kind in EAGER:
        return True
    if kind == "aggregate":
        agg = rel.aggregate
        return agg.group_type == relations_pb2.Aggregate.GROUP_TYPE_PIVOT and not len(
            agg.pivot.values
        )
    return kind == "sample" and rel.sample.deterministic_order
