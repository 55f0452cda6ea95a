"""Named axes of a benchmark's grid, and the one place their values are checked.

A benchmark declares ``AXES``: one :class:`Axis` per grid field a user can set. The command
line builds its options from them (``Axis.flag``, ``Axis.help``, ``Axis.many``), turns the
texts given into values with ``Axis.parse`` and spells a grid back into a command with
``Axis.show``; the grid's ``validate()`` calls :func:`check_axes`, so a bad value is the same
:class:`GridError` from Python and from the command line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


class GridError(ValueError):
    """A grid that cannot be run; ``field`` names the grid field at fault (the command line
    names the option that sets it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Axis:
    """One grid field a user sets: ``parse`` turns one command-line text into values
    (comma-separated where ``many``; a ValueError says what is wrong), ``default`` is the
    field's value when the option is not given (None: the grid's own default).

    ``check(value)`` (optional) returns what is wrong with a value of the field, or "";
    ``show(value)`` (optional) spells a value back as the option's texts (default: the
    values comma-joined); ``combine`` (optional) makes the field's value from the parsed
    items of every repeat (default: a list without repeats; ``dict`` for KEY=VALUE items)."""

    name: str
    flag: str
    parse: Callable[[str], list]
    default: object = None
    help: str = ""
    many: bool = True
    check: Callable[[object], str] | None = None
    show: Callable[[object], list[str]] | None = None
    combine: Callable[[list], object] | None = None
    metavar: str | None = None

    def value(self, texts) -> object:
        """The grid field's value from the option's texts (one per repeat), or a GridError."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        items: list = []
        for text in texts:
            try:
                items.extend(self.parse(text))
            except GridError:
                raise
            except ValueError as e:
                raise GridError(self.name, str(e)) from None
        if self.combine is not None:
            return self.combine(items)
        if not self.many:
            if len(items) != 1:
                raise GridError(self.name, f"{self.flag} takes one value, got {', '.join(texts) or 'none'}")
            return items[0]
        return list(dict.fromkeys(items))

    def texts(self, value) -> list[str]:
        """``value`` spelled as this option's texts (what :meth:`value` reads back)."""
        if self.show is not None:
            return list(self.show(value))
        if isinstance(value, dict):
            return [f"{k}={v}" for k, v in value.items()]
        if isinstance(value, (list, tuple)):
            return [",".join(_text(v) for v in value)] if value else []
        return [_text(value)]


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_axes(grid, axes) -> None:
    """Raise :class:`GridError` (naming the field) for the first value of ``grid`` that one of
    its ``axes`` refuses: a ``many`` axis needs a non-empty list, and ``check`` says the rest."""
    for axis in axes:
        value = getattr(grid, axis.name, None)
        if value is None:
            continue
        if axis.many and axis.combine is None and (not isinstance(value, (list, tuple)) or not value):
            raise GridError(axis.name, f"{axis.name} ({axis.flag}) must be a non-empty list, got {value!r}")
        problem = axis.check(value) if axis.check is not None else ""
        if problem:
            raise GridError(axis.name, problem)


# --- parse helpers: one command-line text -> a list of values (ValueError says why)

def split(text: str) -> list[str]:
    """Comma-separated items of one text, stripped, without empty ones."""
    return [part.strip() for part in str(text).split(",") if part.strip()]


def split_all(values) -> list[str]:
    """Items of several texts (an option given several times and/or comma-separated), in
    order, without repeats."""
    return list(dict.fromkeys(item for value in values for item in split(value)))


def parse_sizes(text: str) -> list[int]:
    """``64..8192`` is 64, 128, ..., 8192 (doubling from the lower bound; the upper bound
    always ends the range, on the doubling grid or not: ``100..1000`` is 100, 200, 400,
    800, 1000); ``100,1000`` a list; both mix. Every size must be positive."""
    sizes: list[int] = []
    for part in split(text):
        match = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)", part)
        if match:
            lo, hi = int(match[1]), int(match[2])
            if lo < 1 or hi < lo:
                raise ValueError(f"range {part!r} must go from a positive size up to a size at least as large")
            value = lo
            while value < hi:
                sizes.append(value)
                value *= 2
            sizes.append(hi)
        elif part.isdigit():
            if int(part) < 1:
                raise ValueError(f"{part!r}: box counts must be positive")
            sizes.append(int(part))
        else:
            raise ValueError(f"{part!r} is not a box count or a range like 64..8192")
    if not sizes:
        raise ValueError("no box counts given")
    return list(dict.fromkeys(sizes))


def ints(what: str, low: int | None = 1) -> Callable[[str], list[int]]:
    """A parser of comma-separated whole numbers (ranges like ``64..8192`` too), each at least ``low``."""
    def parse(text: str) -> list[int]:
        values: list[int] = []
        for part in split(text):
            if ".." in part:
                values.extend(parse_sizes(part))
                continue
            try:
                values.append(int(part))
            except ValueError:
                raise ValueError(f"{what} must be whole numbers, got {text!r}") from None
        if not values:
            raise ValueError(f"no {what} given")
        if low is not None and min(values) < low:
            kind = "positive whole numbers" if low == 1 else f"whole numbers >= {low}"
            raise ValueError(f"{what} must be {kind}, got {text!r} ({min(values)} is not in the range x>={low})")
        return values
    return parse


def floats(what: str, low: float | None = None, high: float | None = None) -> Callable[[str], list[float]]:
    """A parser of comma-separated numbers within [``low``, ``high``] where given."""
    def parse(text: str) -> list[float]:
        try:
            values = [float(part) for part in split(text)]
        except ValueError:
            raise ValueError(f"{what} must be numbers, got {text!r}") from None
        if not values:
            raise ValueError(f"no {what} given")
        if any((low is not None and v < low) or (high is not None and v > high) or v != v for v in values):
            raise ValueError(f"{what} must lie in [{_bound(low)}, {_bound(high)}], got {text!r}")
        return values
    return parse


def _bound(value) -> str:
    return "inf" if value is None else f"{value:g}"


def names(what: str, known: Callable[[], object] | None = None) -> Callable[[str], list[str]]:
    """A parser of comma-separated names, checked against ``known()`` (a collection) where given."""
    def parse(text: str) -> list[str]:
        items = split(text)
        if not items:
            raise ValueError(f"no {what} given")
        if known is not None:
            choices = list(known())
            bad = [item for item in items if item not in choices]
            if bad:
                raise ValueError(f"unknown {', '.join(bad)}; choose from {', '.join(map(str, choices))}")
        return items
    return parse


DEVICES = ("cpu", "cuda")


def parse_devices(text: str) -> list[str]:
    """``cpu`` and/or ``cuda``, comma-separated."""
    items = split(text)
    bad = [d for d in items if d not in DEVICES]
    if bad or not items:
        raise ValueError(f"{', '.join(bad) or 'none given'}: choose cpu and/or cuda")
    return items


def param_value(text: str):
    """A parameter's value as int, float or text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_param(text: str) -> list[tuple[str, object]]:
    """``KEY=VALUE`` as [(key, value)] (value: int, float or text); combine with ``dict``."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{text!r} is not KEY=VALUE")
    return [(key.strip(), param_value(value.strip()))]


def parse_param_list(text: str) -> list[tuple[str, list]]:
    """``KEY=V1,V2`` as [(key, [values])]; combine with :func:`merge_param_lists`."""
    key, sep, values = str(text).partition("=")
    if not sep or not key.strip() or not values.strip():
        raise ValueError(f"{text!r} is not KEY=VALUE[,VALUE...]")
    return [(key.strip(), [param_value(v) for v in split(values)])]


def merge_param_lists(items: list[tuple[str, list]]) -> dict[str, list]:
    """{key: [values without repeats]} from :func:`parse_param_list` items."""
    merged: dict[str, list] = {}
    for key, values in items:
        merged.setdefault(key, [])
        merged[key] += [v for v in values if v not in merged[key]]
    return merged


__all__ = ["DEVICES", "Axis", "GridError", "check_axes", "floats", "ints", "merge_param_lists", "names", "param_value",
           "parse_devices", "parse_param", "parse_param_list", "parse_sizes", "split", "split_all"]
