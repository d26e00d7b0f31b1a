"""lakegate.yaml: relative paths are relative to the file; mistakes are one clear line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from governance.config import ApiConfig, Config
from governance.errors import ConfigError


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    cfg_file = tmp_path / "conf" / "lakegate.yaml"
    cfg_file.parent.mkdir()
    cfg_file.write_text(
        "warehouse: wh\ncatalog: cat.db\npolicies: ../pol\naudit: /abs/audit\n"
        "spark: {master: 'local[1]', conf: {spark.x: 1}}\n"
    )
    cfg = Config.load(cfg_file)
    assert cfg.warehouse == tmp_path / "conf" / "wh"
    assert cfg.catalog == str(tmp_path / "conf" / "cat.db")
    assert cfg.policies == tmp_path / "pol"
    assert cfg.audit == Path("/abs/audit")
    assert cfg.spark_master == "local[1]"
    assert cfg.spark_conf == {"spark.x": "1"}


def test_catalog_url_kept_as_is(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text("catalog: sqlite:///x.db\n")
    assert Config.load(f).catalog == "sqlite:///x.db"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("warehous: x\n", "unknown setting"),
        ("- a\n- b\n", "expected a mapping"),
        ("spark: [1]\n", "'spark' must be a mapping"),
        ("warehouse: [1]\n", "'warehouse' must be a path"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_config_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        Config.load(f)
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        Config.load(tmp_path / "nope.yaml")


# A wrong kind of value is refused in one line naming the file and the key; before pydantic
# checked the file some of these crashed with a bare ValueError and others were read as
# something else (`str([...])`, `int(80.5)`).
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("audit_max_bytes: lots\n", "'audit_max_bytes': Input should be a valid integer"),
        ("policies_settle: soon\n", "'policies_settle': Input should be a valid number"),
        ("verify_plans: maybe\n", "'verify_plans': Input should be a valid boolean"),
        ("default_catalog: [main]\n", "'default_catalog': Input should be a valid string"),
        ("spark: {master: [1]}\n", "'spark.master': Input should be a valid string"),
        ("spark: {conf: [1]}\n", "'spark.conf' must be a mapping"),
        ("api: {port: 80.5}\n", "'api.port': api.row_limit, api.timeout and api.port must be"),
        ("api: {timeout: -1}\n", "'api.timeout' must be positive"),
        ("api: {products: 5}\n", "'api.products' must be a path"),
        ("api: {statement_threads: 0}\n", "'api.statement_threads' must be positive"),
        (
            "api: {statement_threads: many}\n",
            "'api.statement_threads' must be a whole number of threads from 1 to 1024",
        ),
        ("api: {statement_threads: 5000}\n", "'api.statement_threads' must be a whole number"),
        ("api: {keep_alive_seconds: 0}\n", "'api.keep_alive_seconds' must be positive"),
        (
            "api: {keep_alive_seconds: 86400}\n",
            "'api.keep_alive_seconds' must be a whole number of seconds from 1 to 3600",
        ),
        (
            "api: {tokens: [{user: a, sha256: '" + "ab" * 32 + "', role: admin}]}\n",
            re.escape("'api.tokens[0]' must be {user: NAME, sha256: HEX}"),
        ),
        ("warehous: x\nspork: 1\n", re.escape("unknown setting(s) spork, warehous; known: api,")),
    ],
)
def test_a_wrong_value_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        Config.load(f)
    assert str(e.value).startswith(f"{f}: ") and "\n" not in str(e.value)
    assert re.search(message, str(e.value)), str(e.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("false", False), ("'false'", False), ("'no'", False), ("off", False), ("'yes'", True)],
)
def test_a_boolean_setting_written_as_text_means_what_it_says(
    tmp_path: Path, text: str, value: bool
) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(f"verify_plans: {text}\n")
    assert Config.load(f).verify_plans is value


def test_empty_sections_and_omitted_settings_take_the_defaults(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text("spark:\napi:\npolicies_ref: ''\n")
    cfg = Config.load(f)
    assert (cfg.spark_master, cfg.spark_conf, cfg.api, cfg.policies_ref) == (
        "local[*]",
        {},
        ApiConfig(),
        None,
    )
    assert (
        cfg.warehouse,
        cfg.catalog,
        cfg.default_catalog,
        cfg.audit_max_bytes,
        cfg.policies_settle,
    ) == (tmp_path / "warehouse", str(tmp_path / "catalog.db"), "main", 64 * 1024 * 1024, 1.0)
    f.write_text("api: {tokens: , secret_env: LAKEGATE_TEST_UNSET_VARIABLE}\n")
    assert Config.load(f).api == ApiConfig()


def test_the_rest_statement_threads_are_a_setting(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text("api: {statement_threads: 48}\n")
    assert Config.load(f).api.statement_threads == 48
    assert ApiConfig().statement_threads == 32


def test_the_rest_servers_keep_alive_is_a_setting(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text("api: {keep_alive_seconds: 120}\n")
    assert Config.load(f).api.keep_alive_seconds == 120
    assert ApiConfig().keep_alive_seconds == 75


def test_an_abbreviated_commit_of_digits_is_a_policies_ref(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text("policies_ref: 1234567\n")  # YAML reads an int; the ref is its digits
    assert Config.load(f).policies_ref == "1234567"


@pytest.mark.parametrize(("text", "value"), [("", True), ("pinned_sources: false\n", False)])
def test_pinned_sources_are_on_unless_the_config_turns_them_off(
    tmp_path: Path, text: str, value: bool
) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    assert Config.load(f).pinned_sources is value


@pytest.mark.parametrize(
    ("text", "value"),
    [("", 10_000), ("mapping_inline_max_keys: 0\n", 0), ("mapping_inline_max_keys: 50\n", 50)],
)
def test_mapping_lookups_inline_up_to_ten_thousand_keys_unless_configured(
    tmp_path: Path, text: str, value: int
) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    assert Config.load(f).mapping_inline_max_keys == value


def test_a_negative_inline_threshold_is_refused_in_one_line(tmp_path: Path) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text("mapping_inline_max_keys: -1\n")
    with pytest.raises(ConfigError) as e:
        Config.load(f)
    assert str(e.value) == f"{f}: 'mapping_inline_max_keys' must be a whole number, 0 or more"
