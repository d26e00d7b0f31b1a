"""LDAP group sync (issue 37, item 4) against a real OpenLDAP (tests/identity/slapd.py): what
is read, what is skipped, and that the last good set survives a directory that is down or
answers nothing. The group mapping is the directory store's job; here the shape handed to
`apply` is checked: provider group name -> frozenset of canonical user names, whole."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

from api.ldap_groups import INVALID_USER, NOT_A_USER, LdapError, read_groups, read_password
from api.ldap_sync import LdapSync
from cli import main
from governance.config import Config, LdapConfig
from tests.identity.slapd import GROUPS, LOOKALIKE_UID, PEOPLE, Slapd, user_dn

EXPECTED = {
    "analysts": frozenset({"alice", "bob"}),
    "emea-analysts": frozenset({"carol"}),
    "pii-readers": frozenset({"dana"}),
    "all-analysts": frozenset({"alice", "bob", "carol"}),
    "cycle-a": frozenset({"alice", "dana"}),
    "cycle-b": frozenset({"alice", "dana"}),
    "ops": frozenset({"bob"}),
}


def _secret(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return path


@pytest.fixture
def config(slapd: Slapd, tmp_path: Path) -> Iterator[LdapConfig]:
    slapd.start()  # a test that stopped it may have failed before starting it again
    yield LdapConfig(
        url=slapd.url,
        group_base=GROUPS,
        bind_dn=slapd.bind_dn,
        password_file=_secret(tmp_path / "ldap.pw", slapd.password),
        timeout=3.0,
        interval=0.2,
    )
    slapd.start()


class Recorder:
    """An `apply` that keeps every snapshot it was handed."""

    def __init__(self) -> None:
        self.calls: list[dict[str, frozenset[str]]] = []

    def __call__(self, groups: dict[str, frozenset[str]]) -> None:
        self.calls.append(groups)


def test_groups_and_members_are_read_with_user_names_from_the_member_dns_uid(
    config: LdapConfig,
) -> None:
    assert read_groups(config).groups == EXPECTED


def test_apply_gets_the_whole_snapshot_as_group_name_to_frozenset_of_canonical_users(
    config: LdapConfig,
) -> None:
    applied = Recorder()
    result = LdapSync(config, applied).run_once()
    assert result.ok and result.groups == len(EXPECTED) and result.members == 4
    [snapshot] = applied.calls
    assert type(snapshot) is dict and snapshot == EXPECTED
    assert all(type(m) is frozenset for m in snapshot.values())
    assert all(u == u.lower() and u.isascii() for m in snapshot.values() for u in m)


def test_a_member_removed_in_ldap_is_gone_at_the_next_sync(
    slapd: Slapd, config: LdapConfig
) -> None:
    applied = Recorder()
    sync = LdapSync(config, applied)
    sync.run_once()
    slapd.remove_member("analysts", user_dn("bob"))
    try:
        assert sync.run_once().ok
        assert applied.calls[-1]["analysts"] == {"alice"}
        assert applied.calls[-1]["all-analysts"] == {"alice", "carol"}  # through the nesting
        assert applied.calls[-1]["ops"] == {"bob"}  # bob's other group is untouched
    finally:
        slapd.add_member("analysts", user_dn("bob"))
    assert sync.run_once().ok and applied.calls[-1]["analysts"] == {"alice", "bob"}


def test_a_new_group_and_member_appear_at_the_next_sync(slapd: Slapd, config: LdapConfig) -> None:
    slapd.add_group("auditors", user_dn("carol"))
    slapd.add_member("pii-readers", user_dn("alice"))
    try:
        groups = read_groups(config).groups
        assert groups["auditors"] == {"carol"} and groups["pii-readers"] == {"alice", "dana"}
    finally:
        slapd.remove_member("pii-readers", user_dn("alice"))
        slapd.delete(f"cn=auditors,{GROUPS}")


def test_nested_groups_hold_their_members_and_a_cycle_ends_where_it_began(
    config: LdapConfig,
) -> None:
    groups = read_groups(config).groups
    assert groups["all-analysts"] == groups["analysts"] | groups["emea-analysts"]
    assert groups["cycle-a"] == groups["cycle-b"] == {"alice", "dana"}


def test_member_dns_without_the_user_attribute_or_with_a_look_alike_uid_are_skipped_and_counted(
    config: LdapConfig,
) -> None:
    found = read_groups(config)
    assert found.groups["ops"] == {"bob"}  # not "backup", not "karl"
    assert "karl" not in frozenset().union(*found.groups.values())
    assert found.skipped == {NOT_A_USER: 1, INVALID_USER: 1}
    result = LdapSync(config, Recorder()).run_once()
    assert result.skipped == 2 and dict(result.skipped_by_reason) == found.skipped


def test_a_look_alike_added_to_a_group_never_becomes_the_user_it_resembles(
    slapd: Slapd, config: LdapConfig
) -> None:
    slapd.add_member("pii-readers", f"uid={LOOKALIKE_UID},{PEOPLE}")
    try:
        assert read_groups(config).groups["pii-readers"] == {"dana"}
    finally:
        slapd.remove_member("pii-readers", f"uid={LOOKALIKE_UID},{PEOPLE}")


def test_the_last_good_set_is_kept_while_the_directory_is_down_and_picked_up_when_back(
    slapd: Slapd, config: LdapConfig
) -> None:
    applied = Recorder()
    sync = LdapSync(config, applied)
    assert sync.run_once().ok
    good = sync.last_good
    slapd.stop()
    try:
        errors_before = REGISTRY.get_sample_value("lakegate_ldap_sync_errors_total") or 0
        started = time.monotonic()
        down = sync.run_once()  # never raises
        assert time.monotonic() - started < 3 * config.timeout + 1
        assert down.error is not None and "unreachable" in down.error
        assert "\n" not in down.error
        assert len(applied.calls) == 1  # apply not called: the store keeps the last good set
        assert sync.last_good == good and sync.last is down
        assert REGISTRY.get_sample_value("lakegate_ldap_sync_errors_total") == errors_before + 1
    finally:
        slapd.start()
    back = sync.run_once()
    assert back.ok and len(applied.calls) == 2 and applied.calls[-1] == EXPECTED
    assert REGISTRY.get_sample_value(
        "lakegate_ldap_sync_last_success_timestamp_seconds"
    ) == pytest.approx(back.at)
    assert REGISTRY.get_sample_value("lakegate_ldap_sync_groups") == len(EXPECTED)


def test_an_answer_with_no_groups_keeps_the_last_good_set(config: LdapConfig) -> None:
    applied = Recorder()
    sync = LdapSync(config, applied)
    assert sync.run_once().ok
    sync.config = replace(config, group_filter="(cn=no-such-group)")
    empty = sync.run_once()
    assert empty.error is not None and "no groups" in empty.error
    assert len(applied.calls) == 1 and sync.last_good == EXPECTED


def test_an_anonymous_bind_that_the_acl_shows_nothing_applies_nothing(
    config: LdapConfig,
) -> None:
    applied = Recorder()
    result = LdapSync(replace(config, bind_dn=None, password_file=None), applied).run_once()
    assert result.error is not None and applied.calls == []


def test_a_wrong_password_is_refused_in_one_line_that_never_holds_the_password(
    config: LdapConfig, tmp_path: Path
) -> None:
    wrong = "not-the-Reader-Secret-42"
    bad = replace(config, password_file=_secret(tmp_path / "wrong.pw", wrong))
    applied = Recorder()
    result = LdapSync(bad, applied).run_once()
    assert result.error == (
        f"LDAP bind as {config.bind_dn} refused by {config.url}: invalidCredentials"
    )
    assert applied.calls == []
    with pytest.raises(LdapError) as e:
        read_groups(bad)
    assert wrong not in str(e.value) and "\n" not in str(e.value)


def test_a_password_file_others_can_read_is_refused(config: LdapConfig) -> None:
    assert config.password_file is not None
    config.password_file.chmod(0o640)
    with pytest.raises(LdapError, match="readable by its owner only"):
        read_groups(config)


def test_an_empty_password_file_is_refused_as_it_would_bind_anonymously(
    config: LdapConfig, tmp_path: Path
) -> None:
    with pytest.raises(LdapError, match="is empty"):
        read_password(_secret(tmp_path / "empty.pw", ""))


def test_a_password_is_never_sent_in_clear_to_a_host_that_is_not_loopback(
    config: LdapConfig,
) -> None:
    remote = replace(config, url="ldap://192.0.2.1:389")  # TEST-NET: never contacted
    with pytest.raises(LdapError, match="only over TLS"):
        read_groups(remote)


def test_ldaps_and_starttls_verify_the_server_against_ca_file(
    slapd: Slapd, config: LdapConfig, tmp_path: Path
) -> None:
    ldaps = replace(config, url=slapd.ldaps_url, ca_file=slapd.ca_file)
    starttls = replace(config, ca_file=slapd.ca_file)
    assert read_groups(ldaps).groups == read_groups(starttls).groups == EXPECTED
    from cli.certs import make_certificates

    other_ca = make_certificates(tmp_path / "other", ["127.0.0.1"], 1)["ca"]
    for url in (slapd.ldaps_url, slapd.url):
        result = LdapSync(replace(config, url=url, ca_file=other_ca), Recorder()).run_once()
        assert result.error == (
            f"LDAP server {url}: its TLS certificate does not verify against identity.ldap.ca_file"
        )


def test_a_filter_that_does_not_parse_is_one_line_and_nothing_is_applied(
    config: LdapConfig,
) -> None:
    applied = Recorder()
    result = LdapSync(replace(config, group_filter="(cn=analysts"), applied).run_once()
    assert result.error == "identity.ldap.group_filter is not a valid LDAP filter"
    assert applied.calls == []


def test_a_failing_apply_is_an_error_of_the_sync_not_of_the_server(config: LdapConfig) -> None:
    def broken(_groups: dict[str, frozenset[str]]) -> None:
        raise RuntimeError("database is locked: secret detail")

    sync = LdapSync(config, broken)
    result = sync.run_once()
    assert result.error == "LDAP group sync failed (RuntimeError)"
    assert sync.last_good is None


def test_the_schedule_syncs_every_interval_until_stopped(config: LdapConfig) -> None:
    applied = Recorder()
    sync = LdapSync(config, applied)
    sync.start()
    try:
        deadline = time.monotonic() + 10
        while len(applied.calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sync.stop()
    assert len(applied.calls) >= 3 and all(c == EXPECTED for c in applied.calls)
    after = len(applied.calls)
    time.sleep(3 * config.interval)
    assert len(applied.calls) == after  # stopped means stopped


def _lakegate_yaml(tmp_path: Path, config: LdapConfig) -> Path:
    path = tmp_path / "lakegate.yaml"
    ldap = {
        "url": config.url,
        "group_base": config.group_base,
        "bind_dn": config.bind_dn,
        "password_file": str(config.password_file),
        "timeout": config.timeout,
    }
    path.write_text(yaml.safe_dump({"identity": {"ldap": ldap}}))
    assert Config.load(path).identity.ldap is not None
    return path


def test_cli_ldap_sync_once_prints_counts_not_members_unless_verbose(
    config: LdapConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _lakegate_yaml(tmp_path, config)
    assert main(["--config", str(path), "identity", "ldap-sync", "--once"]) == 0
    out = capsys.readouterr().out
    assert f"{config.url}: 7 groups, 4 users, 12 memberships, 2 skipped" in out
    assert "alice" not in out
    assert main(["--config", str(path), "identity", "ldap-sync", "--once", "--verbose"]) == 0
    assert "analysts: alice, bob" in capsys.readouterr().out


def test_cli_ldap_sync_fails_with_one_line_when_the_directory_is_down(
    slapd: Slapd, config: LdapConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _lakegate_yaml(tmp_path, config)
    slapd.stop()
    try:
        assert main(["--config", str(path), "identity", "ldap-sync", "--once"]) == 1
    finally:
        slapd.start()
    err = capsys.readouterr().err.strip()
    assert err.startswith("lakegate: LDAP server") and "\n" not in err


def test_doctor_fails_on_an_ldap_password_file_others_can_read(
    config: LdapConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    path = _lakegate_yaml(tmp_path, config)
    assert config.password_file is not None
    config.password_file.chmod(0o644)
    capsys.readouterr()
    main(["--config", str(path), "doctor", "-o", "json"])
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["file modes"]["status"] == "FAIL"
    assert str(config.password_file) in checks["file modes"]["detail"]


def test_a_directory_with_more_groups_than_a_page_is_read_whole_in_pages(
    slapd: Slapd, config: LdapConfig
) -> None:
    from api.ldap_groups import PAGE_SIZE

    base = "ou=many,dc=example,dc=org"
    count = PAGE_SIZE + 100  # more than a page, and than slapd's default size limit (500)
    entries = [f"dn: {base}\nchangetype: add\nobjectClass: organizationalUnit\nou: many\n"]
    entries += [
        f"dn: cn=g{i},{base}\nchangetype: add\nobjectClass: groupOfNames\ncn: g{i}\n"
        f"member: {user_dn(('alice', 'bob', 'carol', 'dana')[i % 4])}\n"
        for i in range(count)
    ]
    slapd.modify("\n".join(entries))
    try:
        groups = read_groups(replace(config, group_base=base)).groups
    finally:
        slapd.modify(
            "\n".join(f"dn: cn=g{i},{base}\nchangetype: delete\n" for i in range(count))
            + f"\ndn: {base}\nchangetype: delete\n"
        )
    assert len(groups) == count and groups["g5"] == {"bob"}


def test_two_entries_with_the_same_group_name_are_both_skipped(
    slapd: Slapd, config: LdapConfig
) -> None:
    from api.ldap_groups import DUPLICATE_GROUP

    legacy = f"ou=legacy,{GROUPS}"
    slapd.modify(
        f"dn: {legacy}\nchangetype: add\nobjectClass: organizationalUnit\nou: legacy\n\n"
        f"dn: cn=pii-readers,{legacy}\nchangetype: add\nobjectClass: groupOfNames\n"
        f"cn: pii-readers\nmember: {user_dn('carol')}\n"
    )
    try:
        found = read_groups(config)
    finally:
        slapd.delete(f"cn=pii-readers,{legacy}")
        slapd.delete(legacy)
    assert "pii-readers" not in found.groups  # neither dana's nor carol's
    assert found.skipped[DUPLICATE_GROUP] == 2
    assert found.groups["analysts"] == EXPECTED["analysts"]


def test_a_directory_that_accepts_but_never_answers_is_given_up_within_the_timeout(
    config: LdapConfig,
) -> None:
    import socket

    with socket.socket() as silent:  # a real listener that never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"ldap://127.0.0.1:{silent.getsockname()[1]}"
        applied = Recorder()
        started = time.monotonic()
        result = LdapSync(replace(config, url=url, timeout=1.0), applied).run_once()
        elapsed = time.monotonic() - started
    assert result.error is not None and "unreachable" in result.error
    assert elapsed < 5 and applied.calls == []


def test_cli_ldap_sync_without_an_ldap_section_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "lakegate.yaml"
    path.write_text("identity: {}\n")
    assert main(["--config", str(path), "identity", "ldap-sync", "--once"]) == 2
    assert "has no identity.ldap section" in capsys.readouterr().err


def test_the_harness_fails_with_slapds_log_when_slapd_cannot_start(tmp_path: Path) -> None:
    import socket

    from tests.identity.slapd import SlapdUnavailable

    server = Slapd(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", server.port))
        taken.listen(1)
        with pytest.raises(SlapdUnavailable, match="slapd exited") as e:
            server.start()
    assert "Address already in use" in str(e.value)  # the log's tail says why
    assert not server.running
