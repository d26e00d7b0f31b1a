"""Assigning a tag is its own right (issue 25, item 1), on real Delta tables.

`steward` manages `g.ops.*` but holds no tag right and is himself masked; `pii-steward`
may apply `pii` (and only that), `all-tags` may apply every tag. The tag-driven `hash` mask
applies to every `pii` column for `analyst`, `last4` (higher priority) to `phone` columns,
and a tag-driven filter on `region` keeps `analyst` to EMEA rows.
"""

from __future__ import annotations

import pytest

from governance.errors import AccessDenied

POLICIES = """
groups:
  admins: [admin]
  stewards: [steward, pii-steward, all-tags]
governed_tags:
  pii: {description: Personal data}
  phone: {}
  region: {}
grants:
  - {id: admin-all, principals: [group:admins], privileges: [manage], on: "*.*.*"}
  - {id: stewards-manage, principals: [group:stewards], privileges: [manage], on: g.ops.*}
  - {id: analyst-reads, principals: [analyst], privileges: [select], on: g.ops.*}
  - id: pii-stewards
    principals: [pii-steward]
    privileges: [apply_tag]
    on: g.ops.*
    tags: [pii]
  - {id: tag-admins, principals: [all-tags, admin], privileges: [apply_tag], on: "*.*.*"}
  - id: no-tags-on-audit
    principals: [all-tags]
    effect: deny
    privileges: [apply_tag]
    on: g.ops.locked
row_filters:
  - id: region-by-tag
    on: g.*.*
    match_columns: {tag: region, as: r}
    principals: [analyst]
    where: "r = 'EMEA'"
column_masks:
  - id: pii-hash
    on: g.*.*
    match_columns: {tag: pii}
    mask: hash
    principals: [analyst, steward]
  - id: phone-last4
    on: g.*.*
    match_columns: {tag: phone}
    mask: last4
    priority: 10
    principals: [analyst, steward]
"""

ROWS = "(1, 'a@x.de', '111-22-3333', 'EMEA'), (2, 'b@x.com', '444-55-6666', 'AMER')"


@pytest.fixture(scope="module")
def lg(make_lakegate):
    lg = make_lakegate(
        "tag_rights",
        POLICIES,
        [
            "CREATE CATALOG g",
            "CREATE SCHEMA g.ops",
            "CREATE TABLE g.ops.contacts (id INT, email STRING, ssn STRING, region STRING)",
            f"INSERT INTO g.ops.contacts VALUES {ROWS}",
            "ALTER TABLE g.ops.contacts SET TBLPROPERTIES ('lakegate.tags.email' = 'pii', "
            "'lakegate.tags.ssn' = 'pii', 'lakegate.tags.region' = 'region')",
            "CREATE TABLE g.ops.locked (id INT, email STRING)",
        ],
    )
    return lg


def rows(lg, user: str, sql: str) -> list[tuple]:
    return [tuple(r) for r in lg.session(user).sql(sql).collect()]


def _hash(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()


def _audit_tail(lg, start: int) -> list[dict[str, str]]:
    with open(lg.config.audit / "audit.log", "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("ascii")
    return [
        dict(p.split("=", 1) for p in ln.split(": ", 1)[1].split("\t")) for ln in text.splitlines()
    ]


@pytest.mark.parametrize(
    ("value", "verb", "tag"),
    [
        ("", "remove", "pii"),  # clearing the tag
        ("pii-retired", "remove", "pii"),  # renaming it away
    ],
)
def test_manage_alone_may_not_remove_a_tag(lg, value, verb, tag) -> None:
    sql = f"ALTER TABLE g.ops.contacts SET TBLPROPERTIES ('lakegate.tags.email' = '{value}')"
    with pytest.raises(AccessDenied) as exc:
        lg.session("steward").sql(sql)
    assert str(exc.value) == (
        f"access denied: user steward may not {verb} tag {tag} from column email of "
        f"g.ops.contacts (needs APPLY_TAG on tag {tag}; MANAGE is not enough)"
    )
    assert rows(lg, "analyst", "SELECT email FROM g.ops.contacts WHERE id = 1") == [
        (_hash("a@x.de"),)
    ]


def test_manage_alone_may_not_lift_a_tag_driven_row_filter(lg) -> None:
    sql = "ALTER TABLE g.ops.contacts SET TBLPROPERTIES ('lakegate.tags.region' = '')"
    with pytest.raises(AccessDenied, match="may not remove tag region from column region"):
        lg.session("steward").sql(sql)
    assert rows(lg, "analyst", "SELECT id FROM g.ops.contacts ORDER BY id") == [(1,)]


def test_moving_a_column_under_a_weaker_mask_needs_the_right_to_both_tags(lg) -> None:
    """ssn from pii (hash) to phone (last4): removing pii is allowed to pii-steward, adding
    phone is not, so nothing moves."""
    sql = "ALTER TABLE g.ops.contacts SET TBLPROPERTIES ('lakegate.tags.ssn' = 'phone')"
    with pytest.raises(AccessDenied) as exc:
        lg.session("pii-steward").sql(sql)
    assert str(exc.value) == (
        "access denied: user pii-steward may not add tag phone on column ssn of "
        "g.ops.contacts (needs APPLY_TAG on tag phone; MANAGE is not enough)"
    )
    assert rows(lg, "analyst", "SELECT ssn FROM g.ops.contacts WHERE id = 1") == [
        (_hash("111-22-3333"),)
    ]


def test_a_refused_tag_change_is_audited_as_denied(lg) -> None:
    start = (lg.config.audit / "audit.log").stat().st_size
    sql = "ALTER TABLE g.ops.contacts SET TBLPROPERTIES ('lakegate.tags.email' = '')"
    with pytest.raises(AccessDenied):
        lg.session("steward").sql(sql)
    lines = [ln for ln in _audit_tail(lg, start) if ln["ugi"].startswith("steward ")]
    assert [(ln["cmd"], ln["src"], ln["allowed"]) for ln in lines] == [
        ("alter", "g.ops.contacts", "false")
    ]
    assert "may not remove tag pii from column email" in lines[0]["reason"]


def test_a_deny_of_apply_tag_beats_an_allow(lg) -> None:
    sql = "ALTER TABLE g.ops.locked SET TBLPROPERTIES ('lakegate.tags.email' = 'pii')"
    denial = r"may not add tag pii on column email of g\.ops\.locked"
    with pytest.raises(AccessDenied, match=denial):
        lg.session("all-tags").sql(sql)


def test_only_governed_tags_may_be_assigned(lg) -> None:
    sql = "ALTER TABLE g.ops.locked SET TBLPROPERTIES ('lakegate.tags.email' = 'secret')"
    with pytest.raises(AccessDenied) as exc:
        lg.session("admin").sql(sql)
    assert str(exc.value) == (
        "tag secret is not a governed tag (the policies' governed_tags); "
        "column email of g.ops.locked keeps its tags"
    )


def test_other_properties_still_need_only_manage(lg) -> None:
    lg.session("steward").sql("ALTER TABLE g.ops.contacts SET TBLPROPERTIES ('team' = 'ops')")


def test_a_tag_holder_moves_the_tag_and_the_mask_follows(lg) -> None:
    session = lg.session("admin")
    session.sql("CREATE TABLE g.ops.moved (id INT, email STRING)")
    session.sql("INSERT INTO g.ops.moved VALUES (1, 'a@x.de')")
    set_tag = "ALTER TABLE g.ops.moved SET TBLPROPERTIES ('lakegate.tags.email' = '{}')"
    lg.session("pii-steward").sql(set_tag.format("pii"))
    assert rows(lg, "analyst", "SELECT email FROM g.ops.moved") == [(_hash("a@x.de"),)]
    lg.session("pii-steward").sql(set_tag.format(""))
    assert rows(lg, "analyst", "SELECT email FROM g.ops.moved") == [("a@x.de",)]


def test_a_governed_tag_removed_outside_lakegate_stays_in_force(lg, spark) -> None:
    """A pipeline (storage access, no right) unsets the tag on the Delta table: the
    governed state in the catalog keeps the mask, and the change is reported."""
    from governance.policy.tag_rights import ungoverned_tags

    session = lg.session("admin")
    session.sql("CREATE TABLE g.ops.piped (id INT, email STRING)")
    session.sql("INSERT INTO g.ops.piped VALUES (1, 'a@x.de')")
    lg.session("pii-steward").sql(
        "ALTER TABLE g.ops.piped SET TBLPROPERTIES ('lakegate.tags.email' = 'pii')"
    )
    location = lg.catalog.table("g", "ops", "piped").location
    spark.sql(f"ALTER TABLE delta.`{location}` UNSET TBLPROPERTIES ('lakegate.tags.email')")
    assert rows(lg, "analyst", "SELECT email FROM g.ops.piped") == [(_hash("a@x.de"),)]
    info = lg.catalog.table("g", "ops", "piped")
    assert ungoverned_tags(info) == [("email", "pii", "removed outside Lakegate (kept)")]


def test_doctor_reports_a_tag_changed_outside_lakegate(lg, spark) -> None:
    from cli.doctor import _tags
    from governance.config import Config

    session = lg.session("admin")
    session.sql("CREATE TABLE g.ops.doc (id INT, email STRING)")
    location = lg.catalog.table("g", "ops", "doc").location
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('lakegate.tags.email' = 'pii')")
    check = _tags(Config.load(lg.config.path))
    assert check.status == "warn"
    assert "tag pii on column email of g.ops.doc was added outside Lakegate" in check.detail


def test_a_holder_adopts_a_tag_a_pipeline_set_and_it_then_stays(lg, spark) -> None:
    session = lg.session("admin")
    session.sql("CREATE TABLE g.ops.adopt (id INT, email STRING)")
    session.sql("INSERT INTO g.ops.adopt VALUES (1, 'a@x.de')")
    location = lg.catalog.table("g", "ops", "adopt").location
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('lakegate.tags.email' = 'pii')")
    adopt = "ALTER TABLE g.ops.adopt SET TBLPROPERTIES ('lakegate.tags.email' = 'pii')"
    with pytest.raises(AccessDenied, match="may not add tag pii on column email"):
        lg.session("steward").sql(adopt)
    lg.session("pii-steward").sql(adopt)
    spark.sql(f"ALTER TABLE delta.`{location}` UNSET TBLPROPERTIES ('lakegate.tags.email')")
    assert rows(lg, "analyst", "SELECT email FROM g.ops.adopt") == [(_hash("a@x.de"),)]
