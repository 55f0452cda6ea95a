"""Every kernel's argument layout against its C signature, without a GPU.

A launch packs its arguments by struct codes ("Q" a pointer, "i" an int, "d" a double,
...); the kernel reads them by its C signature. A mismatch reads garbage on the GPU and
nothing on the CPU would notice, so both sides are checked here for every ``CudaModule``
in the tree (discovered, not listed): the layout each module declares for each kernel,
and what every kernel implementation's CUDA backend actually packs, launch by launch,
on every path it has (the driver stubbed, tensors on the CPU).
"""

from __future__ import annotations

import re
import sys

import pytest
import numpy as np
import torch

import nmsbench.cuda as _cuda
from nmsbench.cuda import compile as cuda_compile
from nmsbench.cuda import launch as cuda_launch
from nmsbench.cuda import memory as cuda_memory
from nmsbench.cuda.kernels import cuda_modules, kernel_implementations, variant_modules

MODULES = cuda_modules()

# C parameter types (pointers aside) -> struct codes, as _cuda.pack_arguments packs them
SCALAR_CODES = {"int": "i", "unsigned int": "I", "long long": "q", "unsigned long long": "Q", "double": "d",
                "float": "f"}


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside <> and ()."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def parameter_code(parameter: str) -> str:
    """The struct code of one C parameter declaration (its name dropped)."""
    if "*" in parameter:
        return "Q"
    words = [w for w in re.sub(r"\b(const|volatile|__restrict__)\b", " ", parameter).split()]
    ctype = " ".join(words[:-1])  # the last word is the parameter's name
    if ctype not in SCALAR_CODES:
        raise ValueError(f"no struct code for C parameter {parameter!r}")
    return SCALAR_CODES[ctype]


def c_signatures(source: str) -> dict[str, str]:
    """{kernel name: struct codes of its parameters} for every ``__global__`` function
    (templates and ``extern "C"`` ones) in a CUDA source."""
    signatures = {}
    for match in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(",
                             source):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        parameters = re.sub(r"//[^\n]*", "", source[match.end(): i - 1])
        signatures[match.group(1)] = "".join(parameter_code(p) for p in _split_top_level(parameters))
    return signatures


def test_the_signature_parser_reads_templates_launch_bounds_and_extern_c():
    source = """
    template <typename T>
    __global__ void __launch_bounds__(32 * WARPS, 1) a_kernel(const T* x, int n, double t,
                                                             Box<typename Arith<T>::type>* b, long long* out) {}
    extern "C" __global__ void b_kernel(const unsigned int* mask, unsigned long long key, float f) {}
    """
    assert c_signatures(source) == {"a_kernel": "QidQQ", "b_kernel": "QQf"}


def test_discovery_finds_every_cu_file_in_the_tree():
    """Every .cu file under implementations/ and the bridge's (nmsbench/cuda/) belongs to a
    discovered CudaModule."""
    files = {path.resolve() for root in (cuda_compile.variants_directory(), cuda_compile.HERE) for path in root.rglob("*.cu")}
    assert files == {module.path.resolve() for module in MODULES}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.cu_file)
def test_every_kernel_declares_the_layout_of_its_c_signature(module):
    """The codes a CudaModule declares per kernel (``templates``/``plain`` as dicts) are
    its C signature's, and every kernel of the module declares them."""
    signatures = c_signatures(module.source())
    for name in (*module.templates, *module.plain):
        assert name in signatures, f"{name} is not a __global__ function of {module.cu_file}"
        assert name in module.codes, f"{module.cu_file}: {name} declares no argument layout"
        assert module.codes[name] == signatures[name], (module.cu_file, name)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.cu_file)
def test_no_define_of_a_constant_the_host_passes(module):
    """A constant the host passes (``-D``) is not #defined again in the kernel source."""
    source = module.source()
    for name in module.defines:
        assert not re.search(rf"^\s*#define\s+{name}\b", source, flags=re.M), (module.cu_file, name)


# ------------------------------------------------------------------ what the backends pack

class FakeKernel:
    def __init__(self, module, name, ptr):
        self.module, self.name, self.ptr = module, name, ptr


class FakeCount:
    address = _cuda.Address(77)  # as HostCount.address: a pointer argument

    def __init__(self):
        self.value = np.zeros(1, dtype=np.int64)  # as HostCount.value: the word as the host reads it

    def wait(self, device):
        return 0


@pytest.fixture
def recorded(monkeypatch):
    """The CUDA side stubbed: each launch is recorded as (CudaModule, kernel, packed codes)."""
    kernels, records = {}, []

    def get(self, name, dtype, device):
        key = (id(self), name, dtype)
        if key not in kernels:
            kernels[key] = FakeKernel(self, name, 1000 + len(kernels))
        return kernels[key]

    by_ptr = lambda ptr: next(k for k in kernels.values() if k.ptr == ptr)  # noqa: E731

    def launch(function_ptr, grid, block, args, shared_mem, stream, cooperative=False):
        kernel = by_ptr(function_ptr)
        records.append((kernel.module, kernel.name, _cuda.pack_arguments(args)[0]))

    def compiled(self, stream, *values):
        assert len(values) == len(self.codes), (self.function.name, values)
        records.append((self.function.module, self.function.name, self.codes))

    monkeypatch.setattr(_cuda.CudaModule, "get", get)
    monkeypatch.setattr(cuda_launch, "_launch", launch)
    monkeypatch.setattr(_cuda.CompiledLaunch, "__call__", compiled)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: type("P", (), {"multi_processor_count": 132}))
    monkeypatch.setattr(torch, "empty", torch.zeros)  # the stubbed kernels write nothing: what a backend reads back is 0
    stubs = {
        "_current_stream": lambda device: (0, 5), "host_count": lambda device, slot="kept": FakeCount(),
        "grid_barrier_address": lambda index, stream: 4242, "stream_counters": lambda index, stream, count: 4343,
        "opted_in_shared_limit": lambda kernel, device: 227 * 1024, "mid_grid": lambda n, dtype, device, module=None: 1,
        "rounds_grid": lambda n, dtype, device: 4, "greedy_grid": lambda n, device: 4,
        "staged_resolve_fits": lambda n, device: n <= 1024, "cooperative_grid": lambda n, dtype, device, labels=False: 8,
        "_resident_blocks": lambda dtype, device, threads, shared: 132,
    }
    for module in [*variant_modules(), cuda_launch, cuda_memory]:
        for name, stub in stubs.items():
            if hasattr(module, name):
                monkeypatch.setattr(module, name, stub)
        for cache in ("_plans",):
            if isinstance(getattr(module, cache, None), dict):
                monkeypatch.setattr(module, cache, {})
    _cuda.rank_launches.cache_clear()
    yield records
    _cuda.rank_launches.cache_clear()


MATRIX_PARAMS = {"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05}


@pytest.mark.parametrize("name", kernel_implementations())
def test_every_launch_of_every_kernel_backend_packs_its_kernels_signature(recorded, name):
    """Each kernel implementation's CUDA backend, at sizes on each side of its limits, with
    labels and without, on every path of its table (``PATHS``, forced with ``path=``)
    eager and padded: every launch packs exactly its kernel's C signature."""
    import nmsbench

    impl = nmsbench.implementations()[name]
    backend = impl.backend("cuda")
    module = sys.modules[backend.fn.__module__]
    params = MATRIX_PARAMS if impl.family == "matrix" else impl.resolve_params({})
    calls = []
    for n in (5, 200, 1500, 9000):
        for labels in (None, torch.zeros(n, dtype=torch.int64)):
            boxes, scores = torch.rand(n, 4), torch.rand(n)
            paddings = (False, True) if backend.graph_safe else (False,)
            for path in getattr(module, "PATHS", {None: None}):
                for padded in paddings:
                    extra = {"padded": True} if padded else {}
                    if path is not None:
                        try:
                            module.check_path(path, n, torch.float32, padded, boxes.device, labels is not None)
                        except ValueError:
                            continue
                        extra["path"] = path
                    calls.append((n, path, padded))
                    backend.fn(boxes, scores, iou_threshold=0.5, labels=labels, **params, **extra)
    assert recorded, f"{name} launched nothing"
    signatures = {}
    for cuda_module, kernel, codes in recorded:
        if cuda_module.cu_file not in signatures:
            signatures[cuda_module.cu_file] = c_signatures(cuda_module.source())
        assert codes == signatures[cuda_module.cu_file][kernel], (name, cuda_module.cu_file, kernel)
    if hasattr(module, "PATHS"):  # every path ran at some size
        assert {path for _, path, _ in calls} == set(module.PATHS)


def test_the_overlap_graphs_launches_pack_their_kernels_signatures(recorded):
    """overlap_graph.py's launches: the layout and its density estimate, the cells and the
    cell order, the rows, the greedy rounds and the Matrix decay pack their kernels' C
    signatures."""
    from nmsbench.variants import overlap_graph

    for labels in (None, torch.zeros(300, dtype=torch.int64)):
        boxes = torch.rand(300, 4) * 100
        boxes[:, 2:] += boxes[:, :2]
        overlap_graph.greedy_on_graph(boxes, torch.rand(300), 0.5, labels, max_tests=10**9)
        overlap_graph.matrix_on_graph(boxes, torch.rand(300), labels, kernel="linear", sigma=0.5, score_threshold=0.05)
        layout, _ = overlap_graph._torch_layout(boxes, 0)
        overlap_graph._cuda_layout(boxes, 300)
        overlap_graph._cuda_cells(boxes, torch.arange(300), layout)
        overlap_graph._cuda_cell_order(boxes, torch.arange(300), labels, torch.arange(300))
    signatures = c_signatures(overlap_graph.CUDA_MODULE.source())
    assert {kernel for _, kernel, _ in recorded} == {
        "graph_rows_kernel", "greedy_rounds_kernel", "graph_decay_kernel", "grid_extent_kernel", "grid_classes_kernel",
        "grid_table_kernel", "sampled_tests_kernel", "grid_cells_kernel", "cell_order_kernel"}
    for _, kernel, codes in recorded:
        assert codes == signatures[kernel], kernel
