"""Changing lakegate.yaml from a command (`lakegate certs`, `lakegate token create --save`):
checked before it replaces the file, written owner-only (it names token hashes and key
files), replaced atomically so a running server never reads half a file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from governance.config import Config
from governance.errors import ConfigError


def update_config(path: Path, change: Callable[[dict[str, Any]], None]) -> Config:
    """Apply `change` to the file's settings; the new file must load, or nothing changes.
    Comments in the file are not kept (YAML round trip)."""
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    change(raw)
    tmp = path.with_name(f".{path.name}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(yaml.safe_dump(raw, sort_keys=False))
    try:
        os.chmod(tmp, 0o600)
        Config.load(tmp)
    except ConfigError:
        tmp.unlink()
        raise
    os.replace(tmp, path)
    return Config.load(path)
