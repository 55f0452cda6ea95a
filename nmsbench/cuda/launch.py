"""Launching our kernels on torch's current CUDA stream, the arguments packed by hand.

Tensors stay torch tensors: kernels receive raw device pointers, outputs are allocated
by torch (so torch's memory statistics see them), and every launch goes to torch's
current CUDA stream. A launch packs its arguments itself (``struct``, C alignment) and
calls ``cuLaunchKernel``: CuPy's ``Function.__call__`` costs host time per argument.
"""

from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import torch

from .compile import device_index


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


def _current_stream(device: torch.device) -> tuple[int, int]:
    """(device index, torch's current raw stream handle there); the raw handle because
    torch.cuda.current_stream builds a Python object per call."""
    index = device_index(device)
    return index, torch._C._cuda_getCurrentRawStream(index)



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


def multiprocessors(device: torch.device) -> int:
    """The device's SMs (torch caches its properties)."""
    return torch.cuda.get_device_properties(device_index(device)).multi_processor_count


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
        resident = _resident[kernel.ptr, threads, index] = per_sm * multiprocessors(device)
    return resident
