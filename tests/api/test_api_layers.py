"""The API's module layers: routers depend on `api.deps`, and no api module imports
`api.app` (which assembles the application; `lakegate serve`, cli/serve.py, runs it).
Imports are read with `ast`, including those under `TYPE_CHECKING`, since a typing-only
cycle is still a cycle between the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "api"
ROUTERS = (
    "access",
    "auditing",
    "discovery",
    "domains",
    "extensions",
    "registry",
    "statements",
    "unity",
)


def _imports(module: str) -> set[str]:
    """The `api.*` modules one api module imports, anywhere in the file."""
    tree = ast.parse((API / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "api":
                out |= {f"api.{a.name}" for a in node.names}
            elif node.module.startswith("api."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("api.")}
    return out


def _graph() -> dict[str, set[str]]:
    return {f"api.{p.stem}": _imports(p.stem) for p in API.glob("*.py") if p.stem != "__init__"}


@pytest.mark.parametrize("module", ROUTERS)
def test_no_router_imports_the_app(module: str) -> None:
    assert "api.app" not in _imports(module)


def test_no_api_module_imports_the_app() -> None:
    assert {m for m, deps in _graph().items() if "api.app" in deps} == set()


def test_api_modules_import_each_other_without_cycles() -> None:
    graph = _graph()
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, f"import cycle: {' -> '.join((*path, m))}"
        if m in done:
            return
        for dep in sorted(graph.get(m, ())):
            visit(dep, (*path, m))
        done.add(m)

    for m in sorted(graph):
        visit(m, ())
