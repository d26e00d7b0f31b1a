"""lakegate.yaml: where the warehouse, catalog, policies and audit log live, and Spark's setup."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from governance.errors import ConfigError

_KEYS = {"warehouse", "catalog", "policies", "audit", "spark", "default_catalog",
         "default_schema", "verify_plans", "audit_max_bytes", "audit_backup_count"}


@dataclass(frozen=True)
class Config:
    warehouse: Path
    catalog: str  # SQLite file path or URL
    policies: Path
    audit: Path
    spark_master: str = "local[*]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    default_catalog: str = "main"
    default_schema: str = "default"
    verify_plans: bool = True
    audit_max_bytes: int = 64 * 1024 * 1024
    audit_backup_count: int = 20
    path: Path | None = None

    @classmethod
    def default(cls, root: str | Path = ".lakegate") -> Config:
        """The embedded setup: everything under one directory, policies from ./policies."""
        base = Path(root).resolve()
        return cls(
            warehouse=base / "warehouse",
            catalog=str(base / "catalog.db"),
            policies=Path("policies").resolve(),
            audit=base / "audit",
        )

    @classmethod
    def load(cls, path: str | Path) -> Config:
        p = Path(path).resolve()
        if not p.is_file():
            raise ConfigError(f"config file {p} not found")
        try:
            raw: Any = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: expected a mapping of settings")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ConfigError(f"{p}: unknown setting(s) {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(sorted(_KEYS))}")
        base = p.parent

        def rel(key: str, default: str) -> Path:
            value = raw.get(key, default)
            if not isinstance(value, str):
                raise ConfigError(f"{p}: '{key}' must be a path")
            q = Path(value).expanduser()
            return q if q.is_absolute() else (base / q).resolve()

        catalog = raw.get("catalog", "catalog.db")
        if not isinstance(catalog, str):
            raise ConfigError(f"{p}: 'catalog' must be a file path or URL")
        if "://" not in catalog and catalog != ":memory:":
            catalog = str(rel("catalog", "catalog.db"))
        spark = raw.get("spark") or {}
        if not isinstance(spark, dict):
            raise ConfigError(f"{p}: 'spark' must be a mapping with master and conf")
        conf = spark.get("conf") or {}
        if not isinstance(conf, dict):
            raise ConfigError(f"{p}: 'spark.conf' must be a mapping")
        return cls(
            warehouse=rel("warehouse", "warehouse"),
            catalog=catalog,
            policies=rel("policies", "policies"),
            audit=rel("audit", "audit"),
            spark_master=str(spark.get("master", "local[*]")),
            spark_conf={str(k): str(v) for k, v in conf.items()},
            default_catalog=str(raw.get("default_catalog", "main")).lower(),
            default_schema=str(raw.get("default_schema", "default")).lower(),
            verify_plans=bool(raw.get("verify_plans", True)),
            audit_max_bytes=int(raw.get("audit_max_bytes", 64 * 1024 * 1024)),
            audit_backup_count=int(raw.get("audit_backup_count", 20)),
            path=p,
        )
