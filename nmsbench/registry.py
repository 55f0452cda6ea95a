"""The registry: every NMS variant is a plain function registered with its capabilities.

    @register(name="allpairs", family="allpairs", devices=("cpu",), requires=("numba",),
              summary="numba prange: each box checks every higher-ranked box",
              style=("#009E73", "triangle-up"))
    def allpairs_cpu(boxes, scores, *, iou_threshold, labels=None) -> NMSResult: ...

One name may be registered several times (one function per device); the entries merge
into one :class:`Implementation`. ``style`` (a colour and a plotly marker symbol) is how
its curves look in every figure; given once per name, on any of its registrations (the
colour-distance test holds every registered pair apart). Availability is computed from guarded look-ups, never
by crashing discovery: a backend whose module or device is missing is listed as
unavailable, with the reason.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from .families import FAMILIES, ParamSpec

DEVICES = ("cpu", "cuda")
DEFAULT_DTYPES = (torch.float32, torch.float64)
_HEX_COLOR = re.compile(r"#[0-9A-Fa-f]{6}")
RESOLVED_KEPT = 256  # resolved parameter sets an implementation keeps
_PLAIN_VALUES = frozenset((int, float, str, bool, type(None)))  # immutable, and equal only to equals of their type


@dataclass(frozen=True)
class Backend:
    """One device's function for an implementation, and what shapes its cost."""

    device: str
    fn: Callable
    requires: tuple[str, ...] = ()
    dtypes: tuple[torch.dtype, ...] = DEFAULT_DTYPES
    summary: str = ""
    host_sync: bool = False  # waits for the device inside the op (e.g. to size its output)
    # capturable in a CUDA graph: fn also takes padded=True and then returns a
    # PaddedNMSResult without any host synchronization
    graph_safe: bool = False
    # checks the value rules in its own pass over the data: fn also takes
    # check_values=True and then raises the reference ValueError itself
    # (nmsbench.inputs.report_bad_values), so run_nms runs no pass of its own
    checks_values: bool = False
    # the largest N a sweep of every implementation times it at (a plain loop whose calls
    # take seconds beyond); None: no limit. Naming it in `sweep --impl` lifts it.
    sweep_max_n: Optional[int] = None

    def availability(self) -> tuple[bool, str]:
        """(available, reason) on this machine; reason is "" when available."""
        for module in self.requires:
            if not _installed(module):
                return False, f"{module} not installed"
        if self.device == "cuda" and not _cuda_available():
            return False, "no CUDA device"
        return True, ""


_INSTALLED: dict[str, bool] = {}


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (looked up once per process: on every call's path)."""
    found = _INSTALLED.get(module)
    if found is None:
        found = _INSTALLED[module] = importlib.util.find_spec(module) is not None
    return found


_CUDA_SEEN = False


def _cuda_available() -> bool:
    """``torch.cuda.is_available()``, asked until it is True (it then stays True)."""
    global _CUDA_SEEN
    if not _CUDA_SEEN:
        _CUDA_SEEN = torch.cuda.is_available()
    return _CUDA_SEEN


@dataclass
class Implementation:
    """An NMS variant: its family, parameters and one backend per device."""

    name: str
    family: str
    exact: bool
    summary: str
    params: tuple[ParamSpec, ...] = ()
    backends: dict[str, Backend] = field(default_factory=dict)
    style: Optional[tuple[str, str]] = None  # (colour "#RRGGBB", plotly marker symbol) in figures
    # the given parameters' (name, value) pairs -> (their values' types, the resolved
    # parameters): a call site passes the same values call after call (bounded; only plain
    # Python values are kept)
    _resolved: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(d for d in DEVICES if d in self.backends)

    def accepted_params(self, given: dict[str, Any]) -> dict[str, Any]:
        """The entries of ``given`` this implementation takes (a sweep passes one dict to all)."""
        names = {p.name for p in self.params}
        return {k: v for k, v in given.items() if k in names}

    @functools.cached_property
    def _checked_defaults(self) -> dict[str, Any]:
        """Every parameter's default, checked once."""
        return {p.name: p.check(p.default) for p in self.params}

    def resolve_params(self, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults filled in and every value checked; unknown names are a ValueError."""
        if not given:  # the common case, on every call's path
            return dict(self._checked_defaults)
        key = tuple(given.items())
        types = tuple(map(type, given.values()))  # 1, 1.0 and True are equal keys: the types tell them apart
        try:
            kept = self._resolved.get(key)
        except TypeError:  # an unhashable value: checked every time
            kept = key = None
        if kept is not None and kept[0] == types:
            return dict(kept[1])
        resolved = self._check_params(given)
        # other objects than plain values may be mutable or compare loosely: checked every time
        if key is not None and all(t in _PLAIN_VALUES for t in types) and len(self._resolved) < RESOLVED_KEPT:
            self._resolved[key] = (types, resolved)
        return dict(resolved)

    def _check_params(self, given: dict[str, Any]) -> dict[str, Any]:
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            accepted = ", ".join(known) or "none"
            raise ValueError(f"{self.name} does not take parameter(s) {', '.join(unknown)}; it accepts: {accepted}")
        return {name: spec.check(given.get(name, spec.default)) for name, spec in known.items()}

    def backend(self, device: str) -> Backend:
        """The backend for a device type, or a ValueError naming the devices it has."""
        if device not in self.backends:
            raise ValueError(f"{self.name} has no {device} backend (devices: {', '.join(self.devices)})")
        return self.backends[device]


class BackendUnavailable(RuntimeError):
    """The backend exists but cannot run here (missing module or device)."""


_REGISTRY: dict[str, Implementation] = {}
_LOADED = False


def register(
    *,
    name: str,
    family: str,
    devices: tuple[str, ...],
    exact: bool = False,
    requires: tuple[str, ...] = (),
    summary: str = "",
    params: tuple[ParamSpec, ...] = (),
    dtypes: tuple[torch.dtype, ...] = DEFAULT_DTYPES,
    host_sync: bool = False,
    graph_safe: bool = False,
    checks_values: bool = False,
    sweep_max_n: Optional[int | dict[str, int]] = None,
    style: Optional[tuple[str, str]] = None,
):
    """Decorator that registers ``fn`` as ``name``'s backend on each of ``devices``
    (``sweep_max_n``: one limit for every device, or a limit per device)."""
    style = _checked_style(name, style)
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    bad = [d for d in devices if d not in DEVICES]
    if bad or not devices:
        raise ValueError(f"devices must be a non-empty subset of {DEVICES}, got {devices}")

    def decorator(fn: Callable) -> Callable:
        impl = _REGISTRY.get(name)
        if impl is None:
            impl = _REGISTRY[name] = Implementation(name, family, exact, summary, tuple(params))
        elif (impl.family, impl.exact, impl.params) != (family, exact, tuple(params)):
            raise ValueError(f"{name} is already registered with another family, exactness or parameters")
        if style is not None and impl.style not in (None, style):
            raise ValueError(f"{name} is already registered with the style {impl.style}, not {style}")
        for device in devices:
            if device in impl.backends:
                raise ValueError(f"{name} already has a {device} backend")
            cap = sweep_max_n.get(device) if isinstance(sweep_max_n, dict) else sweep_max_n
            impl.backends[device] = Backend(device, fn, tuple(requires), tuple(dtypes), summary, host_sync, graph_safe,
                                             checks_values, cap)
        if style is not None:
            impl.style = style
        ROUTES.clear()
        return fn

    return decorator


def _checked_style(name: str, style) -> Optional[tuple[str, str]]:
    """``style`` as a (colour, symbol) tuple, or a ValueError saying what it should be."""
    if style is None:
        return None
    if (not isinstance(style, (tuple, list)) or len(style) != 2 or not isinstance(style[0], str)
            or not _HEX_COLOR.fullmatch(style[0]) or not isinstance(style[1], str) or not style[1]):
        raise ValueError(f"{name}: style must be (colour '#RRGGBB', marker symbol), got {style!r}")
    return style[0], style[1]


def unregister(name: str) -> None:
    """Remove an implementation (for tests and plug-in reloading)."""
    _REGISTRY.pop(name, None)
    ROUTES.clear()


def _load_builtin() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    package = importlib.import_module("nmsbench.variants")  # the implementations/ folder
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{module.name}")


# the batched op's (nmsbench.batched_nms) backend modules among the variants, by device
BATCHED_BACKENDS = {"cuda": "batched_nms", "cpu": "batched_cpu"}


def batched_backend(device: str):
    """The batched op's backend module for ``device`` (its ``run``), imported by name like
    every variant, alone (the op's first call loads no other variant)."""
    return importlib.import_module(f"nmsbench.variants.{BATCHED_BACKENDS[device]}")


def implementations() -> dict[str, Implementation]:
    """Every registered implementation by name (the built-in ones loaded on first use)."""
    _load_builtin()
    return dict(_REGISTRY)


def get(name: str) -> Implementation:
    """One implementation by name, or a ValueError listing the known names."""
    _load_builtin()
    impl = _REGISTRY.get(name)
    if impl is None:
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return impl


# (name, device type) -> (implementation, backend) for backends found available: the
# look-up on run_nms's path (availability, once it holds, holds for the process); emptied
# whenever the registry changes
ROUTES: dict[tuple[str, str], tuple[Implementation, Backend]] = {}


def available_backend(name: str, device: str) -> tuple[Implementation, Backend]:
    """The implementation ``name`` and its backend for the device type ``device``, or the
    ``ValueError`` (unknown name) / ``BackendUnavailable`` (no backend for that device, or
    one that cannot run here) saying why not."""
    impl = get(name)
    backend = impl.backends.get(device)
    if backend is None:
        raise BackendUnavailable(f"{name} has no {device} backend (devices: {', '.join(impl.devices)})")
    available, reason = backend.availability()
    if not available:
        raise BackendUnavailable(f"{name} on {device} is unavailable: {reason}")
    ROUTES[name, device] = impl, backend
    return impl, backend


def style_of(name: str) -> Optional[tuple[str, str]]:
    """The (colour, marker symbol) ``name`` registered, or None (unknown name, or none given)."""
    _load_builtin()
    impl = _REGISTRY.get(name)
    return impl.style if impl is not None else None


def registered_styles() -> dict[str, tuple[str, str]]:
    """The styles of the implementations registered so far (loads no variant)."""
    return {name: impl.style for name, impl in _REGISTRY.items() if impl.style is not None}


def styles() -> dict[str, tuple[str, str]]:
    """Every registered implementation's style, for those that gave one."""
    return {name: impl.style for name, impl in implementations().items() if impl.style is not None}


def describe() -> list[dict[str, Any]]:
    """One record per (implementation, device backend): what `nmsbench list` shows."""
    rows = []
    for impl in sorted(implementations().values(), key=lambda impl: impl.name):
        for device in impl.devices:
            backend = impl.backends[device]
            available, reason = backend.availability()
            rows.append(
                {
                    "name": impl.name,
                    "family": impl.family,
                    "exact": impl.exact,
                    "device": device,
                    "available": available,
                    "reason": reason,
                    "dtypes": [str(d).removeprefix("torch.") for d in backend.dtypes],
                    "requires": list(backend.requires),
                    "host_sync": backend.host_sync,
                    "graph_safe": backend.graph_safe,
                    "params": {p.name: p.default for p in impl.params},
                    "summary": backend.summary or impl.summary,
                }
            )
    return rows
