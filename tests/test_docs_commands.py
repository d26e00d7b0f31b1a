"""The documentation cannot drift (issue 27, item 6): every ```sh and ```python block of
README.md and docs/ runs for real, in order, in a demo lakehouse built once (each document
in its own copy); every `lakegate <command>` the docs name exists; every relative link
resolves. A block that cannot run here says why, just before it:
`<!-- not-run: reason -->` (a reason is required, and there may be only a few).

Blocks run the way a reader runs them: sh blocks in bash (`set -e -o pipefail`) with the
project's `lakegate` first on PATH, python blocks in the project's interpreter (this one,
see `_exec_here`), both with the demo copy as working directory. A document's blocks
share one private network namespace (`unshare -rn`, when the kernel allows it), so servers a
tour starts on their documented ports (8080, 15002) never meet another run's, and every
process a block leaves running is stopped when its document is done."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = {"sh", "python"}
# Shell spellings a reader would run: they must be written ```sh so that they run here.
SHELL_ALIASES = {"bash", "shell", "console", "zsh"}
MAX_NOT_RUN = 6  # not-run markers in all the docs: keep them few
BLOCK_TIMEOUT = 300  # seconds for one block (a server's first start on a loaded machine)
FENCE = re.compile(r"^```([\w+-]*)[^\n]*$")
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->$")
LINK = re.compile(r"(?<!!)\[(?:[^\]]+)\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# Output that means a block broke even though its last command succeeded.
CRASH_SIGNS = ("Traceback (most recent call last)", "unexpected error", "command not found")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the marker's reason, or None when the block runs

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks_of(document: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the not-run marker just before it."""
    lines = document.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        before = next((x.strip() for x in reversed(lines[:start]) if x.strip()), "")
        marker = NOT_RUN.match(before)
        code = "\n".join(lines[start + 1 : i]) + "\n"
        found.append(Block(document, start + 1, lang, code, marker.group(1) if marker else None))
        i += 1
    return found


ALL_BLOCKS = [b for d in DOCUMENTS for b in blocks_of(d)]
RUN_DOCUMENTS = sorted(
    {b.document for b in ALL_BLOCKS if b.lang in RUNNABLE and b.not_run is None},
    key=DOCUMENTS.index,
)


# --- static checks (no Spark) ------------------------------------------------------------


def test_every_not_run_marker_gives_a_reason_and_they_stay_few() -> None:
    markers = [b for b in ALL_BLOCKS if b.not_run is not None]
    assert [b.where for b in markers if len(b.not_run or "") < 20] == []
    assert [b.where for b in markers if b.lang not in RUNNABLE] == []
    assert len(markers) <= MAX_NOT_RUN, [f"{b.where}: {b.not_run}" for b in markers]
    stray = [
        f"{d.relative_to(ROOT)}:{n}"
        for d in DOCUMENTS
        for n, line in enumerate(d.read_text(encoding="utf-8").splitlines(), 1)
        if line.lstrip().startswith("<!--")
        and "not-run" in line
        and NOT_RUN.match(line.strip()) is None
    ]
    assert stray == [], "a malformed not-run marker (needs `<!-- not-run: reason -->`)"


def test_shell_blocks_are_written_sh_so_that_they_run() -> None:
    assert [f"{b.where} ({b.lang})" for b in ALL_BLOCKS if b.lang in SHELL_ALIASES] == []


def _named_commands() -> dict[tuple[str, ...], str]:
    """Every `lakegate word [word ...]` in code spans and blocks, with where it was first."""
    named: dict[tuple[str, ...], str] = {}
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        pieces = [b.code for b in blocks_of(document)] + CODE_SPAN.findall(text)
        for piece in pieces:
            for line in piece.splitlines():
                for m in re.finditer(r"(?:^|[\s;&|($])lakegate((?:\s+\S+)+)", line):
                    for words in _command_words(m.group(1).split()):
                        named.setdefault(words, str(document.relative_to(ROOT)))
    return named


def _command_words(tokens: list[str]) -> list[tuple[str, ...]]:
    """The sub-command paths at the start of a command line's tokens (`--config X` and
    other leading options skipped); alternatives such as `validate|test` give one each."""
    paths: list[tuple[str, ...]] = [()]
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token == "--config":
            skip = True
            continue
        if token.startswith("-") and paths == [()]:
            continue
        words = token.split("|")
        if not all(re.fullmatch(r"[a-z][a-z0-9-]*", w) for w in words):
            break
        paths = [(*path, w) for path in paths for w in words]
    return [path for path in paths if path]


def test_every_lakegate_command_the_docs_name_exists() -> None:
    import click
    from click.testing import CliRunner

    from cli.app import cli

    missing = []
    for words, where in sorted(_named_commands().items()):
        command: click.Command = cli
        path: list[str] = []
        for word in words:
            if not isinstance(command, click.Group):
                break  # the rest are arguments
            sub = command.commands.get(word)
            if sub is None:
                missing.append(f"lakegate {' '.join([*path, word])} ({where})")
                break
            command, path = sub, [*path, word]
        result = CliRunner().invoke(cli, [*path, "--help"])
        if result.exit_code != 0:
            missing.append(f"lakegate {' '.join(path)} --help exits {result.exit_code}")
    assert missing == []


def _anchors(document: Path) -> set[str]:
    """GitHub's and mkdocs' heading anchors (lower case, punctuation dropped, spaces to -)."""
    anchors = set()
    for line in document.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^#{1,6}\s+(.*)$", line):
            title = re.sub(r"[`*_]", "", m.group(1)).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_relative_link_resolves() -> None:
    broken = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for block in blocks_of(document):  # links inside code blocks are not links
            text = text.replace(block.code, "")
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (document.parent / path).resolve() if path else document
            if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
                broken.append(f"{document.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{document.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


# --- the blocks, run ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One demo lakehouse, as `make demo` (`lakegate demo`) builds it and queries it as the
    four personas; its Lakegate reuses the run's SparkSession."""
    from governance.tools.demo import run_demo

    root = tmp_path_factory.mktemp("docs") / "demo-lakehouse"
    assert run_demo(root, io.StringIO()) == 0
    return root


@pytest.fixture(scope="module")
def outcomes(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every document's blocks, run: the documents side by side (each in its own copy of
    the demo and its own network namespace), the blocks of one document in order."""
    with ThreadPoolExecutor(max_workers=len(RUN_DOCUMENTS)) as pool:
        futures = {}
        for document in RUN_DOCUMENTS:
            workdir = tmp_path_factory.mktemp("doc") / "demo-lakehouse"
            shutil.copytree(demo, workdir, symlinks=True)
            futures[document] = pool.submit(_run_blocks, document, workdir)
        yield futures


class Namespace:
    """A private network namespace (loopback only) that a document's blocks share, or the
    host's network where user namespaces are not allowed."""

    def __init__(self) -> None:
        self.holder: subprocess.Popen[bytes] | None = None
        if shutil.which("unshare") and shutil.which("nsenter") and shutil.which("ip"):
            holder = subprocess.Popen(
                ["unshare", "-rn", "sh", "-c", "ip link set lo up && echo up && exec sleep 86400"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            if holder.stdout is not None and holder.stdout.readline().strip() == b"up":
                self.holder = holder
            else:
                holder.wait()

    def prefix(self) -> list[str]:
        if self.holder is None:
            return []
        return ["nsenter", "-t", str(self.holder.pid), "-U", "-n", "--preserve-credentials"]

    def close(self) -> None:
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()


HERE = threading.Lock()  # python blocks run here one at a time: they share cwd and stdout


def _exec_here(block: Block, workdir: Path) -> tuple[int, str]:
    """A python block in this interpreter, whose SparkSession `Lakegate.open` reuses (a
    Spark start per block would cost 20-60 s). A block that opens a Spark Connect client
    (`.remote(`) runs in a fresh interpreter instead: PySpark refuses a remote session
    beside a local SparkContext."""
    out = io.StringIO()
    with HERE:
        before = Path.cwd()
        os.chdir(workdir)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compile(block.code, block.where, "exec"), {"__name__": "__main__"})
            code = 0
        except Exception:
            traceback.print_exc(file=out)
            code = 1
        finally:
            os.chdir(before)
    return code, out.getvalue()


def _run_blocks(document: Path, workdir: Path) -> list[tuple[Block, int, str]]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),  # this checkout's code, wherever the venv's install points
    }
    for key in ("LAKEGATE_CONFIG", "LAKEGATE_USER", "LAKEGATE_TOKEN", "LAKEGATE_GATEWAY"):
        env.pop(key, None)
    ns = Namespace()
    groups: list[int] = []  # each block's process group: what it leaves running is in it
    results = []
    try:
        for block in blocks_of(document):
            if block.lang not in RUNNABLE or block.not_run is not None:
                continue
            if block.lang == "python" and ".remote(" not in block.code:
                results.append((block, *_exec_here(block, workdir)))
                continue
            script = workdir / f".block-{block.line}.{'py' if block.lang == 'python' else 'sh'}"
            script.write_text(block.code, encoding="utf-8")
            argv = (
                [sys.executable, str(script)]
                if block.lang == "python"
                else ["bash", "-e", "-o", "pipefail", str(script)]
            )
            proc = subprocess.Popen(
                [*ns.prefix(), *argv],
                cwd=workdir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            groups.append(proc.pid)
            try:
                out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
                code = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, code = proc.communicate()[0], -1
            results.append((block, code, out.decode(errors="replace")))
    finally:
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
        ns.close()
    return results


@pytest.mark.parametrize(
    "document", RUN_DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in RUN_DOCUMENTS]
)
def test_every_block_of_the_document_runs(document: Path, outcomes: dict) -> None:
    results = outcomes[document].result()
    failed = [
        f"{block.where} ({block.lang}) exited {code}:\n{out[-3000:]}"
        for block, code, out in results
        if code != 0 or any(sign in out for sign in CRASH_SIGNS)
    ]
    assert results, "no runnable block"
    assert failed == [], "\n\n".join(failed)
