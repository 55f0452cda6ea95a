"""Compiling our kernels: NVRTC called directly, the cubin loaded through CuPy's driver API.

Kernels live in ``.cu`` files (``_common.cuh``, the IoU and the input loaders, is
prepended to each) and are compiled by NVRTC at first use, once per (file, device), so
the runner's warm-up pays for compilation and timed calls never do. We call NVRTC
ourselves (through ``cupy.cuda.nvrtc``) and load the cubin with
``cupy.cuda.function.Module`` instead of using ``cupy.RawModule``, because RawModule
always appends ``-ftz=true``: it would flush subnormal floats to zero, and subnormal
scores or IoUs would then rank and compare differently from the CPU. ``cupy`` is
imported lazily, so machines without it still import this package.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent  # the bridge's own sources: _common.cuh, rank.cu, _validate.cu
COMMON_HEADER = HERE / "_common.cuh"
VARIANTS_PACKAGE = "nmsbench.variants"  # where a variant's .cu file lies by default (implementations/)


@functools.cache
def variants_directory() -> Path:
    """The folder of the variants' package (its .cu files), found without importing it."""
    spec = importlib.util.find_spec(VARIANTS_PACKAGE)
    return Path(next(iter(spec.submodule_search_locations))).resolve()

# --fmad=false: no fused multiply-add contraction, so float32 IoUs round exactly like the
# CPU backends (and the family definitions) compute them, and exact variants stay exact.
# -ftz=false: subnormals are kept, as on the CPU (NVRTC's default, stated because it matters).
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false", "-ftz=false")

# Kernels are templates over the stored input type; float16 travels as its raw bits.
SOURCE_TYPES = {torch.float32: "float", torch.float64: "double", torch.float16: "unsigned short"}
CUDA_DTYPES = tuple(SOURCE_TYPES)

# _common.cuh's constants, defined for every CudaModule: the counting kernels' items per
# block and warps (rank.cu, matrix_fused.cu's select), the counting rank's warps
# (rank.cu, matrix_recompute's rank_kernel), rows per block of ballot_mask_kernel.
COMMON_DEFINES = {"COUNT_BOXES": 32, "COUNT_WARPS": 8, "RANK_WARPS": 32, "BALLOT_WARPS": 8}
COUNT_BOXES, COUNT_WARPS, RANK_WARPS, BALLOT_WARPS = (COMMON_DEFINES[name] for name in
                                                      ("COUNT_BOXES", "COUNT_WARPS", "RANK_WARPS", "BALLOT_WARPS"))


class CompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message carries its log."""


TUNABLES_VARIABLE = "NMSBENCH_CUDA_TUNABLES"
DECLARED_TUNABLES: dict[str, set[str]] = {}  # tunable -> the .cu files that declare it


def tunable_overrides(declared: dict[str, int] | None = None) -> dict[str, int]:
    """The kernel variants NMSBENCH_CUDA_TUNABLES asks for ("NAME=integer,..."), for a probe
    that compares a variant with the default: those among ``declared`` (None: all). A
    ValueError names an entry that is not a declared tunable with an integer value. The
    sweep refuses to run while it is set (its rows would time a variant)."""
    text = os.environ.get(TUNABLES_VARIABLE, "").strip()
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = (part.strip() for part in item.partition("="))
        try:
            number = int(value)
        except ValueError:
            number = None
        if not equals or number is None or name not in DECLARED_TUNABLES:
            raise ValueError(f"{TUNABLES_VARIABLE}: {item!r} is not NAME=integer for a tunable; the tunables are "
                             f"{', '.join(sorted(DECLARED_TUNABLES)) or 'none'}")
        if declared is None or name in declared:
            overrides[name] = number
    return overrides



class CudaModule:
    """One ``.cu`` file: its template kernels (instantiated for every input dtype) and
    plain kernels, compiled once per device on first use.

    ``templates`` and ``plain`` name the kernels; as a dict they also give each kernel's
    argument layout (the struct codes a launch packs: "Q" a pointer, "i" an int, "d" a
    double, ...), which tests/test_kernel_layout.py checks against the C signature.
    ``defines`` are the file's constants, passed to NVRTC as ``-D NAME=value`` (beside
    ``COMMON_DEFINES``, those of _common.cuh), so the host reads the same values the
    kernels were compiled with and the ``.cu`` file does not #define them itself."""

    def __init__(self, cu_file: str, templates: tuple[str, ...] | dict[str, str] = (),
                 plain: tuple[str, ...] | dict[str, str] = (), defines: dict[str, int] | None = None,
                 tunables: dict[str, int] | None = None, directory: Path | None = None):
        """``tunables``: kernel-only variants (NVRTC -D, read by no host code) with their
        default values, which a probe may switch through NMSBENCH_CUDA_TUNABLES.
        ``cu_file`` is relative to ``directory``: the variants' folder where None (a
        variant's kernels, e.g. "hard_fused/hard_fused.cu"), the bridge's for its own."""
        self.cu_file = cu_file
        self.directory = Path(directory) if directory is not None else variants_directory()
        self.tunables = dict(tunables or {})
        for name in self.tunables:
            DECLARED_TUNABLES.setdefault(name, set()).add(cu_file)
        self.expressions = [f"{name}<{t}>" for name in templates for t in SOURCE_TYPES.values()] + list(plain)
        self.templates, self.plain = tuple(templates), tuple(plain)
        self.codes = {name: codes for kernels in (templates, plain) if isinstance(kernels, dict)
                      for name, codes in kernels.items()}
        self.defines = {**COMMON_DEFINES, **(defines or {})}
        self._loaded: dict[int, tuple[object, dict[str, object]]] = {}
        # (name, dtype) -> expression: on every launch's path, so no string is formatted there
        self._expression = {(name, dtype): f"{name}<{t}>" for name in templates for dtype, t in SOURCE_TYPES.items()}
        self._expression.update({(name, None): name for name in plain})

    def options(self, arch: str) -> list[str]:
        """NVRTC's options for ``arch``: ``NVRTC_OPTIONS``, the defines and tunables, the target; with
        NMSBENCH_NVRTC_LINEINFO=1 in the environment also ``-lineinfo`` (source lines for a
        profiler such as Nsight Compute; the code is otherwise the same)."""
        lineinfo = ("-lineinfo",) if os.environ.get("NMSBENCH_NVRTC_LINEINFO") == "1" else ()
        values = {**self.defines, **self.tunables, **tunable_overrides(self.tunables)}
        return [*NVRTC_OPTIONS, *lineinfo, *(f"-D{name}={value}" for name, value in values.items()), f"-arch={arch}"]

    @property
    def path(self) -> Path:
        """The ``.cu`` file."""
        return self.directory / self.cu_file

    def source(self) -> str:
        """The code NVRTC compiles: ``_common.cuh`` followed by the ``.cu`` file, its
        ``#include "name.cuh"`` lines replaced by those headers (:func:`with_includes`)."""
        return COMMON_HEADER.read_text() + with_includes(self.path)

    def compile(self, arch: str) -> tuple[bytes, dict[str, str]]:
        """NVRTC-compile every kernel for ``arch`` (e.g. "sm_90"; needs no GPU). Returns
        the binary (a cubin for sm_*, PTX text for compute_*) and each kernel expression's
        lowered (mangled) name."""
        from cupy.cuda import nvrtc

        program = nvrtc.createProgram(self.source(), self.cu_file, [], [])
        try:
            for expression in self.expressions:
                nvrtc.addNameExpression(program, expression)
            try:
                nvrtc.compileProgram(program, self.options(arch))
            except Exception as error:
                raise CompileError(f"{self.cu_file} does not compile: {error}\n{nvrtc.getProgramLog(program)}") from None
            names = {expression: nvrtc.getLoweredName(program, expression) for expression in self.expressions}
            return (nvrtc.getCUBIN(program) if arch.startswith("sm_") else nvrtc.getPTX(program)), names
        finally:
            nvrtc.destroyProgram(program)

    def get(self, name: str, dtype: torch.dtype | None, device: torch.device):
        """The loaded kernel ``name`` (a ``cupy.cuda.function.Function``), instantiated for
        ``dtype`` (None: a plain kernel)."""
        index = device_index(device)
        loaded = self._loaded.get(index)
        if loaded is None:
            import cupy
            from cupy.cuda import function

            major, minor = torch.cuda.get_device_capability(index)
            cubin, names = self.compile(f"sm_{major}{minor}")
            with cupy.cuda.Device(index):
                module = function.Module()
                module.load(cubin)
                loaded = self._loaded[index] = (module, {e: module.get_function(n) for e, n in names.items()})
        expression = self._expression.get((name, dtype))
        if expression is None:  # not a kernel of this file (or no such dtype): the loader's KeyError names it
            expression = name if dtype is None else f"{name}<{SOURCE_TYPES[dtype]}>"
        return loaded[1][expression]



LOCAL_INCLUDE = re.compile(r'^#include "([\w.-]+\.cuh)"[^\n]*\n', re.M)


def with_includes(path: Path) -> str:
    """``path``'s text, each ``#include "name.cuh"`` line replaced by the text of that header
    beside it (recursively): one program text, so NVRTC needs no include path and the
    kernel layout test and ptxas' report read what NVRTC compiles."""
    return LOCAL_INCLUDE.sub(lambda match: with_includes(path.parent / match.group(1)), path.read_text())


def device_index(device: torch.device) -> int:
    """The CUDA device's index (torch's current device for a bare ``cuda``)."""
    return device.index if device.index is not None else torch.cuda.current_device()

