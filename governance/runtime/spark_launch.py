"""How the JVM starts: no secret on its command line, its scratch under the state directory.

PySpark starts the driver JVM with `spark-submit --conf key=value` for every setting, which
every local user can read in `ps`. Settings whose name says they hold a credential
(`governance.files.SECRET_SETTING`, e.g. `spark.hadoop.fs.s3a.secret.key`) go instead into an
owner-only properties file that spark-submit reads at start, removed once the JVM is up.
Spark 3.5 writes `artifacts/`, `spark-warehouse/`, `metastore_db/` and `derby.log` relative
to the JVM's working directory, so the JVM starts in the configured state directory.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from governance.files import is_secret_setting

_SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"


def _escape(text: str, *, key: bool) -> str:
    """A java.util.Properties key or value (spark-submit reads the file as UTF-8)."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    out = out.replace("\t", "\\t").replace("\f", "\\f")
    if key:
        for ch in "=: #!":
            out = out.replace(ch, "\\" + ch)
    elif out[:1] in (" ", "#", "!"):
        out = "\\" + out
    return out


def _spark_defaults() -> str:
    """spark-defaults.conf as spark-submit would read it: `--properties-file` replaces it,
    so its settings are carried into the file."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    home = os.environ.get("SPARK_HOME")
    where = Path(conf_dir) if conf_dir else (Path(home) / "conf" if home else None)
    path = where / "spark-defaults.conf" if where else None
    return path.read_text(encoding="utf-8") + "\n" if path and path.is_file() else ""


class Launch:
    """Context for one JVM start: `public` is what may go on the command line; entering
    writes the rest to an owner-only properties file and moves into `workdir`; leaving
    removes the file and moves back."""

    def __init__(self, settings: dict[str, str], workdir: Path | None, *, local: bool) -> None:
        if workdir is not None and local:
            settings = {"spark.local.dir": str(workdir / "spark-local"), **settings}
        self.public = {k: v for k, v in settings.items() if not is_secret_setting(k)}
        self.secret = {k: v for k, v in settings.items() if is_secret_setting(k)}
        self.workdir = workdir
        self._tmp: str | None = None
        self._saved_args: str | None = None
        self._saved_cwd: str | None = None

    def __enter__(self) -> Launch:
        if self.secret:
            self._tmp = tempfile.mkdtemp(prefix="lakegate-conf-")  # 0700
            path = Path(self._tmp) / "secret.properties"
            lines = [
                f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in self.secret.items()
            ]
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(_spark_defaults() + "\n".join(lines) + "\n")
            self._saved_args = os.environ.get(_SUBMIT_ARGS)
            rest = self._saved_args or "pyspark-shell"
            os.environ[_SUBMIT_ARGS] = f"--properties-file {shlex.quote(str(path))} {rest}"
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._saved_cwd = os.getcwd()
            os.chdir(self.workdir)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._saved_cwd is not None:
            os.chdir(self._saved_cwd)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            if self._saved_args is None:
                os.environ.pop(_SUBMIT_ARGS, None)
            else:
                os.environ[_SUBMIT_ARGS] = self._saved_args
