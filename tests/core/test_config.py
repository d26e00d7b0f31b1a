"""lakegate.yaml: relative paths are relative to the file; mistakes are one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from governance.config import Config
from governance.errors import ConfigError


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    cfg_file = tmp_path / "conf" / "lakegate.yaml"
    cfg_file.parent.mkdir()
    cfg_file.write_text("warehouse: wh\ncatalog: cat.db\npolicies: ../pol\naudit: /abs/audit\n"
                        "spark: {master: 'local[1]', conf: {spark.x: 1}}\n")
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


@pytest.mark.parametrize(("text", "message"), [
    ("warehous: x\n", "unknown setting"),
    ("- a\n- b\n", "expected a mapping"),
    ("spark: [1]\n", "'spark' must be a mapping"),
    ("warehouse: [1]\n", "'warehouse' must be a path"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_config_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "lakegate.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        Config.load(f)
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        Config.load(tmp_path / "nope.yaml")
