"""The eager host path of hard_fused and matrix_recompute, without a GPU: the driver and
the kernels are stubbed (launches are recorded, the count comes from the test), tensors
stay on the CPU. What is checked is the host's side of the contract: which kernel runs
at which size, that ``CompiledLaunch`` hands the driver what the kernel reads, that every
address a launch gets lies in the op's one allocation, and that the result is exactly the
first ``count`` entries of it."""

from __future__ import annotations

import contextlib
import ctypes

import pytest
import torch

import nmsbench.cuda as _cuda
from nmsbench.cuda import launch as cuda_launch
from nmsbench.cuda import memory as cuda_memory
from nmsbench.variants import weighted_nms
from nmsbench.variants.hard_fused import cuda as hf  # the host sides, where the stubs go
from nmsbench.variants.matrix_recompute import cuda as mr


class FakeKernel:
    made = 0

    def __init__(self, name):
        FakeKernel.made += 1
        self.name, self.ptr = name, 1000 + FakeKernel.made  # one pointer per kernel


class FakeDriver:
    """Records each launch: (kernel pointer, grid and block dims, shared bytes, stream,
    cooperative) and its arguments as the driver copies them at the call: the pointer
    array and a snapshot of the parameter buffer it points into (the next launch reuses it)."""

    def __init__(self):
        self.launches = []

    def _record(self, call, pointers):
        buffer = cuda_launch._launch_buffer
        self.launches.append((call, (pointers, buffer.address, ctypes.string_at(buffer.address, _cuda.PARAM_BYTES))))

    def launchKernel(self, ptr, gx, gy, gz, bx, by, bz, shared, stream, pointers, extra):  # noqa: N802 (cupy's name)
        self._record((ptr, gx, gy, gz, bx, by, bz, shared, stream, False), pointers)

    def launchCooperativeKernel(self, ptr, gx, gy, gz, bx, by, bz, shared, stream, pointers):  # noqa: N802
        self._record((ptr, gx, gy, gz, bx, by, bz, shared, stream, True), pointers)


class FakeCount:
    address = 77

    def __init__(self):
        self.count = 0

    def wait(self, device):
        return self.count


READ = {"Q": ctypes.c_uint64, "q": ctypes.c_int64, "i": ctypes.c_int32, "d": ctypes.c_double, "f": ctypes.c_float}


def read_arguments(codes: str, recorded) -> list:
    """The values the kernel would read: each argument where the pointer array points, in
    the parameter buffer as it was at the launch."""
    pointers, buffer_address, snapshot = recorded
    addresses = (ctypes.c_void_p * len(codes)).from_address(pointers)
    copy = ctypes.create_string_buffer(snapshot, len(snapshot))
    return [READ[code].from_address(ctypes.addressof(copy) + address - buffer_address).value
            for code, address in zip(codes, addresses)]


@pytest.fixture
def stubbed(monkeypatch):
    """Kernels by name, a recording driver, one resident grid of every size, stream 5."""
    driver, count = FakeDriver(), FakeCount()
    kernels = {}
    monkeypatch.setattr(_cuda.CudaModule, "get", lambda self, name, dtype, device: kernels.setdefault(
        (name, dtype), FakeKernel(name)))
    monkeypatch.setattr(cuda_launch, "_driver", driver)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: type("P", (), {"multi_processor_count": 132}))
    allocations = []

    def empty(*args, **kwargs):  # zeroed: the stubbed kernels write nothing, so what a backend reads back is 0
        kwargs.pop("device", None)
        tensor = torch.zeros(*args, **kwargs)
        allocations.append(tensor)
        return tensor

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(hf, "stream_counters", lambda index, stream, count: 4343)
    for module in (hf, mr):
        monkeypatch.setattr(module, "_current_stream", lambda device: (0, 5))
        monkeypatch.setattr(module, "host_count", lambda device: count)
        monkeypatch.setattr(module, "grid_barrier_address", lambda index, stream: 4242)
        monkeypatch.setattr(module, "opted_in_shared_limit", lambda kernel, device: 227 * 1024)
    monkeypatch.setattr(hf, "mid_grid", lambda n, dtype, device, module=None: _cuda.blocks(n, hf.MID_THREADS // 32))
    monkeypatch.setattr(hf, "staged_resolve_fits", lambda n, device: n <= 1024)
    monkeypatch.setattr(mr, "cooperative_grid", lambda n, dtype, device, labels=False: _cuda.blocks(n, 8))
    monkeypatch.setattr(mr, "_resident_blocks", lambda dtype, device, threads, shared: 132 if shared <= 227 * 1024 else 0)
    monkeypatch.setattr(hf, "_plans", {})
    monkeypatch.setattr(mr, "_plans", {})
    monkeypatch.setattr(weighted_nms, "_merges", {})
    _cuda.rank_launches.cache_clear()
    yield driver, count, kernels, allocations
    _cuda.rank_launches.cache_clear()


def launched(driver, kernels) -> list[str]:
    by_ptr = {kernel.ptr: name for (name, _), kernel in kernels.items()}
    return [by_ptr[call[0]] for call, _ in driver.launches]


def inside(address: int, tensor: torch.Tensor) -> bool:
    base = tensor.data_ptr()
    return base <= address < base + tensor.numel() * tensor.element_size()


@pytest.mark.parametrize("n, padded, kernels", [
    (1, False, ["small_nms_kernel"]),
    (hf.ONE_BLOCK_MAX_N, False, ["small_nms_kernel"]),
    (hf.ONE_BLOCK_MAX_N + 1, False, ["mid_nms_kernel"]),
    (hf.ONE_BLOCK_MAX_N + 1, True, ["rank_by_score_kernel", "tile_mask_kernel", "staged_resolve_kernel"]),
    (1024, False, ["mid_nms_kernel"]),
    (1025, False, ["rank_by_score_kernel", "streamed_resolve_kernel"]),
    (1025, True, ["rank_by_score_kernel", "streamed_resolve_kernel"]),
    (hf.STREAMED_MAX_N, False, ["rank_by_score_kernel", "streamed_resolve_kernel"]),
    (hf.STREAMED_MAX_N + 1, False, ["chunk_sort_kernel", "group_merge_kernel", "merge_rank_kernel",
                                    "tile_mask_kernel", "block_resolve_kernel"]),
])
def test_hard_fused_takes_its_kernels_by_size(stubbed, n, padded, kernels):
    """One block up to ONE_BLOCK_MAX_N (the kernel itself takes up to ONE_BLOCK_CAPACITY),
    one cooperative launch for eager calls to COOPERATIVE_MAX_N, else rank (counting, or merging from
    MERGE_RANK_MIN), then the tile mask and the staged resolve (to 1024 boxes), the
    streamed resolve (mask and resolve in one launch, to STREAMED_MAX_N) or the tile mask
    and the block resolve; every address a kernel gets but the
    inputs, the pinned count, the barrier and the stream's counters lies in the op's one
    allocation."""
    driver, count, known, allocations = stubbed
    boxes, scores = torch.rand(n, 4), torch.rand(n)
    count.count = min(n, 3)
    result = hf.hard_fused_cuda(boxes, scores, iou_threshold=0.5, padded=padded)
    assert launched(driver, known) == kernels
    assert hf.ONE_BLOCK_MAX_N <= hf.ONE_BLOCK_CAPACITY
    [memory] = allocations
    plan = hf.plan_for(n, torch.float32, False, padded, torch.device("cpu"))
    assert memory.numel() == plan.memory_words
    for (call, pointers), name in zip(driver.launches, kernels):
        assert call[8] == 5  # torch's current stream
        launch = next(x for x in _launches_of(plan) if x.function is known[(name, l_dtype(name))])
        for code, value in zip(launch.codes, read_arguments(launch.codes, pointers)):
            if code == "Q" and value not in (0, 77, 4242, 4343, boxes.data_ptr(), scores.data_ptr()):
                assert inside(value, memory), (name, value)
    if padded:
        assert result.keep.shape == (n,) and result.keep.data_ptr() == memory.data_ptr()
    else:
        assert result.keep.shape == (count.count,) and result.keep.data_ptr() == memory.data_ptr()


def l_dtype(name: str):
    return None if name in ("staged_resolve_kernel", "block_resolve_kernel") else torch.float32


def _launches_of(plan) -> list:
    return list(plan.launches) + (list(plan.rank.launches) if plan.rank is not None else [])


@pytest.mark.parametrize("n, keep_kernels", [(4, ["small_nms_kernel"]), (200, ["mid_nms_kernel"]),
                                           (1025, ["rank_by_score_kernel", "streamed_resolve_kernel"])])
@pytest.mark.parametrize("labels", [False, True])
def test_weighted_nms_queues_its_merge_behind_the_keep_and_waits_once(stubbed, monkeypatch, n, keep_kernels, labels):
    """weighted_nms on CUDA: hard_fused's keep, then merge_kernel on the same stream with a
    warp for each of the n boxes the keep may keep, reading the keep's indices and its
    count where the keep writes them (the op's allocation), writing into the returned
    boxes; the host waits once, after both launches, and shortens both results to the count."""
    driver, count, known, allocations = stubbed
    waits = []
    real_wait = count.wait
    monkeypatch.setattr(count, "wait", lambda device: waits.append(len(driver.launches)) or real_wait(device))
    boxes, scores = torch.rand(n, 4), torch.rand(n)
    label_tensor = torch.randint(0, 3, (n,)) if labels else None
    count.count = min(n, 3)
    result = weighted_nms.weighted_nms_cuda(boxes, scores, iou_threshold=0.5, labels=label_tensor)
    assert launched(driver, known) == keep_kernels + ["merge_kernel"]
    assert waits == [len(keep_kernels) + 1]  # one wait, after the merge's launch
    memory, moved = allocations[0], allocations[-1]
    call, recorded = driver.launches[-1]
    assert call[8] == 5 and call[1] * weighted_nms.MERGE_WARPS >= n and call[4] == 32 * weighted_nms.MERGE_WARPS
    args = read_arguments(weighted_nms.CUDA_MODULE.codes["merge_kernel"], recorded)
    assert args[0] == boxes.data_ptr() and args[1] == scores.data_ptr() and args[3] == n and args[4] == 0.5
    assert (args[2] != 0) == labels
    assert args[5] == memory.data_ptr() and args[6] == memory.data_ptr() + 8 * n  # keep, then its count
    assert args[7] == moved.data_ptr() and moved.shape == (n, 4) and moved.dtype == boxes.dtype
    assert result.keep.shape == (count.count,) and result.boxes.shape == (count.count, 4)
    assert result.boxes.data_ptr() == moved.data_ptr()


def test_hard_fused_refuses_a_count_above_n(stubbed):
    """A kernel that reported more kept boxes than there are is an error, not a view
    grown past the kept entries."""
    _, count, _, _ = stubbed
    count.count = 5
    with pytest.raises(RuntimeError, match="5 kept boxes of 4"):
        hf.hard_fused_cuda(torch.rand(4, 4), torch.rand(4), iou_threshold=0.5)


@pytest.mark.parametrize("n, path", [(4, None), (200, None), (200, "counting_passes")])  # one_block, cooperative
def test_matrix_recompute_refuses_a_count_above_n(stubbed, monkeypatch, n, path):
    """The same on matrix_recompute's one-launch paths and on its multi-launch ones."""
    _, count, _, _ = stubbed
    count.count = n + 1
    monkeypatch.setattr(mr, "on_torch_stream", lambda device: contextlib.nullcontext(lambda *args, **kwargs: None))
    with pytest.raises(RuntimeError, match=f"{n + 1} kept boxes of {n}"):
        mr.matrix_recompute_cuda(torch.rand(n, 4), torch.rand(n), iou_threshold=0.5, kernel="gaussian", sigma=2.0,
                                 score_threshold=0.05, path=path)


def test_compiled_launch_hands_the_driver_the_packed_arguments(stubbed):
    """CompiledLaunch packs plain numbers in the kernel's C layout (each argument where
    the pointer array points) and calls the driver with its grid, block, shared memory,
    the stream and cooperative or not: what ``launch`` does from tensors and Addresses."""
    driver, _, _, _ = stubbed
    kernel = FakeKernel("k")
    values = (2**40 + 8, 0, 7, -3, 0.1)
    for cooperative in (False, True):
        launch = _cuda.CompiledLaunch(kernel, (3, 2), (128,), "QQiid", 0, shared_mem=100, cooperative=cooperative)
        launch(9, *values)
        call, pointers = driver.launches[-1]
        assert call == (kernel.ptr, 3, 2, 1, 128, 1, 1, 100, 9, cooperative)
        assert read_arguments("QQiid", pointers) == list(values)
    with pytest.raises(ValueError, match="above 4096"):
        _cuda.CompiledLaunch(kernel, (1,), (1,), "Q" * 513, 0)


@pytest.mark.parametrize("n, padded, path", [(1, False, "one_block"), (mr.ONE_BLOCK_MAX_N, False, "one_block"),
                                             (mr.ONE_BLOCK_MAX_N + 1, False, "cooperative"),
                                             (mr.PADDED_ONE_BLOCK_MAX_N, True, "one_block"),
                                             (4096, False, "cooperative")])
@pytest.mark.parametrize("labels", [None, "int32", "int64"])
def test_matrix_recompute_one_launch_paths_place_everything_in_one_allocation(stubbed, n, padded, path, labels):
    """The one-launch paths, prepared once per (n, dtype, labels, padded, device): the
    kernel's output and scratch addresses are disjoint, 8-byte aligned and inside the one
    allocation; the result is the first ``count`` keep entries and scores of it (padded:
    all n and the count's word); the plan is reused by the next call."""
    driver, count, known, allocations = stubbed
    boxes, scores = torch.rand(n, 4), torch.rand(n)
    label_tensor = None if labels is None else torch.zeros(n, dtype=getattr(torch, labels))
    count.count = min(n, 2)
    result = mr.matrix_recompute_cuda(boxes, scores, iou_threshold=0.5, labels=label_tensor, kernel="gaussian",
                                      sigma=2.0, score_threshold=0.05, padded=padded)
    chosen, plan = mr._plans[(n, torch.float32, labels is not None, padded, torch.device("cpu"), None)]
    assert chosen == plan.path == path and launched(driver, known) == ["single_block_kernel" if path == "one_block"
                                                              else "cooperative_kernel"]
    [memory] = allocations
    codes = plan.launch.codes
    values = read_arguments(codes, driver.launches[0][1])
    assert values[:2] == [boxes.data_ptr(), scores.data_ptr()]
    assert values[2] == (0 if label_tensor is None else label_tensor.data_ptr())
    assert values[3] == (0 if labels == "int32" else 1) and values[4] == n and values[6:8] == [2.0, 0.05]
    addresses = [v for c, v in zip(codes[8:], values[8:]) if c == "Q" and v not in (0, 77, 4242)]
    assert all(inside(a, memory) and (a - memory.data_ptr()) % 8 == 0 for a in addresses)
    assert len(set(addresses)) == len(addresses)
    keep_at = memory.data_ptr()
    if padded:
        assert result.keep.shape == (n,) and result.count.data_ptr() == keep_at + 8 * plan.count_word
    else:
        assert result.keep.shape == (count.count,) and result.scores.shape == (count.count,)
    assert result.keep.data_ptr() == keep_at and result.scores.data_ptr() == keep_at + 8 * n
    mr.matrix_recompute_cuda(boxes, scores, iou_threshold=0.5, labels=label_tensor, kernel="gaussian", sigma=2.0,
                             score_threshold=0.05, padded=padded)
    assert mr._plans[(n, torch.float32, labels is not None, padded, torch.device("cpu"), None)][1] is plan
    assert driver.launches[1][0] == driver.launches[0][0]


HARD_FUSED_FORCED = [  # (path, n, padded, kernels after the rank)
    ("one_block", 256, True, ["small_nms_kernel"]),
    ("cooperative", 1024, False, ["mid_nms_kernel"]),
    ("mask_then_staged_resolve", 100, False, ["tile_mask_kernel", "staged_resolve_kernel"]),
    ("streamed", 20000, False, ["streamed_resolve_kernel"]),
    ("mask_then_block_resolve", 100, True, ["tile_mask_kernel", "block_resolve_kernel"]),
]


def test_hard_fused_forced_paths_cover_the_table():
    assert sorted(path for path, *_ in HARD_FUSED_FORCED) == sorted(hf.PATHS)


@pytest.mark.parametrize("path, n, padded, kernels", HARD_FUSED_FORCED)
def test_hard_fused_path_override_launches_that_paths_kernels(stubbed, path, n, padded, kernels):
    """``path=`` runs the named path wherever it can take the input, beyond the sizes the
    chooser gives it; a plan per forced path, apart from the chosen one's."""
    driver, count, known, _ = stubbed
    result = hf.hard_fused_cuda(torch.rand(n, 4), torch.rand(n), iou_threshold=0.5, padded=padded, path=path)
    ranked = [] if path in ("one_block", "cooperative") else ["chunk_sort_kernel", "group_merge_kernel",
                                                             "merge_rank_kernel"] if n > 8192 else ["rank_by_score_kernel"]
    assert launched(driver, known) == ranked + kernels
    assert hf.plan_for(n, torch.float32, False, padded, torch.device("cpu"), path).path == path
    assert result.keep.shape == ((n,) if padded else (0,))


@pytest.mark.parametrize("path, n, padded, reason", [
    ("one_block", 257, False, "at most 256 boxes"),
    ("cooperative", 100, True, "eager calls only"),
    ("cooperative", 1025, False, "at most 1024 boxes"),
    ("mask_then_staged_resolve", 1025, False, "at most 1024 boxes"),
    ("streamed", 1024, False, "more than 1024 boxes"),
    ("no_such_path", 10, False, "no path 'no_such_path'"),
])
def test_hard_fused_path_override_refuses_what_a_path_cannot_take(stubbed, path, n, padded, reason):
    """A ValueError naming why and the paths that can take the call, before any launch."""
    driver, _, _, _ = stubbed
    with pytest.raises(ValueError, match=reason) as error:
        hf.hard_fused_cuda(torch.rand(n, 4), torch.rand(n), iou_threshold=0.5, padded=padded, path=path)
    assert "mask_then_block_resolve" in str(error.value) and driver.launches == []


def test_hard_fused_choose_path_without_a_device():
    """Without a device the chooser asks no GPU: no cooperative launch, the staged resolve fits."""
    assert hf.choose_path(1) == hf.choose_path(hf.ONE_BLOCK_MAX_N) == "one_block"
    assert hf.choose_path(hf.ONE_BLOCK_MAX_N + 1) == "mask_then_staged_resolve"
    assert hf.choose_path(1025) == hf.choose_path(hf.STREAMED_MAX_N) == "streamed"
    assert hf.choose_path(hf.STREAMED_MAX_N + 1) == "mask_then_block_resolve"


@pytest.mark.parametrize("path, n, padded, kernels", [
    ("one_block", 100, True, ["single_block_kernel"]),
    ("cooperative", 20, False, ["cooperative_kernel"]),
    ("counting_passes", 20, False, ["rank_kernel", "cmax_kernel", "decay_kernel", "select_kernel"]),
])
def test_matrix_recompute_path_override_launches_that_paths_kernels(stubbed, monkeypatch, path, n, padded, kernels):
    driver, _, known, _ = stubbed
    monkeypatch.setattr(cuda_launch, "_current_stream", lambda device: (0, 5))  # on_torch_stream's (the multi-launch paths)
    mr.matrix_recompute_cuda(torch.rand(n, 4), torch.rand(n), iou_threshold=0.5, kernel="gaussian", sigma=2.0,
                             score_threshold=0.05, padded=padded, path=path)
    assert launched(driver, known) == kernels
    assert sorted(mr.PATHS) == sorted(["one_block", "cooperative", "counting_passes", "merge_sort_passes"])


def test_matrix_recompute_path_override_refuses_what_a_path_cannot_take(stubbed):
    n = mr.one_block_capacity(torch.float32) + 1
    with pytest.raises(ValueError, match="at most 1024 boxes.*valid paths are cooperative, counting_passes"):
        mr.matrix_recompute_cuda(torch.rand(n, 4), torch.rand(n), iou_threshold=0.5, kernel="gaussian", sigma=2.0,
                                 score_threshold=0.05, path="one_block")
    with pytest.raises(ValueError, match="no path 'single'"):
        mr.matrix_recompute_cuda(torch.rand(3, 4), torch.rand(3), iou_threshold=0.5, kernel="gaussian", sigma=2.0,
                                 score_threshold=0.05, path="single")


@pytest.mark.parametrize("module", [hf, mr], ids=["hard_fused", "matrix_recompute"])
def test_the_chooser_picks_only_paths_that_take_the_input(stubbed, module):
    """``choose_path`` and the table agree: at every size around the limits, eager and
    padded, with labels and without, the chosen path is one ``check_path`` accepts."""
    device = torch.device("cpu")
    sizes = sorted({1, 31, 32, 33, 96, 97, 160, 161, 256, 257, 1000, 1024, 1025, 4096, 8192, 8193, 20000})
    for n in sizes:
        for padded in (False, True):
            for labels in (False, True):
                path = module.choose_path(n, torch.float32, padded, device, labels)
                module.check_path(path, n, torch.float32, padded, device, labels)


class FakeVerdict:
    address = _cuda.Address(0x7E57_0000_1238)  # an address no other argument has

    def __init__(self):
        import numpy as np

        self.value = np.full(1, 7, dtype=np.int64)  # a stale value: the op must reset it



@pytest.fixture
def with_verdict(stubbed, monkeypatch):
    """The pinned input verdict (``nmsbench.cuda.input_verdict``) of every CUDA backend that
    checks the values in its own launch. A launch that gets the verdict's address
    "writes" ``verdict.written`` there (None: nothing, as a kernel does for good input)."""
    driver, count, known, _ = stubbed
    verdict = FakeVerdict()
    verdict.written = None
    record = driver._record

    def get(module, name, dtype, device):  # the stub's kernels, which also know their argument layout
        kernel = known.setdefault((name, dtype), FakeKernel(name))
        kernel.codes = module.codes[name]
        return kernel

    def write_on_launch(call, pointers):
        record(call, pointers)
        if verdict.written is not None and carries_verdict(driver.launches[-1], known, verdict):
            verdict.value[0] = verdict.written

    monkeypatch.setattr(_cuda.CudaModule, "get", get)
    monkeypatch.setattr(driver, "_record", write_on_launch)
    monkeypatch.setattr(cuda_memory, "host_count", lambda device, slot="kept": verdict if slot == "input verdict" else count)
    monkeypatch.setattr(cuda_launch, "_current_stream", lambda device: (0, 5))  # on_torch_stream's
    return driver, count, known, verdict


def carries_verdict(launch, known, verdict) -> bool:
    """Whether the verdict's address is among a recorded launch's arguments."""
    call, recorded = launch
    kernel = next(k for k in known.values() if k.ptr == call[0])
    return verdict.address in read_arguments(kernel.codes, recorded)


def _ops():
    from nmsbench.variants import allpairs, bitmask_classic, bitmask_two_phase, matrix_fused

    matrix = dict(kernel="gaussian", sigma=2.0, score_threshold=0.05)
    return {  # name: (op, its keyword arguments, the kernel that reads every row first)
        "hard_fused one_block": (hf.hard_fused_cuda, {}, 4, "small_nms_kernel"),
        "hard_fused cooperative": (hf.hard_fused_cuda, {}, 200, "mid_nms_kernel"),
        "hard_fused streamed": (hf.hard_fused_cuda, {}, 1025, "rank_by_score_kernel"),
        "hard_fused block resolve, merge rank": (hf.hard_fused_cuda, {}, 9000, "merge_rank_kernel"),
        "matrix_recompute one_block": (mr.matrix_recompute_cuda, matrix, 4, "single_block_kernel"),
        "matrix_recompute cooperative": (mr.matrix_recompute_cuda, matrix, 200, "cooperative_kernel"),
        "matrix_recompute counting_passes": (mr.matrix_recompute_cuda, matrix | {"path": "counting_passes"}, 300,
                                             "rank_kernel"),
        "matrix_recompute merge_sort_passes": (mr.matrix_recompute_cuda, matrix | {"path": "merge_sort_passes"}, 300,
                                               "rank_by_score_kernel"),  # the merge rank from 8193 boxes
        "allpairs": (allpairs.allpairs_cuda, {}, 40, "rank_by_score_kernel"),
        "bitmask_classic": (bitmask_classic.bitmask_classic_cuda, {}, 40, "rank_by_score_kernel"),
        "bitmask_two_phase": (bitmask_two_phase.bitmask_two_phase_cuda, {}, 40, "rank_by_score_kernel"),
        "matrix_fused": (matrix_fused.matrix_fused_cuda, matrix, 40, "rank_by_score_kernel"),
        "weighted_nms": (weighted_nms.weighted_nms_cuda, {}, 200, "mid_nms_kernel"),
    }


@pytest.mark.parametrize("case", list(_ops()))
def test_a_backend_that_checks_values_does_so_in_the_launch_that_reads_every_row(with_verdict, case):
    """``check_values=True``: the verdict is set to 0 before the launches, exactly one
    launch (the first that reads every row) gets its address, as its last argument, no
    separate check kernel runs, and what that launch writes decides: nothing, the op
    returns; 1, the reference ValueError naming the row. Without it, no launch gets it."""
    driver, count, known, verdict = with_verdict
    op, kwargs, n, first_reader = _ops()[case]
    boxes, scores = torch.rand(n, 4) + torch.tensor([0.0, 0.0, 1.0, 1.0]), torch.rand(n)
    count.count = 1
    op(boxes, scores, iou_threshold=0.5, check_values=True, **kwargs)
    assert verdict.value[0] == 0  # reset before the launch; nothing written
    names = launched(driver, known)
    carrying = [i for i, launch in enumerate(driver.launches) if carries_verdict(launch, known, verdict)]
    assert [names[i] for i in carrying] == [first_reader]
    assert "validate_kernel" not in names
    [reader] = [k for k in known.values() if k.name == first_reader]
    assert read_arguments(reader.codes, driver.launches[carrying[0]][1])[-1] == verdict.address
    driver.launches.clear()
    op(boxes, scores, iou_threshold=0.5, **kwargs)  # not asked: no launch gets it
    assert not any(carries_verdict(launch, known, verdict) for launch in driver.launches)
    boxes[n // 2, 3] = boxes[n // 2, 1] - 1  # a middle row: y2 < y1
    verdict.written = 1
    with pytest.raises(ValueError, match=rf"row {n // 2} has y2 < y1"):
        op(boxes, scores, iou_threshold=0.5, check_values=True, **kwargs)


def test_the_padded_calls_take_no_check_values(with_verdict):
    """A padded call reports bad input through run_nms's input_check (on the device)."""
    with pytest.raises(ValueError, match="check_values is for eager calls"):
        hf.hard_fused_cuda(torch.rand(4, 4), torch.rand(4), iou_threshold=0.5, padded=True, check_values=True)
    with pytest.raises(ValueError, match="check_values is for eager calls"):
        mr.matrix_recompute_cuda(torch.rand(4, 4), torch.rand(4), iou_threshold=0.5, kernel="gaussian", sigma=2.0,
                                 score_threshold=0.05, padded=True, check_values=True)


# ------------------------------------------------------------------ the new families' host sides

def test_soft_rounds_chooses_one_block_up_to_its_limit_and_refuses_what_a_path_cannot_take():
    from nmsbench.variants import soft_rounds as sr

    assert sr.choose_path(1) == sr.choose_path(sr.BLOCK_MAX_N) == "one_block"
    assert sr.choose_path(sr.BLOCK_MAX_N + 1) == "rounds"
    assert sr.LINEAR_BLOCK_MAX_N < sr.BLOCK_MAX_N  # the linear kernel's sparser graph: the rounds path sooner
    assert sr.choose_path(sr.LINEAR_BLOCK_MAX_N, kernel="linear") == "one_block"
    assert sr.choose_path(sr.LINEAR_BLOCK_MAX_N + 1, kernel="linear") == "rounds"
    assert sr.choose_path(sr.LINEAR_BLOCK_MAX_N + 1, kernel="gaussian") == "one_block"
    sr.check_path("rounds", 10 ** 6, torch.float32)  # the rounds take any N
    sr.check_path("graph_rounds", 10 ** 6, torch.float32)
    assert all(sr.choose_path(n) != "graph_rounds" for n in (1, 10 ** 4, 10 ** 6))  # forced only, until measured
    assert sr.BLOCK_MAX_N < sr.ONE_BLOCK_CAPACITY < 2 ** 15  # int16 box indices
    sr.check_path("one_block", sr.ONE_BLOCK_CAPACITY, torch.float32)  # forced, past the chooser's limit (a probe's)
    with pytest.raises(ValueError, match=f"at most {sr.ONE_BLOCK_CAPACITY} boxes"):
        sr.check_path("one_block", sr.ONE_BLOCK_CAPACITY + 1, torch.float32)
    with pytest.raises(ValueError, match="no padded output"):
        sr.check_path("rounds", 10, torch.float32, padded=True)
    with pytest.raises(ValueError, match="no path .tiles.; the paths are one_block, rounds, graph_rounds"):
        sr.check_path("tiles", 10, torch.float32)
    # the one-block kernel's shared memory: boxes, float64 scores and seven ints a box (marks,
    # degrees, list lengths, sorted lengths, picks, blockers, the scan queue)
    assert sr.block_shared_bytes(1024, torch.float32) == 1024 * (16 + 8 + 28)
    assert sr.block_shared_bytes(1024, torch.float64) == 1024 * (32 + 8 + 28)


def test_diou_compiles_hard_fused_once_per_beta():
    from nmsbench.variants import diou_nms

    assert diou_nms.diou_module(1.0) is diou_nms.CUDA_MODULE and diou_nms.diou_module(0.6) is diou_nms.diou_module(0.6)
    assert diou_nms.diou_module(0.6).defines["DIOU_BETA"] == "0.6"
    assert "DIOU_BETA" not in hf.CUDA_MODULE.defines
    assert diou_nms.CUDA_MODULE.cu_file == hf.CUDA_MODULE.cu_file and diou_nms.CUDA_MODULE.codes == hf.CUDA_MODULE.codes
    # beta travels as the double's shortest repr, which C parses back to the same double
    assert float(diou_nms.diou_module(1 / 3).defines["DIOU_BETA"]) == 1 / 3
    with pytest.raises(ValueError, match="diou_nms: no path 'fast'"):
        diou_nms.check_path("fast", 10, torch.float32, False, None)


def test_diou_takes_hard_fuseds_paths_leaving_one_block_sooner():
    """diou_nms's choose_path and check_path (what benchmarks/paths.py calls) are
    hard_fused's for its kernels, without a device: the same paths, except that one block
    stops at DIOU_ONE_BLOCK_MAX_N (DIoU's test costs one SM more), for every beta."""
    from nmsbench.variants import diou_nms

    assert list(diou_nms.PATHS.items()) == list(hf.PATHS.items())  # the same KernelPaths, asked of its kernels
    assert hf.DIOU_ONE_BLOCK_MAX_N < hf.ONE_BLOCK_MAX_N
    for n in (1, hf.DIOU_ONE_BLOCK_MAX_N, hf.DIOU_ONE_BLOCK_MAX_N + 1, hf.ONE_BLOCK_MAX_N, hf.ONE_BLOCK_MAX_N + 1,
              1024, 1025, hf.STREAMED_MAX_N + 1):
        for padded in (False, True):
            chosen = diou_nms.choose_path(n, torch.float32, padded)
            if hf.DIOU_ONE_BLOCK_MAX_N < n <= hf.ONE_BLOCK_MAX_N:
                assert chosen == hf.choose_path(hf.ONE_BLOCK_MAX_N + 1, torch.float32, padded) != "one_block"
            else:
                assert chosen == hf.choose_path(n, torch.float32, padded)
            assert hf.PATHS.choose(n, torch.float32, padded, None, module=diou_nms.diou_module(0.6)) == chosen
            diou_nms.check_path(chosen, n, torch.float32, padded, None)
