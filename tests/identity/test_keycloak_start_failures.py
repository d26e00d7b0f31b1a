"""When Keycloak cannot start, the identity tests fail with the reason (issue 37: never a
skip): a missing distribution, no Java 21+, or a JVM that dies while starting (here: too
little memory), and nothing is left running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from identity.keycloak import Keycloak, KeycloakUnavailable, find_java, java_version


def fake_java_home(root: Path, name: str, version: str) -> Path:
    """A folder shaped like a JDK (bin/java and a `release` file) for the selection rules."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (home / "release").write_text(f'IMPLEMENTOR="test"\nJAVA_VERSION="{version}"\n')
    return home


def test_a_missing_distribution_fails_with_the_make_test_hint(tmp_path: Path) -> None:
    with pytest.raises(KeycloakUnavailable, match=r"no Keycloak distribution .* run `make test`"):
        Keycloak(tmp_path / "work", dist=tmp_path / "absent").start()


def test_java_older_than_21_is_refused_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm = tmp_path / "jvm"
    old = fake_java_home(jvm, "jdk-17", "17.0.15")
    fake_java_home(jvm, "jdk-8", "1.8.0_402")
    monkeypatch.setenv("JAVA_HOME", str(old))
    assert java_version(old) == 17
    assert java_version(jvm / "jdk-8") == 8
    with pytest.raises(KeycloakUnavailable, match=r"needs Java 21\+: JAVA_HOME=.*jdk-17"):
        find_java(jvm)


def test_the_newest_java_21_plus_is_chosen_unless_java_home_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm = tmp_path / "jvm"
    fake_java_home(jvm, "jdk-17", "17.0.15")
    j21 = fake_java_home(jvm, "jdk-21", "21.0.4")
    j25 = fake_java_home(jvm, "jdk-25", "25.0.3")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert find_java(jvm) == j25
    monkeypatch.setenv("JAVA_HOME", str(j21))
    assert find_java(jvm) == j21


def test_keycloak_dying_while_starting_fails_with_its_log_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    kc = Keycloak(tmp_path, heap="-Xms8m -Xmx16m")
    with pytest.raises(KeycloakUnavailable) as failed:
        kc.start(timeout=240)
    assert "Keycloak exited with status" in str(failed.value)
    assert "OutOfMemoryError" in str(failed.value)  # the log's tail says why
    with pytest.raises(ProcessLookupError):
        os.killpg(kc.pid, 0)
