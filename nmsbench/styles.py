"""The implementations' styles as their modules declare them (``register(..., style=...)``),
read from the variants' source without importing them: the dashboard draws results without
loading torch, numba or a kernel. ``tests/test_colors.py`` holds this reading equal to the
registry's."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

VARIANTS_PACKAGE = "nmsbench.variants"


def _variants_directory() -> Path | None:
    spec = importlib.util.find_spec(VARIANTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def styles_in(source: str) -> dict[str, tuple[str, str]]:
    """{name: (colour, symbol)} of every ``register(name=..., style=(colour, symbol))`` call
    in a module's source whose name and style are literals."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "register"):
            continue
        given = {k.arg: _literal(k.value) for k in node.keywords if k.arg in ("name", "style")}
        name, style = given.get("name"), given.get("style")
        if isinstance(name, str) and isinstance(style, tuple) and len(style) == 2:
            found.setdefault(name, (str(style[0]), str(style[1])))
    return found


@functools.cache
def declared_styles() -> dict[str, tuple[str, str]]:
    """Every built-in implementation's declared style, by name."""
    folder = _variants_directory()
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(folder.rglob("*.py")) if folder else ():
        for name, style in styles_in(path.read_text(encoding="utf-8")).items():
            found.setdefault(name, style)
    return found
