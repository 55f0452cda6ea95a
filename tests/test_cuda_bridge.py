"""The CPU-side pieces of the CUDA backends: what runs without a GPU is tested here."""

from __future__ import annotations

import ctypes
import re
import struct

import numpy as np
import pytest
import torch

import nmsbench
import nmsbench.cuda as _cuda
from nmsbench.cuda import compile as cuda_compile
from nmsbench.cuda import launch as cuda_launch
from nmsbench.cuda import memory as cuda_memory
from nmsbench.cuda import rank as cuda_rank
from nmsbench.cuda.kernels import cuda_modules
from nmsbench.variants import bitmask_two_phase, hard_fused, matrix_recompute

MODULES = cuda_modules()  # the bridge's CudaModules and every variant module's (a new .cu is tested without a list)


def test_discovery_finds_the_shared_rank_and_the_packages_modules():
    files = {module.cu_file for module in MODULES}
    assert {"rank.cu", "hard_fused/hard_fused.cu", "matrix_recompute/matrix_recompute.cu"} <= files
    assert _cuda.RANK_MODULE in MODULES and hard_fused.CUDA_MODULE in MODULES


def test_kernel_sources_ship_beside_their_wrappers():
    assert cuda_compile.COMMON_HEADER.is_file()
    for module in MODULES:
        source = module.path.read_text()
        for expression in module.expressions:
            assert expression.split("<")[0] in source, f"{expression} not defined in {module.cu_file}"


def test_template_kernels_are_instantiated_for_every_input_dtype():
    assert bitmask_two_phase.CUDA_MODULE.expressions == [
        "ballot_mask_kernel<float>", "ballot_mask_kernel<double>", "ballot_mask_kernel<unsigned short>",
        "greedy_resolve_kernel",
    ]
    assert set(_cuda.CUDA_DTYPES) == {torch.float32, torch.float64, torch.float16}


def compiled(module, arch: str):
    """``module.compile(arch)``, skipping the test where cupy or its NVRTC cannot load here
    (a CompileError, the kernels' own fault, still fails it)."""
    pytest.importorskip("cupy", reason="needs cupy")
    try:
        return module.compile(arch)
    except _cuda.CompileError:
        raise
    except Exception as error:  # cupy without a loadable libnvrtc
        pytest.skip(f"NVRTC not usable here: {error}")


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.cu_file)
def test_kernels_compile_with_nvrtc_without_a_gpu(module):
    """NVRTC needs no GPU: compile every kernel instantiation here exactly as the GPU
    machine will (for an H200, sm_90), so a compile error shows in CI, not only there."""
    cubin, names = compiled(module, "sm_90")
    assert cubin[:4] == b"\x7fELF" and set(names) == set(module.expressions)
    assert all(name.startswith("_Z") or name in module.expressions for name in names.values())


def probe_module(monkeypatch):
    """A module with a probe's variant (a tunable) that its kernels do not read, declared
    for this test only."""
    monkeypatch.setattr(cuda_compile, "DECLARED_TUNABLES", {})
    return _cuda.CudaModule(MODULES[0].cu_file, templates=MODULES[0].templates, plain=MODULES[0].plain,
                            defines=MODULES[0].defines, tunables={"PROBE_VARIANT": 0}, directory=MODULES[0].directory)


def test_a_tunable_variant_reaches_nvrtc_and_compiles(monkeypatch):
    """A probe's kernel variant (NMSBENCH_CUDA_TUNABLES) reaches NVRTC as its -D and the
    module compiles with it; the default is what the product runs, and a module that does
    not declare the tunable is compiled as it was."""
    module = probe_module(monkeypatch)
    assert "-DPROBE_VARIANT=0" in module.options("sm_90")
    monkeypatch.setenv("NMSBENCH_CUDA_TUNABLES", "PROBE_VARIANT=1")
    assert "-DPROBE_VARIANT=1" in module.options("sm_90")
    assert not any("PROBE_VARIANT" in option for option in MODULES[0].options("sm_90"))
    cubin, names = compiled(module, "sm_90")
    assert cubin[:4] == b"\x7fELF" and set(names) == set(module.expressions)


def test_tunables_outside_the_declared_ones_are_refused(monkeypatch):
    probe_module(monkeypatch)
    for text in ("NO_SUCH_TUNABLE=1", "PROBE_VARIANT", "PROBE_VARIANT=fast"):
        monkeypatch.setenv("NMSBENCH_CUDA_TUNABLES", text)
        with pytest.raises(ValueError, match="NMSBENCH_CUDA_TUNABLES: .* is not NAME=integer for a tunable; "
                                             "the tunables are PROBE_VARIANT"):
            _cuda.tunable_overrides()
    monkeypatch.setenv("NMSBENCH_CUDA_TUNABLES", " PROBE_VARIANT = 1 ,")
    assert _cuda.tunable_overrides() == {"PROBE_VARIANT": 1}
    assert _cuda.tunable_overrides({}) == {}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.cu_file)
def test_no_float_instruction_flushes_subnormals(module):
    """CuPy's RawModule would append -ftz=true, flushing subnormal scores and IoUs to 0
    (a GPU run once ranked score 4e-42 level with 0.0). We compile with NVRTC ourselves:
    the PTX must hold no .ftz instruction."""
    ptx, _ = compiled(module, "compute_90")
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert ".f32" in text or ".f64" in text
    assert ".ftz" not in text


def test_kernel_arguments_pack_as_the_kernel_reads_them():
    t = torch.zeros(3)
    codes, values = _cuda.pack_arguments((t, None, True, 7, np.float64(0.5), np.uint64(2**63 + 5), np.int64(-3),
                                          np.float32(1.5), np.uint32(9), np.int32(-4)))
    assert codes == "QQiidQqfIi"
    assert values[:4] == [t.data_ptr(), 0, 1, 7]
    # every value lands at its C-aligned offset, where the pointer array points
    buffer = cuda_launch._LaunchBuffer()
    pointers = (ctypes.c_void_p * len(codes)).from_address(buffer.pointer_array(codes))
    assert [p - buffer.address for p in pointers] == [0, 8, 16, 20, 24, 32, 40, 48, 52, 56]
    struct.pack_into("@" + codes, buffer.values, 0, *values)
    read = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32, ctypes.c_double, ctypes.c_uint64,
            ctypes.c_int64, ctypes.c_float, ctypes.c_uint32, ctypes.c_int32]
    assert [kind.from_address(p).value for kind, p in zip(read, pointers)] == \
        [t.data_ptr(), 0, 1, 7, 0.5, 2**63 + 5, -3, 1.5, 9, -4]
    assert buffer.pointer_array(codes) == buffer.pointer_array(codes)  # built once per layout


def test_an_address_is_an_eight_byte_pointer_even_above_int32():
    """``Address`` (the ops' device addresses) packs as a pointer ("Q"), not as the int32
    a plain Python int becomes, and keeps its full 64-bit value."""
    codes, values = _cuda.pack_arguments((_cuda.Address(2**40 + 8), 3, _cuda.Address(0)))
    assert codes == "QiQ" and values == [2**40 + 8, 3, 0]


def test_kernel_arguments_that_cannot_be_passed_are_refused():
    with pytest.raises(OverflowError, match="int32"):
        _cuda.pack_arguments((2**31,))
    with pytest.raises(TypeError, match="unsupported kernel argument type float"):
        _cuda.pack_arguments((0.5,))
    with pytest.raises(ValueError, match="above 4096"):
        cuda_launch._LaunchBuffer().pointer_array("Q" * 513)


def test_blocks():
    assert [_cuda.blocks(n, 16) for n in (0, 1, 16, 17)] == [1, 1, 1, 2]


def test_scratch_buffers_are_aligned_disjoint_and_in_one_allocation():
    scratch = _cuda.Scratch(torch.device("cpu"), a=(3, torch.float32), b=(0, torch.int64), c=(100, torch.float64))
    base = scratch.memory.data_ptr()
    assert [int(scratch.a) - base, int(scratch.b) - base, int(scratch.c) - base] == [0, 256, 256]
    assert all(isinstance(address, _cuda.Address) for address in (scratch.a, scratch.b, scratch.c))
    assert scratch.memory.numel() >= 256 + 800 and scratch.memory.dtype == torch.uint8
    scratch.tensor("c")[:] = 2.5
    assert scratch.tensor("c").dtype == torch.float64 and scratch.tensor("c").tolist() == [2.5] * 100
    assert scratch.tensor("a").shape == (3,) and scratch.tensor("b").shape == (0,)
    assert _cuda.Scratch(torch.device("cpu")).memory.numel() == 1  # nothing asked: still a valid allocation


def test_cuda_backends_are_listed_with_a_reason_when_unavailable():
    rows = {(r["name"], r["device"]): r for r in nmsbench.registry.describe()}
    from nmsbench.cuda.kernels import kernel_implementations

    for name in kernel_implementations():  # every backend of ours, found in the registry
        row = rows[(name, "cuda")]
        assert row["requires"] == ["cupy"] and row["host_sync"]
        assert row["dtypes"] == ["float32", "float64", "float16"]
        if not torch.cuda.is_available():
            assert not row["available"] and row["reason"] in ("no CUDA device", "cupy not installed")


def ptxas_report(module: _cuda.CudaModule) -> str:
    """ptxas' verbose report (registers, spills) of every kernel of ``module`` for sm_90,
    compiled by NVRTC as the bridge does: no GPU needed."""
    from cupy.cuda import nvrtc

    program = nvrtc.createProgram(module.source(), module.cu_file, [], [])
    try:
        for expression in module.expressions:
            nvrtc.addNameExpression(program, expression)
        nvrtc.compileProgram(program, [*module.options("sm_90"), "--ptxas-options=-v"])
        return nvrtc.getProgramLog(program)
    finally:
        nvrtc.destroyProgram(program)


def test_hard_fused_kernels_fit_their_block_sizes_in_the_register_file():
    """A kernel whose registers x threads exceed the 64K-register file fails to launch
    (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES): caught here with ptxas' report, without a GPU."""
    log = ptxas_report(hard_fused.CUDA_MODULE)
    registers = {}
    for entry, used in re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, flags=re.S):
        registers[entry] = max(registers.get(entry, 0), int(used))
    defines = hard_fused.DEFINES  # the block sizes the kernels are compiled with
    threads = {"small_nms_kernel": defines["SMALL_THREADS"], "block_resolve_kernel": defines["RESOLVE_THREADS"],
               "tile_mask_kernel": 32 * defines["TILE_WARPS"], "staged_resolve_kernel": defines["STAGED_THREADS"],
               "mid_nms_kernel": defines["MID_THREADS"]}
    checked = 0
    for entry, used in registers.items():
        for name, block in threads.items():
            if name in entry:
                assert used * block <= 65536, f"{entry}: {used} registers x {block} threads"
                checked += 1
    assert checked >= 4 and any("staged_resolve_kernel" in entry for entry in registers)


@pytest.mark.parametrize("module", [hard_fused.CUDA_MODULE, matrix_recompute.CUDA_MODULE], ids=lambda m: m.cu_file)
def test_our_kernels_do_not_spill_registers(module):
    """ptxas picks a register budget from __launch_bounds__ (without a minimum of blocks it
    may aim at two blocks per SM, and spill: block_resolve_kernel went from 100 registers
    to 64 plus 120 bytes of spills, twice as slow on the H200). Checked without a GPU."""
    log = ptxas_report(module)
    spills = re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores", log, flags=re.S)
    assert len(spills) >= len(module.expressions)
    assert [entry for entry, stored in spills if int(stored)] == []


def test_host_count_is_one_per_thread_and_device(monkeypatch):
    """The kernel-written count is reused within a thread and device, never shared across them."""
    import threading

    monkeypatch.setattr(cuda_memory, "HostCount", lambda: object())  # pinned memory needs CUDA
    monkeypatch.setattr(cuda_memory, "_host_counts", threading.local())
    first = _cuda.host_count(torch.device("cuda", 0))
    assert _cuda.host_count(torch.device("cuda", 0)) is first
    assert _cuda.host_count(torch.device("cuda", 1)) is not first
    other = []
    worker = threading.Thread(target=lambda: other.append(_cuda.host_count(torch.device("cuda", 0))))
    worker.start(), worker.join()
    assert other[0] is not first


@pytest.mark.parametrize("written", [True, False])
def test_host_count_wait_synchronizes_whatever_it_read_and_unsets_the_count(monkeypatch, written):
    """HostCount.wait reads the count until a kernel has written it (or its reads run
    out), then synchronizes the stream all the same (completion and errors come from
    there), returns the count as the synchronization left it and sets it back to -1."""
    from cupy_backends.cuda.api import runtime

    count = object.__new__(_cuda.HostCount)
    count.value = np.array([-1], dtype=np.int64)
    synchronized = []

    def synchronize(stream):  # the stream's kernel finishes: the count is 42 by then
        synchronized.append(stream)
        count.value[0] = 42

    if written:
        count.value[0] = 42
    monkeypatch.setattr(runtime, "streamSynchronize", synchronize)
    monkeypatch.setattr(cuda_memory, "_current_stream", lambda device: (0, 1234))
    monkeypatch.setattr(_cuda.HostCount, "SPIN_READS", 50)
    assert count.wait(torch.device("cuda", 0)) == 42
    assert synchronized == [1234] and count.value[0] == -1


def test_hard_fused_block_resolve_fits_shared_memory_up_to_its_limit_and_refuses_more():
    """The block resolve keeps two rounds of staged rows (~40 KiB) beside the N / 8-byte
    bitmap: at the largest N hard_fused takes that is ~88 KiB, within what a block may opt
    in to on every GPU from sm_80 (99 KiB on sm_86 and sm_89, 227 KiB on the H200). One
    box more is refused before any CUDA call, with the limit in the message."""
    host = hard_fused.cuda  # the host side
    assert host.block_resolve_shared_bytes(host.MAX_WORDS) <= 99 * 1024
    assert host.block_resolve_shared_bytes(2) - host.block_resolve_shared_bytes(1) == 4
    n = host.MAX_WORDS * 32 + 1
    with pytest.raises(ValueError, match=f"above its limit of {n - 1}"):
        hard_fused.hard_fused_cuda(torch.zeros((n, 4)), torch.zeros(n), iou_threshold=0.5)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.cu_file)
def test_kernel_lookup_names_the_compiled_expressions(module):
    """CudaModule.get finds a kernel by (name, dtype) in a table built once: every entry
    names an expression NVRTC compiled, and every compiled expression has an entry."""
    assert sorted(module._expression.values()) == sorted(module.expressions)
    for (name, dtype), expression in module._expression.items():
        assert expression == (name if dtype is None else f"{name}<{_cuda.SOURCE_TYPES[dtype]}>")


def test_rank_path_is_counting_below_the_merge_size_and_refuses_unknown_names():
    """rank_by_score counts below MERGE_RANK_MIN and merges from there (its scratch grows by
    two padded key arrays, 16 bytes a slot for float32); a path it does not know is a
    ValueError naming the paths, before any launch."""
    n = _cuda.MERGE_RANK_MIN
    assert _cuda.choose_rank_path(n - 1) == "counting" and _cuda.choose_rank_path(n) == "merge"
    assert tuple(_cuda.RANK_PATHS) == ("counting", "merge")
    plain = _cuda.rank_scratch_words(n, torch.float32, False, path="counting")
    slots = -(-n // cuda_rank.MERGE_CHUNK) * cuda_rank.MERGE_CHUNK
    assert _cuda.rank_scratch_words(n, torch.float32, False) == plain + 2 * slots
    with pytest.raises(ValueError, match="no path 'bitonic'; the paths are counting, merge"):
        _cuda.rank_by_score(None, torch.zeros((3, 4)), torch.zeros(3), None, path="bitonic")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("labels", [False, True])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 8192, 8193, 20000])
def test_rank_layout_fits_the_words_a_caller_gives_it(n, dtype, labels):
    """``rank_by_score(..., into=)`` writes the order, the ranked boxes and labels and (from
    MERGE_RANK_MIN on) the merge's two key arrays one after another, 8-byte aligned, and all
    of them within ``rank_scratch_words`` words: the key arrays hold MERGE_CHUNK-padded
    slots of 8 bytes (float scores) or 16 (float64)."""
    boxes_at, labels_at, chunk_at, group_at = _cuda._ranked_offsets(n, dtype, labels)
    box_bytes = 4 * n * dtype.itemsize
    assert boxes_at == 8 * n and all(offset % 8 == 0 for offset in (boxes_at, chunk_at, group_at))
    assert labels_at == (-(-(boxes_at + box_bytes) // 8) * 8 if labels else -1)
    assert chunk_at == (labels_at + 8 * n if labels else -(-(boxes_at + box_bytes) // 8) * 8)
    slots = -(-n // cuda_rank.MERGE_CHUNK) * cuda_rank.MERGE_CHUNK
    key_bytes = slots * (16 if dtype == torch.float64 else 8)
    assert group_at == chunk_at + key_bytes
    words = _cuda.rank_scratch_words(n, dtype, labels)
    merging = n >= _cuda.MERGE_RANK_MIN
    assert 8 * words == (group_at + key_bytes if merging else chunk_at)


def test_lineinfo_for_a_profiler_only_when_asked(monkeypatch):
    """NMSBENCH_NVRTC_LINEINFO=1 adds -lineinfo to NVRTC's options (source lines for Nsight
    Compute), and nothing else changes; without it the options have none."""
    from nmsbench.variants import soft_rounds

    monkeypatch.delenv("NMSBENCH_NVRTC_LINEINFO", raising=False)
    plain = soft_rounds.CUDA_MODULE.options("sm_90")
    assert "-lineinfo" not in plain
    monkeypatch.setenv("NMSBENCH_NVRTC_LINEINFO", "1")
    with_lines = soft_rounds.CUDA_MODULE.options("sm_90")
    assert [option for option in with_lines if option != "-lineinfo"] == plain and "-lineinfo" in with_lines
