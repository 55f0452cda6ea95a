"""The package's layout: no module of nmsbench imports itself back through others (an import
circle), counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nmsbench"


def module_name(path: Path) -> str:
    parts = ("nmsbench", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The nmsbench modules ``path`` imports, anywhere in it."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmsbench"):
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("nmsbench")}
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    graph = {module_name(path): imports_of(path) for path in PACKAGE.rglob("*.py")}
    return {name: {d for d in deps if d in graph and d != "nmsbench"} for name, deps in graph.items()}


def find_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    circles, done = [], set()

    def visit(name, path):
        if name in path:
            circles.append(path[path.index(name):] + [name])
            return
        if name in done:
            return
        for dep in sorted(graph.get(name, ())):
            visit(dep, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    return circles


def test_the_circle_finder_finds_one():
    assert find_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_nmsbench_imports_itself_back():
    graph = import_graph()
    assert "nmsbench.cli" in graph and "nmsbench.cli" not in graph["nmsbench.pipeline_cli"]
    assert find_circles(graph) == []
