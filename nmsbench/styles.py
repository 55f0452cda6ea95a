"""The implementations' styles as their modules declare them (``register(..., style=...)``),
read from the variants' source without importing them: the dashboard draws results without
loading torch, numba or a kernel. ``tests/test_colors.py`` holds this reading equal to the
registry's."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
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


def _call_texts(source: str, name: str = "register"):
    """The source text of each ``name(...)`` call, by matching its parentheses (quoted
    text skipped); None where a call's end is not found (the caller parses the whole file)."""
    for match in re.finditer(rf"\b{name}\(", source):
        depth, i, quote = 0, match.end() - 1, ""
        while i < len(source):
            ch = source[i]
            if quote:
                if source.startswith(quote, i):
                    i, quote = i + len(quote), ""
                    continue
                i += 2 if ch == "\\" else 1
                continue
            if ch in "'\"":
                quote = ch * 3 if source.startswith(ch * 3, i) else ch
                i += len(quote)
                continue
            if ch == "#":
                i = source.find("\n", i)
                i = len(source) if i < 0 else i
                continue
            depth += (ch == "(") - (ch == ")")
            i += 1
            if depth == 0:
                break
        yield source[match.start():i] if depth == 0 else None


def _calls(source: str):
    """The ``register(...)`` call nodes of a module's source: each call's own text parsed
    (a fraction of parsing the whole module, which the dashboard would wait for), the
    whole module where a call's text does not parse alone."""
    if "style=" not in source:
        return []
    nodes = []
    for text in _call_texts(source):
        try:
            nodes.append(ast.parse(text, mode="eval").body)
        except (SyntaxError, TypeError):
            return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    return nodes


def styles_in(source: str) -> dict[str, tuple[str, str]]:
    """{name: (colour, symbol)} of every ``register(name=..., style=(colour, symbol))`` call
    in a module's source whose name and style are literals."""
    found = {}
    for node in _calls(source):
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
