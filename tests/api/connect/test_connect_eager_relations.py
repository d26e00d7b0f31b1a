"""Nothing runs before it is verified (issue 24, item 4): relations Spark's Connect planner
runs jobs for while planning them (show, toHTML, approxQuantile, crosstab, a pivot without
values) hand back a LocalRelation, which the verifier would see instead of the reads; their
inputs are verified first, so a hostile plan wrapped in one is refused before any job runs.
The stat relations Spark 3.5 plans lazily (cov, corr, describe, summary, freqItems,
sampleBy) are held to the same rule."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from connect_testkit import jobs_in_group
from pyspark.sql.connect.proto import relations_pb2

from api.connect.relations import PlanGovernor
from governance.errors import Refused

Relation = relations_pb2.Relation


def _show(r: Relation, inner: Relation) -> None:
    r.show_string.input.CopyFrom(inner)
    r.show_string.num_rows = 5


def _html(r: Relation, inner: Relation) -> None:
    r.html_string.input.CopyFrom(inner)
    r.html_string.num_rows = 5


def _quantile(r: Relation, inner: Relation) -> None:
    r.approx_quantile.input.CopyFrom(inner)
    r.approx_quantile.cols.append("amount")
    r.approx_quantile.probabilities.append(0.5)
    r.approx_quantile.relative_error = 0.1


def _stat2(kind: str) -> Callable[[Relation, Relation], None]:
    def wrap(r: Relation, inner: Relation) -> None:
        m = getattr(r, kind)
        m.input.CopyFrom(inner)
        m.col1, m.col2 = ("region", "id") if kind == "crosstab" else ("amount", "id")

    return wrap


def _input_only(kind: str) -> Callable[[Relation, Relation], None]:
    def wrap(r: Relation, inner: Relation) -> None:
        getattr(r, kind).input.CopyFrom(inner)

    return wrap


def _freq(r: Relation, inner: Relation) -> None:
    r.freq_items.input.CopyFrom(inner)
    r.freq_items.cols.append("region")


def _sample_by(r: Relation, inner: Relation) -> None:
    r.sample_by.input.CopyFrom(inner)
    r.sample_by.col.unresolved_attribute.unparsed_identifier = "region"
    f = r.sample_by.fractions.add()
    f.stratum.string = "EMEA"
    f.fraction = 0.5


def _pivot(r: Relation, inner: Relation) -> None:
    a = r.aggregate
    a.input.CopyFrom(inner)
    a.group_type = relations_pb2.Aggregate.GROUP_TYPE_PIVOT
    a.grouping_expressions.add().unresolved_attribute.unparsed_identifier = "id"
    a.pivot.col.unresolved_attribute.unparsed_identifier = "region"  # no values: Spark collects
    fn = a.aggregate_expressions.add().unresolved_function
    fn.function_name = "sum"
    fn.arguments.add().unresolved_attribute.unparsed_identifier = "amount"


WRAPPERS: dict[str, Callable[[Relation, Relation], None]] = {
    "show_string": _show,
    "html_string": _html,
    "approx_quantile": _quantile,
    "crosstab": _stat2("crosstab"),
    "pivot_without_values": _pivot,
    "cov": _stat2("cov"),
    "corr": _stat2("corr"),
    "describe": _input_only("describe"),
    "summary": _input_only("summary"),
    "freq_items": _freq,
    "sample_by": _sample_by,
}


def _wrapped(kind: str, inner: Relation) -> Relation:
    out = Relation()
    WRAPPERS[kind](out, inner)
    return out


@pytest.fixture
def smuggled(connect_lakegate) -> tuple[PlanGovernor, Relation]:
    """A governor and a composed plan that reads the orders table raw next to its governed
    view (as a parser differential might smuggle in): the verifier must refuse it."""
    gov = PlanGovernor(connect_lakegate.session("carol"))
    governed = gov.relation(
        Relation(
            read=relations_pb2.Read(
                named_table=relations_pb2.Read.NamedTable(unparsed_identifier="main.sales.orders")
            )
        )
    )
    location = connect_lakegate.catalog.table("main", "sales", "orders").location
    raw = Relation(
        sql=relations_pb2.SQL(query="SELECT * FROM delta.`" + location.replace("`", "``") + "`")
    )
    plan = Relation()
    plan.set_op.left_input.CopyFrom(governed)
    plan.set_op.right_input.CopyFrom(raw)
    plan.set_op.set_op_type = relations_pb2.SetOperation.SET_OP_TYPE_UNION
    return gov, plan


@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_hostile_plan_wrapped_in_a_job_running_relation_is_refused_before_any_job(
    gateway, spark, smuggled, kind
) -> None:
    gov, plan = smuggled
    group = f"lakegate-test-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "eager relation test")
    try:
        with pytest.raises(Refused, match="plan verification: a table location is read outside"):
            gov.verify(_wrapped(kind, plan), gateway.backend, str(uuid.uuid4()))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert jobs_in_group(spark, group) == []  # the raw rows were never computed


def test_hostile_plan_nested_in_two_job_running_relations_is_refused_before_any_job(
    gateway, spark, smuggled
) -> None:
    """df.describe().show(): the innermost input is verified first."""
    from api.connect.relations import eager_inputs

    gov, plan = smuggled
    nested = _wrapped("show_string", _wrapped("crosstab", plan))
    assert [r.WhichOneof("rel_type") for r in eager_inputs(nested)] == ["set_op", "crosstab"]
    group = f"lakegate-test-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "eager relation test")
    try:
        with pytest.raises(Refused, match="plan verification"):
            gov.verify(nested, gateway.backend, str(uuid.uuid4()))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert jobs_in_group(spark, group) == []


def test_a_write_source_with_a_hostile_eager_input_is_refused_before_its_columns_are_read(
    gateway, spark, smuggled
) -> None:
    """A DataFrame write reads its source's columns before the write is verified: the
    source's job-running relations are verified first (verify(whole=False))."""
    gov, plan = smuggled
    group = f"lakegate-test-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "eager relation test")
    try:
        with pytest.raises(Refused, match="plan verification"):
            gov.verify(
                _wrapped("approx_quantile", plan),
                gateway.backend,
                str(uuid.uuid4()),
                whole=False,
            )
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert jobs_in_group(spark, group) == []


def test_job_running_relations_of_governed_reads_answer_through_the_gateway(
    remote, embedded, capsys
) -> None:
    """The same relations over a governed read work and give the governed answers."""
    s = remote("carol")
    df = s.table("main.sales.orders")
    want = embedded("carol", "SELECT region, count(*) FROM main.sales.orders GROUP BY region")
    crosstab = df.crosstab("region", "region").collect()
    assert sorted((r[0], sum(r[1:])) for r in crosstab) == sorted(want)
    pivot = df.groupBy().pivot("region").count().collect()[0].asDict()
    assert sorted(pivot.items()) == sorted(want)
    low, high = df.approxQuantile("amount", [0.0, 1.0], 0.0)
    (lo_hi,) = embedded("carol", "SELECT min(amount), max(amount) FROM main.sales.orders")
    assert (low, high) == (float(lo_hi[0]), float(lo_hi[1]))
    (corr,) = embedded("carol", "SELECT corr(amount, id) FROM main.sales.orders")
    assert df.stat.corr("amount", "id") == pytest.approx(corr[0])
    (cov,) = embedded("carol", "SELECT covar_samp(amount, id) FROM main.sales.orders")
    assert df.stat.cov("amount", "id") == pytest.approx(cov[0])
    counts = {r["summary"]: r["amount"] for r in df.describe("amount").collect()}
    assert int(counts["count"]) == sum(n for _, n in want)
    assert df.summary("count").collect()[0]["amount"] == counts["count"]
    assert df.freqItems(["region"]).collect()[0][0]
    assert df.sampleBy("region", {"EMEA": 1.0}, seed=1).count() == dict(want).get("EMEA", 0)
    df.select("region").distinct().orderBy("region").show()
    shown = capsys.readouterr().out
    body = [ln.strip("|").strip() for ln in shown.splitlines() if ln.startswith("|")][1:]
    assert body == sorted(r for r, _ in want)
