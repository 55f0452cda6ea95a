"""The one bridge between torch tensors and our CUDA kernels (NVRTC + CuPy's driver API).

Kernels live in ``.cu`` files beside their wrappers (``_common.cuh``, the IoU and the
input loaders, is prepended to each) and are compiled by NVRTC at first use, once per
(file, device), so the runner's warm-up pays for compilation and timed calls never do.
We call NVRTC ourselves (through ``cupy.cuda.nvrtc``) and load the cubin with
``cupy.cuda.function.Module`` instead of using ``cupy.RawModule``, because RawModule
always appends ``-ftz=true``: it would flush subnormal floats to zero, and subnormal
scores or IoUs would then rank and compare differently from the CPU. Tensors stay torch
tensors: kernels receive raw device pointers, outputs are allocated by torch (so torch's
memory statistics see them), and every launch goes to torch's current CUDA stream.
``cupy`` is imported lazily, so machines without it still import this package.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import threading
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent

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
                 tunables: dict[str, int] | None = None):
        """``tunables``: kernel-only variants (NVRTC -D, read by no host code) with their
        default values, which a probe may switch through NMSBENCH_CUDA_TUNABLES."""
        self.cu_file = cu_file
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

    def source(self) -> str:
        """The code NVRTC compiles: ``_common.cuh`` followed by the ``.cu`` file."""
        return (HERE / "_common.cuh").read_text() + (HERE / self.cu_file).read_text()

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


class on_torch_stream:  # noqa: N801 - used as a function: `with on_torch_stream(device) as launch:`
    """Enter once per op; yields ``launch(fn, grid, block, args, shared_mem=0,
    cooperative=False)``, which launches on torch's current CUDA stream of ``device``.
    ``args`` may hold tensors (passed as device pointers), None (a null pointer), ints
    (int32), ``Address``-es and NumPy scalars (``np.uint64`` addresses, ``np.float64``, ``np.int64``,
    ``np.float32``, ...).

    A launch packs the arguments itself (``struct``, C alignment) into a per-thread buffer
    and calls ``cuLaunchKernel`` with pointers into it: CuPy's ``Function.__call__`` costs
    host time per argument, and our small ops are made of a few launches. CuPy's device
    context is entered only when the current device is another one. A class, not a
    generator: it is on every op's path."""

    __slots__ = ("launch", "_context")

    def __init__(self, device: torch.device):
        index, stream = _current_stream(device)

        def launch(fn, grid, block, args, shared_mem: int = 0, cooperative: bool = False) -> None:
            _launch(fn.ptr, grid, block, args, shared_mem, stream, cooperative)

        launch.stream = stream  # for CompiledLaunch-es made inside the block
        self.launch = launch
        self._context = None
        if torch.cuda.current_device() != index:
            import cupy

            self._context = cupy.cuda.Device(index)

    def __enter__(self):
        if self._context is not None:
            self._context.__enter__()
        return self.launch

    def __exit__(self, *exc_info) -> None:
        if self._context is not None:
            self._context.__exit__(*exc_info)


class Address(int):
    """A device (or mapped host) address as a launch argument: an 8-byte pointer. An int
    subclass because an op passes several per call and building one costs less than a
    ``np.uint64``."""

    __slots__ = ()


# struct codes of the launch arguments: a pointer parameter is 8 bytes, a Python int an int32
_SCALAR_CODES = {Address: "Q", np.uint64: "Q", np.int64: "q", np.uint32: "I", np.int32: "i", np.float64: "d",
                 np.float32: "f"}
PARAM_BYTES = 4096  # the CUDA limit on a kernel's parameters


class _LaunchBuffer(threading.local):
    """One thread's parameter buffer, and per argument layout the array of pointers to
    each argument's place in it (what cuLaunchKernel reads). The driver copies the values
    during the call, so the buffer is reused by the thread's next launch."""

    def __init__(self):
        self.values = ctypes.create_string_buffer(PARAM_BYTES)
        self.address = ctypes.addressof(self.values)
        self.pointers: dict[str, tuple[object, int]] = {}

    def pointer_array(self, codes: str) -> int:
        """Address of the pointer array for this layout (built once per layout)."""
        entry = self.pointers.get(codes)
        if entry is None:
            if struct.calcsize("@" + codes) > PARAM_BYTES:
                raise ValueError(f"kernel arguments take {struct.calcsize('@' + codes)} bytes, above {PARAM_BYTES}")
            entry = self.pointers[codes] = pointers_into(self.address, codes)
        return entry[1]


def pointers_into(address: int, codes: str) -> tuple[object, int]:
    """(array, its address): cuLaunchKernel's ``kernelParams`` for arguments of layout
    ``codes`` packed at ``address`` in the native ("@") struct layout, which is C's: each
    value at its natural alignment."""
    offsets = [struct.calcsize("@" + codes[: i + 1]) - struct.calcsize(code) for i, code in enumerate(codes)]
    array = (ctypes.c_void_p * max(1, len(codes)))(*[address + offset for offset in offsets])
    return array, ctypes.addressof(array)


_launch_buffer = _LaunchBuffer()


def pack_arguments(args) -> tuple[str, list]:
    """(struct codes, values) of kernel arguments: tensors and None as 8-byte pointers,
    Python ints (bool included) as int32, NumPy scalars as their own type."""
    types = tuple(map(type, args))
    plan = _argument_plans.get(types)
    if plan is None:
        plan = _argument_plans[types] = _argument_plan(args)
    codes, tensors, nones, ints = plan
    values = list(args)
    for i in tensors:
        values[i] = values[i].data_ptr()
    for i in nones:
        values[i] = 0
    for i in ints:
        if not -(2**31) <= values[i] < 2**31:
            raise OverflowError(f"kernel argument {values[i]} does not fit an int32")
    return codes, values


# Per signature (the arguments' types, position by position): the struct codes and which
# positions are tensors, None and Python ints. Every launch site passes the same
# signature call after call, so a launch looks its plan up instead of testing each type.
_argument_plans: dict[tuple[type, ...], tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}


def _argument_plan(args) -> tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    codes, tensors, nones, ints = [], [], [], []
    for i, a in enumerate(args):
        code = _SCALAR_CODES.get(type(a))
        if code is not None:
            codes.append(code)
        elif a is None:
            codes.append("Q")
            nones.append(i)
        elif isinstance(a, torch.Tensor):
            codes.append("Q")
            tensors.append(i)
        elif isinstance(a, (bool, int)):
            codes.append("i")
            ints.append(i)
        else:
            raise TypeError(f"unsupported kernel argument type {type(a).__name__}")
    return "".join(codes), tuple(tensors), tuple(nones), tuple(ints)


_driver = None  # cupy_backends' driver API, imported on the first launch (cupy is optional)


def _driver_api():
    global _driver
    if _driver is None:
        from cupy_backends.cuda.api import driver

        _driver = driver
    return _driver


_runtime = None  # cupy_backends' runtime API, imported on the first wait


def _runtime_api():
    global _runtime
    if _runtime is None:
        from cupy_backends.cuda.api import runtime

        _runtime = runtime
    return _runtime


def _launch(function_ptr: int, grid, block, args, shared_mem: int, stream: int, cooperative: bool = False) -> None:
    codes, values = pack_arguments(args)
    buffer = _launch_buffer
    pointers = buffer.pointer_array(codes)
    struct.pack_into("@" + codes, buffer.values, 0, *values)
    _driver_launch(function_ptr, (*grid, 1, 1)[:3] + (*block, 1, 1)[:3], shared_mem, stream, pointers, cooperative)


def _driver_launch(function_ptr: int, dims: tuple, shared_mem: int, stream: int, pointers: int,
                   cooperative: bool) -> None:
    """The driver's launch of packed arguments; ``dims`` is (grid x, y, z, block x, y, z)."""
    driver = _driver or _driver_api()
    if cooperative:  # every block resident at once, or the launch fails (never a silent hang)
        driver.launchCooperativeKernel(function_ptr, *dims, shared_mem, stream, pointers)
    else:
        driver.launchKernel(function_ptr, *dims, shared_mem, stream, pointers, 0)


class CompiledLaunch:
    """One kernel's launch with its grid, block, shared memory and argument layout fixed,
    prepared once for an op's per-call path: a call packs plain numbers (device addresses
    as ints, 0 for a null pointer) with a precompiled ``struct`` and calls the driver on
    ``stream``, from the kernel's device (``device_index``). ``launch``'s argument handling
    (a type lookup per call, tensors' ``data_ptr``, a list) was a large part of a launch's
    host time."""

    __slots__ = ("function", "grid", "block", "dims", "shared_mem", "cooperative", "codes", "device_index", "_pack",
                 "_own")

    def __init__(self, function, grid, block, codes: str, device_index: int, shared_mem: int = 0,
                 cooperative: bool = False, own_buffer: bool = False):
        """``own_buffer``: the launch packs into a buffer of its own rather than the
        thread's (one look-up less a call), for a launch that only one thread uses."""
        if struct.calcsize("@" + codes) > PARAM_BYTES:
            raise ValueError(f"kernel arguments take {struct.calcsize('@' + codes)} bytes, above {PARAM_BYTES}")
        self.function, self.grid, self.block = function, tuple(grid), tuple(block)
        self.dims = (*grid, 1, 1)[:3] + (*block, 1, 1)[:3]
        self.shared_mem, self.cooperative, self.codes, self.device_index = shared_mem, cooperative, codes, device_index
        self._pack = struct.Struct("@" + codes).pack_into
        self._own = None
        if own_buffer:
            values = ctypes.create_string_buffer(max(1, struct.calcsize("@" + codes)))
            self._own = (values, pointers_into(ctypes.addressof(values), codes))

    def __call__(self, stream: int, *values) -> None:
        if self._own is None:
            buffer = _launch_buffer
            self._pack(buffer.values, 0, *values)
            pointers = buffer.pointer_array(self.codes)
        else:
            own, (_, pointers) = self._own
            self._pack(own, 0, *values)
        if torch._C._cuda_getDevice() != self.device_index:  # the module is loaded in that device's context
            import cupy

            with cupy.cuda.Device(self.device_index):
                _driver_launch(self.function.ptr, self.dims, self.shared_mem, stream, pointers, self.cooperative)
        else:
            _driver_launch(self.function.ptr, self.dims, self.shared_mem, stream, pointers, self.cooperative)


PLANS_KEPT = 4096  # per-call-shape plans are small, but a sweep over many sizes should not grow a cache forever
_MISSING = object()


def cached_plan(cache: dict, key, make, *args):
    """``cache[key]``, made by ``make(*args)`` on a miss (an op's plan per call shape); the
    cache is emptied once it holds PLANS_KEPT plans."""
    plan = cache.get(key, _MISSING)
    if plan is _MISSING:
        plan = make(*args)
        if len(cache) >= PLANS_KEPT:
            cache.clear()
        cache[key] = plan
    return plan


_barriers: dict[tuple[int, int], torch.Tensor] = {}


_counters: dict[tuple[int, int], torch.Tensor] = {}


def _zeroed_per_stream(store: dict, index: int, stream: int, count: int) -> torch.Tensor:
    """At least ``count`` int32 words for the kernels on raw ``stream`` of device
    ``index``: zeroed once, one set per device and stream in ``store``, shared by those
    launches one after another (each leaves them as the next needs them). A set grows (a
    new one, zeroed) when a launch needs more."""
    words = store.get((index, stream))
    if words is None or words.numel() < count:
        words = store[index, stream] = torch.zeros(count, dtype=torch.int32, device=torch.device("cuda", index))
    return words


def stream_counters(index: int, stream: int, count: int) -> int:
    """Address of ``count`` uint32 counters for a kernel on ``stream`` that leaves them at 0
    (hard_fused's streamed resolve); see ``_zeroed_per_stream``."""
    return _zeroed_per_stream(_counters, index, stream, count).data_ptr()


def grid_barrier_address(index: int, stream: int) -> int:
    """Address of the uint32 count of a cooperative kernel's grid barrier (``grid_barrier``
    in _common.cuh), one per device ``index`` and raw ``stream``: launches on one stream
    run one after another, and each leaves the count's low bits at 0, so they can share it
    (zeroed once)."""
    return _zeroed_per_stream(_barriers, index, stream, 1).data_ptr()


def device_index(device: torch.device) -> int:
    """The CUDA device's index (torch's current device for a bare ``cuda``)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def _current_stream(device: torch.device) -> tuple[int, int]:
    """(device index, torch's current raw stream handle there); the raw handle because
    torch.cuda.current_stream builds a Python object per call."""
    index = device_index(device)
    return index, torch._C._cuda_getCurrentRawStream(index)


class Scratch:
    """Scratch buffers only kernels see, carved from one torch allocation (one allocator
    call instead of one per buffer). ``Scratch(device, name=(count, dtype), ...)``; each
    name becomes the buffer's device address (an ``Address``), a ``launch`` argument. The
    allocation lives as long as this object and, being torch's, is stream-ordered."""

    ALIGN = 256

    def __init__(self, device: torch.device, **buffers: tuple[int, torch.dtype]):
        self.layout, total = {}, 0
        for name, (count, dtype) in buffers.items():
            self.layout[name] = (total, count, dtype)
            size = count * dtype.itemsize
            total += -(-size // self.ALIGN) * self.ALIGN
        self.memory = torch.empty(max(total, 1), dtype=torch.uint8, device=device)
        base = self.memory.data_ptr()
        for name, (offset, _, _) in self.layout.items():
            setattr(self, name, Address(base + offset))

    def tensor(self, name: str) -> torch.Tensor:
        """Buffer ``name`` as a 1-D torch view (for tests and debugging)."""
        offset, count, dtype = self.layout[name]
        return self.memory[offset : offset + count * dtype.itemsize].view(dtype)


MERGE_CHUNK = 256  # keys per chunk of the merge rank (rank.cu), one per thread
RANK_MODULE = CudaModule("rank.cu", templates={"rank_by_score_kernel": "QQQiQQQQQ", "chunk_sort_kernel": "QiQ",
                                                  "group_merge_kernel": "iQQ", "merge_rank_kernel": "QQQiiQQQQQQ"},
                         defines={"MERGE_CHUNK": MERGE_CHUNK})
# From here up rank_by_score merges sorted chunks (three launches, O(N log N)) instead of
# counting (one launch, O(N^2)): where the merge became faster (results/PERFLOG.md).
MERGE_RANK_MIN = 8193


def _box_words(n: int, dtype: torch.dtype) -> int:
    """8-byte words that n boxes of ``dtype`` take (rounded up)."""
    return -(-4 * n * dtype.itemsize // 8)


RANK_PATHS = ("counting", "merge")  # rank_by_score's paths: one counting launch, or sorted chunks merged


def choose_rank_path(n: int, path: str | None = None) -> str:
    """The rank's path for n boxes: ``path`` if given (a ValueError naming the paths if it
    is none of them), else "merge" from MERGE_RANK_MIN boxes and "counting" below."""
    if path is None:
        return "merge" if n >= MERGE_RANK_MIN else "counting"
    if path not in RANK_PATHS:
        raise ValueError(f"rank_by_score: no path {path!r}; the paths are {', '.join(RANK_PATHS)}")
    return path


def _key_array_words(n: int, dtype: torch.dtype) -> int:
    """8-byte words of one of the merge rank's two key arrays (sorted chunks, sorted
    groups), the chunks padded to MERGE_CHUNK slots: the score key and the index packed in
    64 bits for float scores, 16 bytes (a 64-bit key, an int32 index) for double."""
    return blocks(n, MERGE_CHUNK) * MERGE_CHUNK * (2 if dtype == torch.float64 else 1)


@functools.lru_cache(maxsize=256)
def _ranked_offsets(n: int, dtype: torch.dtype, labels: bool) -> tuple[int, int, int, int]:
    """Byte offsets from ``into`` of the ranked boxes, the ranked labels (-1: none) and the
    merge's two key arrays, as ``rank_by_score(..., into=)`` lays them out (the order
    first, at 0)."""
    boxes_at = 8 * n
    labels_at = boxes_at + 8 * _box_words(n, dtype)
    keys_at = labels_at + (8 * n if labels else 0)
    return boxes_at, labels_at if labels else -1, keys_at, keys_at + 8 * _key_array_words(n, dtype)


@functools.lru_cache(maxsize=256)
def rank_scratch_words(n: int, dtype: torch.dtype, labels: bool, path: str | None = None) -> int:
    """8-byte words that ``rank_by_score(..., into=address)`` writes at ``address``: the
    order, the ranked boxes (input dtype), the ranked labels and, for the merge rank, its
    two key arrays (``_ranked_offsets``' layout)."""
    _, _, chunk_at, group_at = _ranked_offsets(n, dtype, labels)
    if choose_rank_path(n, path) == "merge":
        return group_at // 8 + _key_array_words(n, dtype)
    return chunk_at // 8


class _Ranked:
    """Addresses of rank_by_score's outputs in a caller's allocation (see ``into``)."""

    __slots__ = ("sorted_boxes", "sorted_scores", "sorted_labels", "chunk_sorted", "group_sorted")

    def __init__(self, address: int, n: int, dtype: torch.dtype, labels: bool):
        boxes_at, labels_at, chunk_at, group_at = _ranked_offsets(n, dtype, labels)
        self.sorted_boxes = Address(address + boxes_at)
        self.sorted_scores = None
        self.sorted_labels = Address(address + labels_at) if labels else None
        self.chunk_sorted = Address(address + chunk_at)
        self.group_sorted = Address(address + group_at)


def rank_by_score(launch, boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor | None,
                  with_scores: bool = False, into: int | None = None, path: str | None = None,
                  verdict: HostCount | None = None):
    """Rank the boxes on the device: descending score, ties by lower input index, NaN
    first, as ``torch.sort(descending=True, stable=True)`` does. Below ``MERGE_RANK_MIN``
    boxes one launch counts (rank.cu's rank_by_score_kernel); from there three launches
    sort chunks, merge groups of chunks, and merge the groups (chunk_sort_kernel,
    group_merge_kernel, merge_rank_kernel). ``path`` (one of RANK_PATHS) forces one
    (tests, probes).

    Returns ``(order, ranked)``: ``order`` (int64 tensor, input index of each rank) and
    ``ranked`` (a ``Scratch``) with ``sorted_boxes``, ``sorted_labels`` (None when ``labels``
    is None) and, with ``with_scores``, ``sorted_scores``, all in rank order and in the
    input dtype.
    With ``into`` (a device address with ``rank_scratch_words`` 8-byte words the caller
    owns, for the same ``path``; not with ``with_scores``) nothing is allocated:
    ``order`` is its address there and ``ranked`` holds the others' addresses.
    With ``verdict`` (from :func:`input_verdict`) the launch that reads every box also
    checks run_nms's value rules (:func:`raise_if_bad_input` reads the verdict).
    """
    n, device, dtype = boxes.shape[0], boxes.device, boxes.dtype
    path = choose_rank_path(n, path)
    if into is not None:
        if with_scores:
            raise ValueError("rank_by_score: into= does not take with_scores")
        order, scratch = Address(into), _Ranked(into, n, dtype, labels is not None)
    else:
        order = torch.empty(n, dtype=torch.int64, device=device)
        key_words = _key_array_words(n, dtype) if path == "merge" else 0
        scratch = Scratch(
            device, sorted_boxes=(4 * n, dtype), sorted_scores=(n if with_scores else 0, dtype),
            sorted_labels=(0 if labels is None else n, torch.int64),
            chunk_sorted=(key_words, torch.int64), group_sorted=(key_words, torch.int64),
        )
        if not with_scores:
            scratch.sorted_scores = None
        if labels is None:
            scratch.sorted_labels = None
    if labels is not None:
        labels = labels.to(torch.int64).contiguous()
    boxes, scores = boxes.contiguous(), scores.contiguous()
    rank_launches(n, dtype, path, device)(
        launch.stream, boxes.data_ptr(), scores.data_ptr(), _address(labels), _address(order),
        _address(scratch.sorted_boxes), _address(scratch.sorted_scores), _address(scratch.sorted_labels),
        _address(scratch.chunk_sorted), _address(scratch.group_sorted), 0 if verdict is None else verdict.address)
    return order, scratch


def _address(value) -> int:
    """A launch argument's address: a tensor's data pointer, an address as is, None as 0."""
    if value is None:
        return 0
    return value.data_ptr() if isinstance(value, torch.Tensor) else int(value)


class RankLaunches:
    """``rank_by_score``'s launches at one (n, dtype, path, device), prepared once
    (``rank_launches``): a call takes the raw stream and the addresses of the inputs
    (labels 0: none), the outputs (0: not wanted), for the merge its two key arrays, and
    the address of an ``input_verdict`` (0: no value check)."""

    __slots__ = ("n", "slots", "launches")

    def __init__(self, n: int, dtype: torch.dtype, path: str, device: torch.device):
        index = device_index(device)
        chunks = blocks(n, MERGE_CHUNK)
        self.n, self.slots = n, chunks * MERGE_CHUNK
        if path == "counting":
            self.launches = (CompiledLaunch(RANK_MODULE.get("rank_by_score_kernel", dtype, device),
                                            (blocks(n, COUNT_BOXES),), (32 * RANK_WARPS,),
                                            RANK_MODULE.codes["rank_by_score_kernel"], index),)
        else:
            self.launches = tuple(
                CompiledLaunch(RANK_MODULE.get(name, dtype, device), (chunks,), (MERGE_CHUNK,), RANK_MODULE.codes[name],
                               index)
                for name in ("chunk_sort_kernel", "group_merge_kernel", "merge_rank_kernel"))

    def __call__(self, stream: int, boxes: int, scores: int, labels: int, order: int, sorted_boxes: int,
                 sorted_scores: int, sorted_labels: int, chunk_sorted: int = 0, group_sorted: int = 0,
                 verdict: int = 0) -> None:
        outputs = (order, sorted_boxes, sorted_scores, sorted_labels, verdict)
        if len(self.launches) == 1:
            self.launches[0](stream, boxes, scores, labels, self.n, *outputs)
        else:
            chunk_sort, group_merge, merge_rank = self.launches
            chunk_sort(stream, scores, self.n, chunk_sorted)
            group_merge(stream, self.slots, chunk_sorted, group_sorted)
            merge_rank(stream, boxes, scores, labels, self.n, self.slots, group_sorted, *outputs)


@functools.lru_cache(maxsize=256)
def rank_launches(n: int, dtype: torch.dtype, path: str | None, device: torch.device) -> RankLaunches:
    """The ``RankLaunches`` for n boxes of ``dtype`` on ``device`` (path None: by n, as
    ``rank_by_score`` picks)."""
    return RankLaunches(n, dtype, choose_rank_path(n, path), device)


class HostCount:
    """A count that a kernel writes straight into pinned host memory, so the op learns it
    with one stream synchronization and no copy launch (``.item()`` costs a copy plus the
    synchronization). With unified addressing (every 64-bit CUDA platform) pinned host
    memory is mapped and its device address is its host address, so ``address`` is passed
    to the kernel as an ``long long*``."""

    # Reads of the count before the driver's wait (a bounded spin; see wait).
    SPIN_READS = 100_000

    def __init__(self):
        self.host = torch.full((1,), -1, dtype=torch.int64, pin_memory=True)
        self.address = Address(self.host.data_ptr())
        self.value = self.host.numpy()  # read through NumPy: indexing the tensor costs a tensor

    def wait(self, device: torch.device) -> int:
        """Wait for the work queued so far on ``device``'s current stream; the count.

        The thread first reads the count until the kernel has written it (it is -1 until
        then), then synchronizes the stream, which returns at once by then: the driver's
        wait alone, after long waits, left the thread's next host work slower
        (results/PERFLOG.md). The synchronization still decides: it waits for
        the kernels' completion and raises their errors, whatever the reads saw."""
        value = self.value
        for _ in range(self.SPIN_READS):
            if value[0] >= 0:
                break
        (_runtime or _runtime_api()).streamSynchronize(_current_stream(device)[1])
        count = int(value[0])
        value[0] = -1  # unset again for the next op
        return count


def kept_count(host: HostCount, device: torch.device, n: int, op: str) -> int:
    """``host.wait(device)``: the number of boxes an op of ``n`` boxes kept, which must lie
    in [0, n]. Anything else is an error rather than a result view that reaches past the
    kept entries."""
    kept = host.wait(device)
    if not 0 <= kept <= n:
        raise RuntimeError(f"{op}: the kernel reported {kept} kept boxes of {n}")
    return kept


_host_counts = threading.local()


def host_count(device: torch.device, slot: str = "kept") -> HostCount:
    """A ``HostCount`` for ``device``, one per thread, device and ``slot`` and reused: each
    op that uses it waits for the count before it returns, so no two calls share it at
    once. Values read in one call (an op's kept count, run_nms's input verdict) take
    different slots."""
    counts = getattr(_host_counts, "by_device", None)
    if counts is None:
        counts = _host_counts.by_device = {}
    key = (device_index(device), slot)
    count = counts.get(key)
    if count is None:
        count = counts[key] = HostCount()
    return count


def input_verdict(device: torch.device) -> HostCount:
    """run_nms's value verdict for an op whose own kernels check the rules
    (``checks_values`` backends; row_is_bad in _common.cuh): a pinned word set to 0 here,
    before the launch, that a kernel finding a bad row sets to 1. Read it with
    :func:`raise_if_bad_input` after the op has waited for the device."""
    verdict = host_count(device, "input verdict")
    verdict.value[0] = 0
    return verdict


def raise_if_bad_input(verdict: HostCount | None, boxes: torch.Tensor, scores: torch.Tensor, op: str) -> None:
    """After the op's wait: the reference ``ValueError`` where ``verdict`` (None: no
    check) says a row is bad."""
    if verdict is not None and verdict.value[0] != 0:
        from nmsbench.validation import report_bad_values

        report_bad_values(boxes, scores, f"{op}'s value check")


def blocks(n: int, per_block: int) -> int:
    """Blocks of ``per_block`` needed to cover ``n`` items (at least one)."""
    return max(1, (n + per_block - 1) // per_block)


# Dynamic shared memory a block may use without opting in to more (every CUDA GPU has 48 KiB).
MAX_SHARED_BYTES = 48 * 1024

_shared_limits: dict[tuple[int, int], int] = {}  # (kernel pointer, device index) -> dynamic shared bytes it may use


def opted_in_shared_limit(kernel, device: torch.device) -> int:
    """Opt ``kernel`` (a loaded ``Function``) in to the device's shared-memory limit (once)
    and return the dynamic shared bytes it may then use: the limit less its static shared
    memory (the driver refuses more); without opt-in, the default 48 KiB less it."""
    index = device_index(device)
    limit = _shared_limits.get((kernel.ptr, index))
    if limit is None:
        from cupy_backends.cuda.api import driver

        static = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.ptr)
        limit = torch.cuda.get_device_properties(index).shared_memory_per_block_optin - static
        try:
            driver.funcSetAttribute(kernel.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, limit)
        except driver.CUDADriverError:
            limit = MAX_SHARED_BYTES - static
        _shared_limits[kernel.ptr, index] = limit
    return limit



_resident: dict[tuple[int, int, int], int] = {}  # (kernel, threads, device index) -> blocks resident at once


def resident_blocks(kernel, threads: int, device: torch.device) -> int:
    """How many blocks of ``threads`` of ``kernel`` (a loaded ``Function``, no dynamic
    shared memory) the whole device holds at once, asked once: the most a cooperative
    launch of it may have (0: not even one)."""
    index = device_index(device)
    resident = _resident.get((kernel.ptr, threads, index))
    if resident is None:
        from cupy_backends.cuda.api import driver

        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, 0)
        resident = _resident[kernel.ptr, threads, index] = (
            per_sm * torch.cuda.get_device_properties(index).multi_processor_count)
    return resident
