"""How an implementation looks in every figure: its colour and marker.

A built-in implementation carries its own (``register(..., style=(colour, symbol))`` in
its module; tests/test_colors.py holds every registered pair apart by CIEDE2000). The
built-in colours are Okabe-Ito's colour-blind-safe set and Paul Tol's, the two headline
kernels the two strongest (hard_fused vermillion, matrix_recompute blue) and the
baseline, torchvision, black. A name that registered none (a plug-in, a name only in an
old results file) takes a colour and a marker picked by a hash of the name: fixed per
name whatever else is loaded.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Iterator, Mapping, Sequence

from ..styles import declared_styles

# The hashed fallback: colours (yellow, green, sand, umber, from Tol's and Okabe-Ito's
# sets) that stay apart from the registered ones, and marker shapes no registered name
# uses, so a later name never looks like a built-in one (two later names can share a
# colour, rarely also a marker).
EXTRA_COLORS = ["#F0E442", "#117733", "#DDCC77", "#8C564B"]
EXTRA_SYMBOLS = ["pentagon", "hexagon", "star-triangle-up", "hourglass", "bowtie", "star-square", "hexagram",
                 "triangle-left"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star", "cross", "pentagon"]


def registered_styles() -> dict[str, tuple[str, str]]:
    """Every style known now: the built-ins' as their modules declare them (read without
    importing torch), and those of implementations registered at run time (a plug-in, a
    test's toy) where the registry is loaded already."""
    found = dict(declared_styles())
    registry = sys.modules.get("nmsbench.registry")
    if registry is not None:
        found |= registry.registered_styles()
    return found


class _RegisteredStyles(Mapping):
    """The registered implementations' colours (part 0) or marker symbols (part 1), read
    at each look-up (a variant registered later is in it)."""

    def __init__(self, part: int):
        self._part = part

    def __getitem__(self, name: str) -> str:
        style = registered_styles().get(name)
        if style is None:
            raise KeyError(name)
        return style[self._part]

    def __iter__(self) -> Iterator[str]:
        return iter(registered_styles())

    def __len__(self) -> int:
        return len(registered_styles())


PINNED_COLORS: Mapping[str, str] = _RegisteredStyles(0)
PINNED_SYMBOLS: Mapping[str, str] = _RegisteredStyles(1)


def _name_hash(name: str) -> int:
    return int(hashlib.sha1(name.encode()).hexdigest(), 16)


def impl_style(name: str) -> tuple[str, str]:
    """(colour, marker symbol) of an implementation: the one it registered, else picked
    from the extra colours and shapes by a hash of the name (the same every time)."""
    style = registered_styles().get(name)
    if style is not None:
        return style
    h = _name_hash(name)
    return EXTRA_COLORS[h % len(EXTRA_COLORS)], EXTRA_SYMBOLS[(h // len(EXTRA_COLORS)) % len(EXTRA_SYMBOLS)]


def color_map(names: Sequence[str]) -> dict[str, str]:
    """A colour for each implementation name (:func:`impl_style`), whatever else is in ``names``."""
    return {name: impl_style(name)[0] for name in names}


def symbol_map(names: Sequence[str]) -> dict[str, str]:
    """A marker symbol for each implementation name (:func:`impl_style`)."""
    return {name: impl_style(name)[1] for name in names}
