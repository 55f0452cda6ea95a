"""The package's layout, over the harness (nmsbench/) and its variants (implementations/,
installed as nmsbench.variants): no module imports itself back through others (an import
circle), and no harness module imports a variant (variants import the harness, never the
reverse; the registry and the kernel discovery find the variants by name). Imports inside
functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "nmsbench"
VARIANTS = ROOT / "implementations"
PACKAGES = {HARNESS: "nmsbench", VARIANTS: "nmsbench.variants"}  # folder -> its package's name
VARIANT_PACKAGE = "nmsbench.variants"
# harness modules that find the variants by name (importlib on a string, the folder's spec),
# never by an import statement
FINDS_VARIANTS_BY_NAME = {"nmsbench.registry", "nmsbench.cuda.kernels", "nmsbench.cuda.compile", "nmsbench.styles"}
# harness modules allowed to import a variant by an import statement, and which (none: the
# batched op's backends are found by the registry, by name, like every variant)
KNOWN_VARIANT_IMPORTS: dict[str, set[str]] = {}


def module_name(path: Path) -> str:
    root = next(folder for folder in PACKAGES if path.is_relative_to(folder))
    parts = (*PACKAGES[root].split("."), *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, name: str, is_package: bool) -> set[str]:
    """The nmsbench modules (variants included) that module ``name``'s ``source`` imports, anywhere in it."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmsbench"):
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("nmsbench")}
    return found - {name}


def imports_of(path: Path) -> set[str]:
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py")


def modules() -> list[Path]:
    return [path for folder in PACKAGES for path in folder.rglob("*.py") if "__pycache__" not in path.parts]


def import_graph() -> dict[str, set[str]]:
    graph = {module_name(path): imports_of(path) for path in modules()}
    return {name: {d for d in deps if d in graph and d not in ("nmsbench", VARIANT_PACKAGE)} for name, deps in graph.items()}


def is_variant(name: str) -> bool:
    return name == VARIANT_PACKAGE or name.startswith(VARIANT_PACKAGE + ".")


def variant_imports(source: str, name: str, is_package: bool = False) -> set[str]:
    """The variant modules a harness module's ``source`` imports, or names by a string
    (an ``importlib`` call), unless it is one of the modules that find them by name."""
    found = {module for module in imports_in(source, name, is_package) if is_variant(module)}
    if name not in FINDS_VARIANTS_BY_NAME:
        found |= {node.value for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_variant(node.value)}
    return found


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


def test_no_module_of_nmsbench_or_its_variants_imports_itself_back():
    graph = import_graph()
    assert "nmsbench.cli" in graph and "nmsbench.cli" not in graph.get("nmsbench.pipeline_cli", set())
    assert "nmsbench.variants.hard_fused.cuda" in graph and "nmsbench.cuda.rank" in graph
    assert "nmsbench.cuda" in graph["nmsbench.variants.hard_fused.cuda"]  # the variants' imports are read
    assert find_circles(graph) == []


def test_the_layout_check_sees_a_harness_module_import_a_variant():
    """What once slipped through: the CLI's options importing the CUDA bridge from the variants."""
    assert variant_imports("from nmsbench.variants._cuda import TUNABLES_VARIABLE\n", "nmsbench.cli_options") == {
        "nmsbench.variants._cuda", "nmsbench.variants._cuda.TUNABLES_VARIABLE"}
    assert variant_imports("def f():\n    from nmsbench.variants import _validate\n", "nmsbench.validation")
    assert variant_imports("import importlib\nm = importlib.import_module('nmsbench.variants.x')\n", "nmsbench.api")
    assert variant_imports("from .cuda import launch\n", "nmsbench.boxes") == set()
    assert variant_imports("from .variants import x\n", "nmsbench", is_package=True) == {
        "nmsbench.variants", "nmsbench.variants.x"}


def test_no_harness_module_imports_a_variant():
    offending = {module_name(path): found for path in HARNESS.rglob("*.py")
                 if (found := variant_imports(path.read_text(), module_name(path), path.name == "__init__.py"))}
    assert offending == KNOWN_VARIANT_IMPORTS
