"""Kernel paths: the ways one op can run (one block, cooperative, several launches, ...),
each saying which inputs it cannot take, in one table per op.

A ``PathTable`` lists its ``KernelPath``-s in the chooser's order: ``choose`` gives the
first path that neither refuses the call (``refuses``: what the kernels cannot take) nor
passes it over (``passes_over``: the tuning, where a later path is faster); ``check``
is a forced path's (``path=``) test, a ValueError naming the reason and the paths that
take the call. A call is described by (n, dtype, padded, device, labels) and the op's own
keywords (``context``: e.g. the ``CudaModule`` whose kernels run, the decay kernel);
without a ``device`` a path asks nothing of a GPU. Every table registers itself by op
name (``path_table``), where the sanitizer run and the tests find it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import torch

Refusal = Callable[..., "str | None"]  # (n, dtype, padded, device, labels, **context) -> why not, or None


def _takes_all(n, dtype, padded, device, labels, **context) -> None:
    return None


@dataclass(frozen=True)
class KernelPath:
    """One way of running an op: ``refuses`` says why it cannot take a call (None: it can),
    ``passes_over`` why the chooser takes a later path where this one could run (None: it
    takes this one). ``prepare`` and ``run``: the op's own steps for this path (what a
    plan prepares once per call shape, and the call that runs it), None where the op
    branches on the name; ``one_launch``: the whole op is one kernel launch."""

    name: str
    refuses: Refusal = _takes_all
    passes_over: Refusal = _takes_all
    prepare: Callable | None = None
    run: Callable | None = None
    one_launch: bool = False


class PathTable(Mapping):
    """An op's paths by name, in the chooser's order (a read-only mapping name -> ``KernelPath``).
    ``context``: keywords every question passes to the paths unless the caller gives its own."""

    def __init__(self, op: str, paths, register: bool = True, **context):
        self.op = op
        paths = tuple(paths)
        self.paths = {path.name: path for path in paths}
        if len(self.paths) != len(paths) or not self.paths:
            raise ValueError(f"{op}: a path table needs paths with distinct names")
        self.context = context
        if register:
            _TABLES[op] = self

    def __getitem__(self, name: str) -> KernelPath:
        return self.paths[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        return f"PathTable({self.op!r}, {list(self.paths)})"

    def refusal(self, name: str, n: int, dtype: torch.dtype = torch.float32, padded: bool = False,
                device: torch.device | None = None, labels: bool = False, **context) -> str | None:
        """Why path ``name`` cannot take the call (None: it can); a path that does not exist is refused."""
        path = self.paths.get(name)
        if path is None:
            return f"no path {name!r}; the paths are {', '.join(self.paths)}"
        return path.refuses(n, dtype, padded, device, labels, **{**self.context, **context})

    def valid(self, n: int, dtype: torch.dtype = torch.float32, padded: bool = False,
              device: torch.device | None = None, labels: bool = False, **context) -> list[str]:
        """The paths that take the call, in order."""
        return [name for name in self.paths if self.refusal(name, n, dtype, padded, device, labels, **context) is None]

    def choose(self, n: int, dtype: torch.dtype = torch.float32, padded: bool = False,
               device: torch.device | None = None, labels: bool = False, **context) -> str:
        """The first path that neither passes the call over nor refuses it (asked in that order)."""
        context = {**self.context, **context}
        for name, path in self.paths.items():
            if (path.passes_over(n, dtype, padded, device, labels, **context) is None
                    and path.refuses(n, dtype, padded, device, labels, **context) is None):
                return name
        raise ValueError(f"{self.op}: no path takes N = {n} (padded={padded}); the paths are {', '.join(self.paths)}")

    def check(self, name: str, n: int, dtype: torch.dtype = torch.float32, padded: bool = False,
              device: torch.device | None = None, labels: bool = False, *, op: str | None = None, **context) -> None:
        """A ValueError (naming ``op``, the table's op by default) where path ``name`` does
        not exist or cannot take the call, naming the reason and the paths that can."""
        op = op or self.op
        if name not in self.paths:
            raise ValueError(f"{op}: no path {name!r}; the paths are {', '.join(self.paths)}")
        reason = self.refusal(name, n, dtype, padded, device, labels, **context)
        if reason is not None:
            valid = self.valid(n, dtype, padded, device, labels, **context)
            raise ValueError(f"{op}: path {name!r} cannot take this call: {reason}; "
                             f"for N = {n} (padded={padded}) the valid paths are {', '.join(valid) or 'none'}")


_TABLES: dict[str, PathTable] = {}


def path_table(op: str) -> PathTable | None:
    """The table registered for ``op`` (an implementation's name, or "rank_by_score",
    "overlap_graph"), None where it has none (or its module is not imported yet)."""
    return _TABLES.get(op)


def path_tables() -> dict[str, PathTable]:
    """Every registered table by op name (a copy)."""
    return dict(_TABLES)
