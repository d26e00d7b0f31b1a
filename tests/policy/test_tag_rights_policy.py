"""Governed tags without Spark (issue 25, items 1 and 5): the apply_tag grant and
`governed_tags` in the YAML and the JSON Schema, `policy validate` on them and on tags
changed outside Lakegate (real Delta tables written with delta-rs), `policy diff` naming
who gains the right to tag, and the column lineage tags follow."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from deltalake import write_deltalake
from sqlglot import exp, parse_one

from catalog.model import ColumnInfo, TableInfo
from governance.errors import Refused
from governance.planning.lineage import (
    Propagation,
    carried,
    plan_carry,
    refuse_unorderable,
    tag_masks,
)
from governance.policy.analysis import diff_policies
from governance.policy.enforcer import AmbiguousMask, PolicyEnforcer
from governance.policy.loader import load_policy_text
from governance.policy.tag_rights import may_apply_tag, tag_state_problems
from governance.policy.tag_state import GOVERNED_PROPERTY
from governance.policy.validate import validate_policy_text
from tests.policy.test_tag_policy_rules import Yaml12Loader

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "policies" / "schema.json").read_text())

BASE = """\
groups:
  stewards: [sam]
grants:
  - {id: read, principals: [sam, ann], privileges: [select], on: main.s.*}
"""


def found(case: str, severity: str = "error") -> list[tuple[str, str]]:
    problems = validate_policy_text({"p/base.yaml": BASE, "p/case.yaml": textwrap.dedent(case)})
    return sorted((p.code, p.message) for p in problems if p.severity == severity)


def table(name: str = "t", location: str = "", properties: dict | None = None) -> TableInfo:
    columns = tuple(ColumnInfo(c, "string", position=i) for i, c in enumerate(["id", "email"]))
    return TableInfo("main", "s", name, location, columns, properties=properties or {})


def test_apply_tag_is_granted_per_tag_and_manage_does_not_imply_it() -> None:
    ps = load_policy_text(
        {
            "p.yaml": BASE
            + "  - {id: m, principals: [ann], privileges: [manage], on: main.s.*}\n"
            + "  - {id: t, principals: [group:stewards], privileges: [apply_tag], on: main.s.*,"
            + " tags: [pii]}\n"
        }
    )
    enforcer = PolicyEnforcer(ps)
    sam, ann = enforcer.identity("sam"), enforcer.identity("ann")
    assert may_apply_tag(ps, sam.keys, table(), "pii") == (True, ("t",))
    assert may_apply_tag(ps, sam.keys, table(), "region") == (False, ())
    assert may_apply_tag(ps, ann.keys, table(), "pii") == (False, ())


def test_tags_key_without_apply_tag_is_an_error() -> None:
    case = (
        "grants:\n  - {id: x, principals: [sam], privileges: [select], on: main.s.*, tags: [pii]}\n"
    )
    assert found(case) == [
        ("tags-without-apply-tag", "'tags' in this grant only scopes the apply_tag privilege")
    ]


def test_apply_tag_with_columns_is_an_error() -> None:
    case = (
        "grants:\n  - {id: x, principals: [sam], privileges: [apply_tag], on: main.s.*, "
        "columns: [email]}\n"
    )
    assert [code for code, _ in found(case)] == ["apply-tag-columns"]


def test_validate_knows_governed_tags() -> None:
    case = """\
    governed_tags: {pii: {description: Personal data}}
    tags:
      main.s.t.email: [pii, secret]
    grants:
      - {id: x, principals: [group:stewards], privileges: [apply_tag], on: main.s.*, tags: [region]}
    """
    assert found(case) == [
        (
            "tag-not-governed",
            "grant 'x' gives apply_tag on tag 'region', which governed_tags does not declare",
        )
    ]
    assert found(case, "warning") == [
        (
            "tag-not-governed",
            "the tags of 'main.s.t.email' uses tag 'secret', which governed_tags does not declare",
        )
    ]


def test_schema_accepts_governed_tags_and_apply_tag_grants() -> None:
    import jsonschema

    doc = yaml.load(
        "governed_tags: {pii: {description: x}, region: null}\n"
        "grants:\n  - {principals: [sam], privileges: [apply_tag], on: main.s.*, tags: [pii]}\n",
        Loader=Yaml12Loader,
    )
    jsonschema.validate(doc, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"governed_tags": {"pii": {"owner": "x"}}}, SCHEMA)


def test_diff_shows_who_gains_the_right_to_tag() -> None:
    old = load_policy_text({"p.yaml": BASE})
    new = load_policy_text(
        {
            "p.yaml": BASE
            + "  - {id: t, principals: [group:stewards], privileges: [apply_tag], on: main.s.t,"
            + " tags: [pii]}\n"
        }
    )
    d = diff_policies(old, new, [table()])
    assert [(c.user, c.table, c.kind, c.detail, c.flagged) for c in d.changes] == [
        ("sam", "main.s.t", "tag_right", "gains APPLY_TAG on tag pii", True)
    ]
    assert "| sam | main.s.t | gains APPLY_TAG on tag pii | :warning: |" in d.to_markdown()


def test_validate_reports_tags_changed_outside_lakegate(tmp_path: Path) -> None:
    import pyarrow as pa

    path = str(tmp_path / "t")
    data = pa.table({"id": pa.array([1], pa.int32()), "email": pa.array(["a@x.de"])})
    write_deltalake(path, data)
    _set_property(Path(path), "lakegate.tags.id", "region")  # as a pipeline's ALTER would
    state = json.dumps({"email": ["pii"]})
    info = table(location=path, properties={GOVERNED_PROPERTY: state})
    got = sorted((p.code, p.severity, p.message) for p in tag_state_problems([info]))
    assert got == [
        (
            "tag-outside-lakegate",
            "warning",
            "tag pii on column email of main.s.t was removed outside Lakegate (kept)",
        ),
        (
            "tag-outside-lakegate",
            "warning",
            "tag region on column id of main.s.t was added outside Lakegate",
        ),
    ]


def _set_property(root: Path, key: str, value: str) -> None:
    """A second commit holding a metaData action with `key` set, written as Delta writes it
    (delta-rs refuses unknown keys at write time; Spark's ALTER TABLE does not)."""
    first = (root / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    meta = next(json.loads(ln) for ln in first if '"metaData"' in ln)
    meta["metaData"]["configuration"] = {**meta["metaData"].get("configuration", {}), key: value}
    commit = {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}
    text = json.dumps(commit) + "\n" + json.dumps(meta) + "\n"
    (root / "_delta_log" / f"{1:020d}.json").write_text(text)


LINEAGE_POLICIES = """\
tags:
  main.s.t.email: [pii]
column_masks:
  - {id: h, on: main.*.*, match_columns: {tag: pii}, mask: hash}
"""
US = "\x1f"


def sources_of(q: exp.Expression, shown: tuple[str, ...] = ("id", "email")) -> list:
    return [(n, table(location="/w/t"), shown) for n in q.find_all(exp.Table) if n.name == "t"]


def carry_of(sql: str, shown: tuple[str, ...] = ("id", "email")):
    ps = load_policy_text({"p.yaml": LINEAGE_POLICIES})
    q = parse_one(sql, read="spark")
    carry = plan_carry(ps, q, sources_of(q, shown), "main.s.copy")
    assert carry is not None
    return carry


def answer(*outputs: tuple[str, list[str]]) -> str:
    """PlanWalker.lineage's answer: per output, its name and the columns of t it reads."""
    return "".join(
        name + "".join(f"\t/w/t{US}{c}" for c in columns) + "\n" for name, columns in outputs
    )


@pytest.mark.parametrize(
    ("sql", "spark", "expected"),
    [
        ("SELECT id, email FROM t", [("id", ["id"]), ("email", ["email"])], [(1, "email")]),
        # Spark's order, not the text's: the tag lands on the column that holds the data
        ("SELECT * FROM t", [("email", ["email"]), ("id", ["id"])], [(0, "email")]),
        ("SELECT upper(email) AS e FROM t", [("e", ["email"])], [(0, "e")]),
        # the tag's own mask on every path drops it, matched by the output's lineage
        (
            "SELECT email, sha2(cast(email AS string), 256) AS d FROM t",
            [("d", ["email"]), ("email", ["email"])],
            [(1, "email")],
        ),
        ("SELECT id FROM t WHERE email LIKE '%@x.de'", [("id", ["id"])], []),
        (  # each branch on its own: the first branch's mask does not drop the second's tag
            "SELECT sha2(cast(email AS string), 256) AS d FROM t UNION ALL SELECT email FROM t",
            [("d", ["email"])],
            [(0, "d")],
        ),
        (  # sqlglot and Spark disagree on the output's sources: the tag stays
            "SELECT sha2(cast(email AS string), 256) AS d FROM t",
            [("d", ["email", "id"])],
            [(0, "d")],
        ),
        ("SELECT sha2(cast(email AS string), 256) AS d FROM t", [("d", ["email"])], []),
    ],
)
def test_tags_are_matched_to_sparks_output_by_lineage_not_position(sql, spark, expected) -> None:
    got = carried(carry_of(sql), answer(*spark))
    assert [(p.position, p.column) for p in got] == expected
    assert all(p.tags == ("pii",) and p.source_column == "email" for p in got)


def test_a_mask_drop_needs_a_name_of_the_output_to_agree() -> None:
    """Same sources, another name: the drop of `d` is not the output `x`'s; an INSERT's
    output has the target's name, and the name it had below the renaming counts."""
    carry = carry_of("SELECT sha2(cast(email AS string), 256) AS d FROM t")
    assert [p.column for p in carried(carry, answer(("x", ["email"])))] == ["x"]
    assert carried(carry, answer((f"x{US}d", ["email"]))) == []


def test_an_untraceable_plan_gives_every_column_every_tag() -> None:
    got = carried(carry_of("SELECT id FROM t"), "!LateralJoin\na\nb\n")
    assert [(p.column, p.source_column, p.tags) for p in got] == [
        ("a", "email", ("pii",)),
        ("b", "email", ("pii",)),
    ]


def test_an_unreadable_ctas_plan_is_refused() -> None:
    with pytest.raises(Refused, match="cannot be traced in Spark's plan"):
        carried(carry_of("SELECT id FROM t"), None)


def test_a_column_of_a_table_not_read_carries_nothing() -> None:
    """A leaf at a location no governed read has (a policy's mapping table)."""
    got = carried(carry_of("SELECT email FROM t"), f"email\t/w/other{US}email\n")
    assert got == []


STRENGTH_POLICIES = """\
tags:
  main.s.t.id: [pii, pci]
grants:
  - {id: r, principals: [ann], privileges: [select], on: main.s.*}
column_masks:
  - {id: pii-hash, on: main.*.*, tags: [pii], mask: hash, principals: [ann]}
  - {id: pci-last4, on: main.*.*, tags: [pci], mask: last4, priority: 10, principals: [ann]}
  - {id: loc-domain, on: main.*.*, tags: [loc], mask: email_domain, priority: 5,
     principals: [ann]}
  - {id: gone-null, on: main.*.*, tags: [gone], mask: "null", priority: -1, principals: [ann]}
"""


@pytest.mark.parametrize(
    ("governed", "expected"),
    [
        ({"email": ["pii", "pci"]}, "pii-hash"),  # a copy's tags: the strongest mask
        ({"email": ["pci", "gone"]}, "gone-null"),  # nothing shown beats priority
        ({"email": ["pci", "loc"]}, None),  # two parts of the value: cannot be ordered
        ({"email": ["pci"]}, "pci-last4"),
    ],
)
def test_masks_reaching_a_column_through_different_tags_give_the_strongest(
    governed, expected
) -> None:
    enforcer = PolicyEnforcer(load_policy_text({"p.yaml": STRENGTH_POLICIES}))
    t = table(properties={GOVERNED_PROPERTY: json.dumps(governed)})
    ident = enforcer.identity("ann")
    if expected is None:
        with pytest.raises(AmbiguousMask, match="through different tags"):
            enforcer.table_access(ident, t)
        return
    access = enforcer.table_access(ident, t)
    assert access.masks["email"].mask.id == expected
    # the policy's own tags on `id` keep v1's rule: the highest priority wins
    assert access.masks["id"].mask.id == "pci-last4"


@pytest.mark.parametrize(
    ("tags", "refused"),
    [
        (("pii", "pci"), False),  # a digest hides more than a part
        (("pci", "gone"), False),  # nothing shown beats everything
        (("pci", "loc"), True),  # two parts of the value
    ],
)
def test_a_write_tagging_one_column_with_unorderable_masks_is_refused(tags, refused) -> None:
    ps = load_policy_text({"p.yaml": STRENGTH_POLICIES})
    props = [Propagation(0, "c", "main.s.t", "id", tags)]
    masks = tag_masks(ps, "main.s.copy")
    if refused:
        with pytest.raises(Refused, match="cannot be ordered by strength"):
            refuse_unorderable(masks, "main.s.copy", props, {})
    else:
        refuse_unorderable(masks, "main.s.copy", props, {})
    # the tag the column already has counts too
    split = [Propagation(0, "c", "main.s.t", "id", tags[:1])]
    if refused:
        with pytest.raises(Refused):
            refuse_unorderable(masks, "main.s.copy", split, {"c": frozenset(tags[1:])})
