"""`lakegate demo` never destroys what the user did not give it (issue: demo --dir precious)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli import main
from governance.tools.demo import MARKER, DemoRefused, prepare_dir, write_config


def _precious(tmp_path: Path) -> Path:
    d = tmp_path / "precious"
    d.mkdir()
    (d / "thesis.txt").write_text("years of work")
    return d


def test_demo_refuses_a_non_empty_folder_that_is_not_a_demo(tmp_path: Path, capsys) -> None:
    d = _precious(tmp_path)
    assert main(["demo", "--dir", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not empty" in err and "--force" in err
    assert (d / "thesis.txt").read_text() == "years of work"
    assert sorted(p.name for p in d.iterdir()) == ["thesis.txt"]


def test_demo_force_builds_beside_contents_without_touching_them(tmp_path: Path) -> None:
    d = _precious(tmp_path)
    prepare_dir(d, force=True)
    assert (d / "thesis.txt").read_text() == "years of work"
    assert (d / MARKER).is_file()


def test_demo_force_never_replaces_a_name_the_demo_did_not_make(tmp_path: Path) -> None:
    d = _precious(tmp_path)
    (d / "audit").mkdir()
    (d / "audit" / "keep.py").write_text("x = 1")
    with pytest.raises(DemoRefused, match="audit already exist"):
        prepare_dir(d, force=True)
    assert (d / "audit" / "keep.py").read_text() == "x = 1"
    assert not (d / MARKER).exists()


def test_demo_refuses_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    d = _precious(tmp_path)
    monkeypatch.chdir(d)
    assert main(["demo", "--dir", "."]) == 2
    assert (d / "thesis.txt").is_file()


def test_demo_rebuild_replaces_only_its_own_files(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    prepare_dir(d)
    write_config(d)
    (d / "audit").mkdir()
    (d / "audit" / "audit.log").write_text("old")
    (d / "notes.md").write_text("mine")
    prepare_dir(d)
    assert not (d / "audit").exists()
    assert (d / "notes.md").read_text() == "mine"


def test_demo_rebuild_keeps_user_edits_to_lakegate_yaml(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    prepare_dir(d)
    cfg_path = write_config(d)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["api"] = {"tokens": [{"user": "alice", "sha256": "ab" * 32}]}
    cfg["spark"] = {"master": "local[1]", "conf": {}}
    cfg["warehouse"] = "elsewhere"
    cfg_path.write_text(yaml.safe_dump(cfg))
    kept = prepare_dir(d)
    assert set(kept) == {"api", "spark"}
    after = yaml.safe_load(write_config(d).read_text())
    assert after["api"] == cfg["api"]
    assert after["spark"] == {"master": "local[1]", "conf": {}}
    assert after["warehouse"] == "warehouse"  # the demo owns where its files live


def test_demo_refuses_a_file_in_place_of_the_folder(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DemoRefused, match="not a folder"):
        prepare_dir(f)
    assert f.read_text() == "x"
