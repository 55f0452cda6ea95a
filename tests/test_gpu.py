"""GPU tests: every CUDA backend against its CPU backend, its family's definition and
torchvision, on every scenario, size and dtype the kernels must handle.

Marked ``gpu`` and skipped without a CUDA device (CI has none); run them on a GPU
machine with ``pytest -m gpu``. The hypothesis property tests in test_properties.py also
run every CUDA backend against the family definitions there.
"""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench import datasets
from nmsbench.boxes import BoxSet
from nmsbench.runner import Grid, run_sweep
from nmsbench.cuda.kernels import kernel_implementations
from test_properties import Case, check_allpairs, check_diou, check_hard, check_matrix, check_soft, check_weighted

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

IMPLS = nmsbench.implementations()
CUDA_IMPLS = sorted(name for name, impl in IMPLS.items() if "cuda" in impl.backends)
KERNEL_IMPLS = kernel_implementations()  # ours: backends whose module holds a CudaModule (.cu files)
EXACT_HARD = sorted(name for name, impl in IMPLS.items() if impl.family == "hard" and impl.exact and "cuda" in impl.backends)
SIZES = [1, 2, 31, 32, 33, 63, 64, 65, 256, 512, 1000, 4096, 4097, 8192]
SCENARIOS = list(datasets.SYNTHETIC) + ["ties"]
DEFINITION_MAX_N = 65  # the plain-Python definitions are O(N^2) in Python


def box_set(scenario: str, n: int, classes: int) -> BoxSet:
    """A scenario's boxes; "ties" is clustered boxes with scores rounded to 0.1 steps, so
    most boxes share their score with many others (the stable tie order matters)."""
    if scenario == "ties":
        base = datasets.generate("clustered", n, seed=n + 7, classes=classes)
        return BoxSet(base.boxes, (base.scores * 10).round() / 10, base.labels)
    return datasets.generate(scenario, n, seed=n, classes=classes)


def cpu_reference(name: str) -> str:
    """The implementation a CUDA backend is checked against on the CPU: its own CPU backend,
    else its family's exact CPU implementation (soft_rounds: soft_nms)."""
    if "cpu" in IMPLS[name].backends:
        return name
    family = IMPLS[name].family
    return next(other for other, impl in sorted(IMPLS.items())
                if impl.family == family and impl.exact and "cpu" in impl.backends)


def run(name, boxes: BoxSet, **params):
    if boxes.boxes.device.type == "cpu":
        name = cpu_reference(name)
    return nmsbench.run_nms(name, boxes.boxes, boxes.scores, 0.5, labels=boxes.labels, **params)


def assert_same_soft(name, cpu, gpu, dtype, linear: bool):
    """Soft-NMS: our kernel picks what the CPU picks, in the same order, with the same final
    scores (the linear kernel bit for bit; the gaussian's factors come from CUDA's exp,
    within an ulp of the C library's). soft_torch, the plain loop, only to rounding."""
    assert gpu.scores.dtype == dtype and gpu.scores.shape == gpu.keep.shape
    want = cpu.scores.to(torch.float32).to(dtype) if dtype == torch.float16 else cpu.scores
    if name == "soft_rounds":
        assert gpu.keep.tolist() == cpu.keep.tolist(), f"{name}: picks differ from the CPU's"
        if linear:
            assert torch.equal(gpu.scores.cpu(), want), f"{name}: linear final scores differ from the CPU's"
        else:
            torch.testing.assert_close(gpu.scores.cpu().double(), want.double(), rtol=1e-12, atol=0)
        return
    threshold = IMPLS[name].resolve_params({})["score_threshold"]
    cpu_final = dict(zip(cpu.keep.tolist(), want.double().tolist()))
    gpu_final = dict(zip(gpu.keep.tolist(), gpu.scores.double().tolist()))
    for i in cpu_final.keys() ^ gpu_final.keys():
        assert abs(cpu_final.get(i, gpu_final.get(i)) - threshold) < 1e-5, f"box {i} picked by one backend only"
    common = sorted(cpu_final.keys() & gpu_final.keys())
    torch.testing.assert_close(torch.tensor([gpu_final[i] for i in common]),
                               torch.tensor([cpu_final[i] for i in common]), rtol=1e-5, atol=1e-6)


def assert_same_result(name, cpu, gpu, dtype=torch.float32, linear: bool = False):
    """The CUDA result equals the CPU one: hard, all-pairs and DIoU index for index, weighted
    NMS with the same moved boxes bit for bit; Matrix NMS too, with decayed scores to
    rounding (kept sets may differ only on the threshold); Soft-NMS: assert_same_soft."""
    assert gpu.keep.device.type == "cuda" and gpu.keep.dtype == torch.int64
    family = IMPLS[name].family
    if family == "soft":
        assert_same_soft(name, cpu, gpu, dtype, linear)
        return
    if family != "matrix":
        assert gpu.scores is None
        assert torch.equal(gpu.keep.cpu(), cpu.keep)
        if family == "weighted":  # float16: the float32 copy's means, rounded to float16
            assert gpu.boxes.dtype == dtype and torch.equal(gpu.boxes.cpu(), cpu.boxes.to(dtype))
        else:
            assert gpu.boxes is None
        return
    assert gpu.scores.dtype == dtype and gpu.scores.shape == gpu.keep.shape
    cpu_final = dict(zip(cpu.keep.tolist(), cpu.scores.double().tolist()))
    gpu_final = dict(zip(gpu.keep.tolist(), gpu.scores.double().tolist()))
    threshold = IMPLS[name].resolve_params({})["score_threshold"]
    for i in cpu_final.keys() ^ gpu_final.keys():
        assert abs(cpu_final.get(i, gpu_final.get(i)) - threshold) < 1e-5, f"box {i} kept by one backend only"
    common = sorted(cpu_final.keys() & gpu_final.keys())
    tol = dict(rtol=1e-3, atol=1e-4) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        torch.tensor([gpu_final[i] for i in common]), torch.tensor([cpu_final[i] for i in common]), **tol
    )
    if name not in ("matrix_naive", "matrix_graph") and cpu_final.keys() == gpu_final.keys():
        # ours computes the decay in double like its CPU backend: the same final scores, so the same order
        # (matrix_graph's CUDA backend may take matrix_recompute's dense passes, whose rounding its CPU
        # backend does not share: near-equal final scores may swap)
        assert gpu.keep.tolist() == cpu.keep.tolist()


def equals_definition(name, boxes: BoxSet):
    """The family checks of test_properties.py (definition, order, no kept overlap) on cuda."""
    case = Case(boxes.boxes.numpy(), boxes.scores.numpy(), None if boxes.labels is None else boxes.labels.numpy())
    family = IMPLS[name].family
    if family == "hard":
        check_hard(name, case, 0.5, "cuda")
    elif family == "allpairs":
        check_allpairs(name, case, 0.5, "cuda")
    elif family == "matrix":
        check_matrix(name, case, 0.5, "gaussian", 0.5, 0.05, "cuda")
    elif family == "soft":
        for kernel in ("gaussian", "linear"):
            check_soft(name, case, 0.5, kernel, 0.5, 0.001, "cuda")
    elif family == "diou":
        check_diou(name, case, 0.5, 1.0, "cuda")
    elif family == "weighted":
        check_weighted(name, case, 0.5, "cuda")


# the plain-torch loops (one pick, or one N x N pass, per step) take seconds from here on
SLOW_LOOP_MAX_N = {"matrix_naive": 4097, "soft_torch": 1000, "cluster": 4097}


@pytest.mark.parametrize("name", CUDA_IMPLS)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("classes", [1, 3])
def test_cuda_backend_equals_cpu_backend_and_definition(name, scenario, classes):
    for n in SIZES:
        if n > SLOW_LOOP_MAX_N.get(name, n):
            continue  # its CPU reference materializes several N x N tensors or loops per pick: slow, nothing new
        boxes = box_set(scenario, n, classes)
        for params in family_params(name):
            gpu = run(name, boxes.to("cuda"), **params)
            cpu = run(name, boxes, **params)
            assert_same_result(name, cpu, gpu, linear=params.get("kernel") == "linear")
        if n <= DEFINITION_MAX_N:
            equals_definition(name, boxes)


def family_params(name: str) -> list[dict]:
    """The parameter sets a family's backends are compared on: both Soft-NMS kernels, else the defaults."""
    return [{}, {"kernel": "linear"}] if IMPLS[name].family == "soft" else [{}]


@pytest.mark.parametrize("name", [n for n in CUDA_IMPLS if torch.float16 in IMPLS[n].backend("cuda").dtypes])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_float16_equals_cpu_backend_on_the_same_values(name, scenario):
    """float16 boxes are computed in float32: the CPU backend on the float32 copy of the
    very same values is the reference."""
    for n in SIZES:
        if n > SLOW_LOOP_MAX_N.get(name, n):
            continue
        for classes in (1, 3):
            boxes = box_set(scenario, n, classes).to("cpu", torch.float16)
            for params in family_params(name):
                gpu = run(name, boxes.to("cuda"), **params)
                cpu = run(name, boxes.to("cpu", torch.float32), **params)
                assert_same_result(name, cpu, gpu, torch.float16, linear=params.get("kernel") == "linear")


@pytest.mark.parametrize("name", KERNEL_IMPLS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_float64(name, scenario):
    for n in (1, 33, 1000, 4097):
        boxes = box_set(scenario, n, 3).to("cpu", torch.float64)
        for params in family_params(name):
            assert_same_result(name, run(name, boxes, **params), run(name, boxes.to("cuda"), **params), torch.float64,
                               linear=params.get("kernel") == "linear")


@pytest.mark.parametrize("name", EXACT_HARD)
@pytest.mark.parametrize("scenario", datasets.SYNTHETIC)
def test_exact_hard_equals_torchvision_on_cuda(name, scenario):
    """Index for index with torchvision on the GPU, on inputs without score ties."""
    for n in SIZES:
        for classes in (1, 3):
            boxes = box_set(scenario, n, classes)
            unique = torch.randperm(n, generator=torch.Generator().manual_seed(n)).to(boxes.scores.dtype) / max(n, 1)
            boxes = BoxSet(boxes.boxes, unique, boxes.labels).to("cuda")
            assert torch.equal(run(name, boxes).keep, run("torchvision", boxes).keep)


@pytest.mark.parametrize("params", [
    dict(kernel="linear"), dict(sigma=2.0), dict(sigma=0.1, score_threshold=0.3), dict(kernel="linear", score_threshold=0.0),
])
def test_matrix_fused_runtime_parameters(params):
    for n in (33, 256, 4097):
        for classes in (1, 3):
            boxes = box_set("clustered", n, classes)
            cpu = run("matrix_fused", boxes, **params)
            gpu = run("matrix_fused", boxes.to("cuda"), **params)
            threshold = params.get("score_threshold", 0.05)
            cpu_final = dict(zip(cpu.keep.tolist(), cpu.scores.tolist()))
            gpu_final = dict(zip(gpu.keep.tolist(), gpu.scores.tolist()))
            assert all(abs(cpu_final.get(i, gpu_final.get(i)) - threshold) < 1e-5 for i in cpu_final.keys() ^ gpu_final.keys())
            common = sorted(cpu_final.keys() & gpu_final.keys())
            assert max((abs(cpu_final[i] - gpu_final[i]) for i in common), default=0.0) < 1e-6


@pytest.mark.parametrize("name", CUDA_IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_backend_is_deterministic(name, dtype):
    if dtype not in IMPLS[name].backend("cuda").dtypes:
        pytest.skip(f"{name} on cuda does not take {dtype}")
    for n, scenario in ((4097, "clustered"), (8192, "ties")):
        if n > SLOW_LOOP_MAX_N.get(name, n):
            n = SLOW_LOOP_MAX_N[name]
        boxes = box_set(scenario, n, 2).to("cuda", dtype)
        first = run(name, boxes)
        for _ in range(20):
            again = run(name, boxes)
            assert torch.equal(again.keep, first.keep)
            for field in ("scores", "boxes"):
                if getattr(first, field) is not None:
                    assert torch.equal(getattr(again, field), getattr(first, field))


@pytest.mark.parametrize("name", KERNEL_IMPLS)
def test_subnormal_scores_and_coordinates_equal_the_cpu(name):
    """Kernels keep subnormals (no -ftz): scores 0 and 4e-42 rank apart, and boxes whose
    sides and areas are subnormal get the CPU's IoUs (hypothesis found the first one)."""
    tiny = torch.tensor([0.0, 1e-45, 4.2e-42, 1e-40, 1e-39, 2e-38], dtype=torch.float64).to(torch.float32)
    small = torch.tensor([0.0, 1e-21, 2e-21, 3e-21, 5e-21, 1e-20])  # areas ~1e-42: subnormal
    generator = torch.Generator().manual_seed(5)
    n = 300
    corners = small[torch.randint(0, len(small), (n, 4), generator=generator)]
    boxes = torch.stack([torch.minimum(corners[:, 0], corners[:, 2]), torch.minimum(corners[:, 1], corners[:, 3]),
                         torch.maximum(corners[:, 0], corners[:, 2]), torch.maximum(corners[:, 1], corners[:, 3])], 1)
    scores = tiny[torch.randint(0, len(tiny), (n,), generator=generator)]
    case = BoxSet(boxes, scores, None)
    params = {"score_threshold": 0.0} if IMPLS[name].family in ("matrix", "soft") else {}
    cpu, gpu = run(name, case, **params), run(name, case.to("cuda"), **params)
    assert_same_result(name, cpu, gpu)  # hard and all-pairs: index for index


def grid_boxes(n: int, seed: int) -> BoxSet:
    """Boxes on a coarse integer grid: shared and touching edges (w == 0 exactly), zero
    width or height, exact duplicates, pairs whose IoU is exactly 0.5 or a few ulps from
    it, and score ties: where the quick rejection and the decisive IoU test must give the
    exact test's answer."""
    generator = torch.Generator().manual_seed(seed)
    xy = torch.randint(0, 12, (n, 2), generator=generator).float()
    wh = torch.randint(0, 5, (n, 2), generator=generator).float()  # 0: empty boxes
    boxes = torch.cat([xy, xy + wh], 1)
    near = torch.rand(n, generator=generator) < 0.2  # widths nudged by an ulp or two: IoUs at 0.5 +- ulps
    nudge = torch.randint(-2, 3, (n,), generator=generator).float() * torch.finfo(torch.float32).eps
    boxes[near, 2] = boxes[near, 2] * (1 + nudge[near]) + 0.0
    boxes[:, 2] = torch.maximum(boxes[:, 2], boxes[:, 0])
    duplicate = torch.rand(n, generator=generator) < 0.1
    boxes[duplicate] = boxes[0].clone()
    scores = torch.randint(0, 8, (n,), generator=generator).float() / 8
    return BoxSet(boxes, scores, None)


def path_tables():
    """(name, PATHS, check_path) of each kernel backend with a table of paths."""
    import sys

    for name in KERNEL_IMPLS:
        module = sys.modules[IMPLS[name].backend("cuda").fn.__module__]
        if hasattr(module, "PATHS"):
            yield name, module.PATHS, module.check_path


def resolved(name: str, params: dict) -> dict:
    """The implementation's parameters with its defaults, as run_nms passes them to a backend."""
    return IMPLS[name].resolve_params(IMPLS[name].accepted_params(params))


def test_path_tables_are_found():
    assert {name for name, _, _ in path_tables()} >= {"hard_fused", "matrix_recompute"}


@pytest.mark.parametrize("n", [300, 1500, 5000])
def test_grid_boxes_with_touching_edges_empty_boxes_and_iou_ties(n):
    """The kernel backends with a table of paths (hard_fused, matrix_recompute), on every
    path that takes the input (forced with ``path=``), on boxes where most pairs touch,
    share an edge or sit at IoU 0.5 exactly: the same answer as the CPU backends (and
    torchvision for the hard family)."""
    import torchvision

    case = grid_boxes(n, seed=n)
    on_gpu = case.to("cuda")
    for name, paths, check_path in path_tables():
        params = {"score_threshold": 0.0} if IMPLS[name].family in ("matrix", "soft") else {}
        cpu, gpu = run(name, case, **params), run(name, on_gpu, **params)
        assert_same_result(name, cpu, gpu)
        for path in paths:
            try:
                check_path(path, n, on_gpu.boxes.dtype, False, on_gpu.boxes.device, on_gpu.labels is not None)
            except ValueError:
                continue
            forced = IMPLS[name].backend("cuda").fn(on_gpu.boxes, on_gpu.scores, iou_threshold=0.5,
                                                    labels=on_gpu.labels, path=path, **resolved(name, params))
            assert_same_result(name, cpu, forced)
    expected = torchvision.ops.nms(case.boxes, case.scores, 0.5)
    assert torch.equal(run("hard_fused", case.to("cuda")).keep.cpu(), expected)


def rank_inputs(n: int, dtype: torch.dtype):
    """Scores with many ties (and equal -0.0 / 0.0), a few NaN and infinities; boxes and
    labels to carry along."""
    generator = torch.Generator().manual_seed(n)
    scores = (torch.randint(-3, 4, (n,), generator=generator) / 4.0).to(dtype)
    scores[scores == 0] = torch.where(torch.rand(int((scores == 0).sum()), generator=generator) < 0.5, -0.0, 0.0).to(dtype)
    special = torch.randint(0, n, (min(n, 9),), generator=generator)
    scores[special] = torch.tensor([float("nan"), float("inf"), -float("inf")] * 3, dtype=dtype)[: special.numel()]
    boxes = torch.rand((n, 4), generator=generator).to(dtype)
    labels = torch.randint(0, 5, (n,), generator=generator, dtype=torch.int32)
    return boxes.cuda(), scores.cuda(), labels.cuda()


@pytest.mark.parametrize("path", ["counting", "merge"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("n", [1, 127, 128, 129, 255, 256, 257, 1000, 4096, 8192, 40000])
def test_rank_by_score_equals_a_stable_descending_sort(n, dtype, path):
    """rank.cu, which every kernel backend ranks with, against torch.sort, both paths
    (one counting launch; sorted chunks of 256 merged): NaN first, ties by lower index,
    -0.0 equal to 0.0, labels carried along, input dtype kept; sizes at chunk edges."""
    from nmsbench.cuda import on_torch_stream, rank_by_score

    boxes, scores, labels = rank_inputs(n, dtype)
    with on_torch_stream(boxes.device) as launch:
        order, ranked = rank_by_score(launch, boxes, scores, labels, with_scores=True, path=path)
    sorted_boxes, sorted_scores = ranked.tensor("sorted_boxes").view(n, 4), ranked.tensor("sorted_scores")
    sorted_labels = ranked.tensor("sorted_labels")
    expected = torch.sort(scores, descending=True, stable=True).indices
    assert order.dtype == torch.int64 and torch.equal(order, expected)
    assert torch.equal(sorted_boxes, boxes[expected]) and torch.equal(sorted_scores.nan_to_num(7), scores[expected].nan_to_num(7))
    assert torch.equal(sorted_labels, labels[expected].to(torch.int64))


@pytest.mark.parametrize("path", ["counting", "merge"])
@pytest.mark.parametrize("n", [257, 5000])
def test_rank_by_score_into_a_callers_allocation(n, path):
    """``into=``: the order, ranked boxes and labels (and the merge's chunks) land in the
    caller's ``rank_scratch_words`` words, nothing past them is written, and 20 repeats
    give the same order."""
    from nmsbench.cuda import on_torch_stream, rank_by_score, rank_scratch_words

    boxes, scores, labels = rank_inputs(n, torch.float32)
    words = rank_scratch_words(n, torch.float32, True, path=path)
    memory = torch.full((words + 64,), -7, dtype=torch.int64, device="cuda")
    expected = torch.sort(scores, descending=True, stable=True).indices
    for _ in range(20):
        with on_torch_stream(boxes.device) as launch:
            rank_by_score(launch, boxes, scores, labels, into=memory.data_ptr(), path=path)
        assert torch.equal(memory[:n], expected)
        assert torch.equal(memory[n : 3 * n].view(torch.float32).view(n, 4), boxes[expected])
        assert torch.equal(memory[3 * n : 4 * n], labels[expected].to(torch.int64))
        assert bool((memory[words:] == -7).all())


@pytest.mark.parametrize("name", KERNEL_IMPLS)
def test_launches_on_torchs_current_stream(name):
    boxes = box_set("clustered", 4097, 3).to("cuda")
    expected = run(name, boxes)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = run(name, boxes)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(got.keep, expected.keep)


def test_mixed_devices_are_rejected():
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]], device="cuda")
    with pytest.raises(ValueError, match="scores are on cpu but boxes are on cuda"):
        nmsbench.run_nms("torchvision", boxes, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="labels are on cpu"):
        nmsbench.run_nms("torchvision", boxes, torch.tensor([1.0], device="cuda"), labels=torch.tensor([0]))


def test_cuda_sweep_writes_both_timers():
    rows = []
    grid = Grid(impls=CUDA_IMPLS, devices=["cuda"], dtypes=["float32", "float16"], scenarios=["clustered"], ns=[64, 1024],
                ious=[0.5], min_run_time=0.05)
    counts = run_sweep(grid, rows.append)
    assert counts["error"] == 0, [r["error"] for r in rows if r["status"] == "error"]
    assert counts["ok"] + counts["skipped"] == len(rows) == grid.count()
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["impl"] for r in ok} == set(CUDA_IMPLS)
    assert {r["timer"] for r in ok} == {"wall", "device"}
    assert all(r["median_us"] > 0 and r["peak_mem_bytes"] != "" for r in ok)
    # the exact hard variants agree with the reference on every case
    assert all(r["jaccard"] == 1.0 for r in ok if r["impl"] in EXACT_HARD and r["dtype"] == "float32")
    # the newer families' CUDA backends against their exact CPU implementation (float16: its float32 copy)
    for r in ok:
        if r["impl"] in ("soft_rounds", "diou_nms", "weighted_nms"):
            assert r["family_jaccard"] == 1.0, (r["impl"], r["dtype"], r["n"])
            assert r["impl"] == "diou_nms" or r["family_max_diff"] < (1e-3 if r["dtype"] == "float16" else 1e-12), r


@pytest.mark.parametrize("n", [161, 192, 256, 257, 300, 511, 777, 1000, 1024])
def test_hard_fused_one_launch_mid_path_equals_the_cpu_and_the_padded_path(n):
    """Past the one block and up to COOPERATIVE_MAX_N eager calls run as one cooperative
    launch; it must give the CPU backend's indices and the padded (rank, mask, staged
    resolve) path's, call after call, on torch's default stream and on another (the grid
    barrier's counters are per stream)."""
    from nmsbench.variants import hard_fused

    device = torch.device("cuda")
    assert hard_fused.choose_path(n, torch.float32, False, device) == "cooperative"
    assert hard_fused.choose_path(n, torch.float32, True, device) == "mask_then_staged_resolve"
    for scenario in ("clustered", "ties", "chain"):
        for classes in (1, 3):
            boxes = box_set(scenario, n, classes)
            cpu = run("hard_fused", boxes).keep
            gpu_boxes = boxes.to("cuda")
            padded = run("hard_fused", gpu_boxes, padded=True).trimmed().keep
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            eager = [run("hard_fused", gpu_boxes).keep for _ in range(3)]
            with torch.cuda.stream(stream):
                eager.append(run("hard_fused", gpu_boxes).keep)
            torch.cuda.current_stream().wait_stream(stream)
            for keep in eager:
                assert torch.equal(keep.cpu(), cpu) and torch.equal(keep, padded)


def hard_fused_forced(boxes: BoxSet, path: str, padded: bool = False):
    """hard_fused's CUDA backend on ``path``, forced (``path=``), checked like run_nms's."""
    from nmsbench.api import check_padded_result, check_result
    from nmsbench.variants import hard_fused

    result = hard_fused.hard_fused_cuda(boxes.boxes, boxes.scores, iou_threshold=0.5, labels=boxes.labels,
                                        padded=padded, path=path)
    if padded:
        check_padded_result("hard_fused", result, boxes.boxes)
        return result.trimmed()
    check_result("hard_fused", result, boxes.boxes)
    return result


@pytest.mark.parametrize("n", [161, 200, 255, 256])
def test_hard_fused_one_block_kernel_up_to_its_capacity_equals_the_cpu(n):
    """The one-block kernel takes up to ONE_BLOCK_CAPACITY boxes, past the ONE_BLOCK_MAX_N
    the calls use: forced there (eager and padded), it gives the CPU backend's indices,
    repeatably."""
    for scenario in ("clustered", "uniform", "ties", "chain"):
        for classes in (1, 3):
            boxes = box_set(scenario, n, classes)
            cpu = run("hard_fused", boxes).keep
            gpu_boxes = boxes.to("cuda")
            eager = [hard_fused_forced(gpu_boxes, "one_block").keep for _ in range(3)]
            padded = hard_fused_forced(gpu_boxes, "one_block", padded=True).keep
            for keep in eager + [padded]:
                assert torch.equal(keep.cpu(), cpu), (scenario, classes)


@pytest.mark.parametrize("n", [1025, 2080, 2304, 2305, 6000, 12289])
@pytest.mark.parametrize("path", ["streamed", "mask_then_block_resolve"])
def test_hard_fused_block_resolve_rounds_equal_the_cpu(n, path):
    """The block resolve (N > 1024) decides 256 boxes a round while the other warps stage
    the next round and OR the last one's kept rows: sizes that end a round exactly, one
    box past it, mid-word and mid-round, scenes where a round keeps almost all its boxes
    (uniform: the grouped OR) or few (clustered, chains of suppression), score ties and
    labels, eager and padded, against the CPU backend; then 20 identical repeats. Both as
    the streamed resolve (the other blocks make the mask meanwhile, by row words, and the
    resolving block waits for each round's rows; calls take it up to STREAMED_MAX_N, forced
    past that too) and after the tile mask kernel."""
    for scenario in ("clustered", "uniform", "chain", "ties"):
        for classes in (1, 3):
            boxes = box_set(scenario, n, classes)
            expected = run("hard_fused", boxes).keep
            gpu_boxes = boxes.to("cuda")
            assert torch.equal(hard_fused_forced(gpu_boxes, path).keep.cpu(), expected), (scenario, classes)
            assert torch.equal(hard_fused_forced(gpu_boxes, path, padded=True).keep.cpu(), expected)
    first = hard_fused_forced(gpu_boxes, path).keep
    for _ in range(20):
        assert torch.equal(hard_fused_forced(gpu_boxes, path).keep, first)


@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
def test_soft_rounds_on_cliques_big_boxes_and_chains(kernel):
    """The rounds' hard cases, against soft_nms on the CPU: every box the same (one clique:
    one pick a round), one large box over 2000 small disjoint ones (it collects 2000
    factors), a chain of boxes each overlapping the next with scores falling along it, and
    score threshold 0 (nothing dropped)."""
    same = BoxSet(torch.tensor([[10.0, 10.0, 50.0, 50.0]]).repeat(1500, 1), torch.rand(1500), None)
    side = torch.arange(2000, dtype=torch.float32)
    small = torch.stack([side % 50 * 2, side // 50 * 2, side % 50 * 2 + 1, side // 50 * 2 + 1], 1)
    big = BoxSet(torch.cat([torch.tensor([[0.0, 0.0, 100.0, 100.0]]), small]), torch.rand(2001), None)
    steps = torch.arange(3000, dtype=torch.float32)
    chain = BoxSet(torch.stack([steps, steps * 0, steps + 3, steps * 0 + 1], 1), 1 - steps / 4000, None)  # IoU 0.5 with the next
    from nmsbench.variants import soft_rounds

    for case in (same, big, chain):
        for score_threshold in (0.001, 0.0):
            params = dict(kernel=kernel, score_threshold=score_threshold, iou_threshold=0.3)
            cpu = nmsbench.run_nms("soft_nms", case.boxes, case.scores, **params)
            on_gpu = case.to("cuda")
            for path in soft_rounds.PATHS:  # each path that takes the case, forced
                try:
                    soft_rounds.check_path(path, len(case.scores), torch.float32, device=on_gpu.boxes.device)
                except ValueError:
                    continue
                gpu = soft_rounds.soft_rounds(on_gpu.boxes, on_gpu.scores, sigma=0.5, path=path, **params)
                assert_same_soft("soft_rounds", cpu, gpu, torch.float32, kernel == "linear")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_diou_decides_pairs_on_the_threshold_as_the_cpu_does(dtype):
    """Pairs whose IoU minus penalty lies on the threshold or within a few float steps of
    it: there the float estimate of the penalty (float boxes) cannot decide and the double
    test does, and every decision is the CPU backend's, on every path."""
    import definitions as D
    import numpy as np
    from nmsbench.variants import diou_nms

    float_type = np.float32 if dtype == torch.float32 else np.float64
    generator = torch.Generator().manual_seed(11)
    corner = torch.rand(60, 2, generator=generator) * 900
    size = 20 + torch.rand(60, 2, generator=generator) * 80
    a = torch.cat([corner, corner + size], 1)
    b = a + (torch.rand(60, 4, generator=generator) - 0.5) * size.repeat(1, 2) * 0.2
    scores = torch.tensor([0.9, 0.8], dtype=dtype)
    checked = 0
    for k in range(60):
        pair = torch.stack([a[k], b[k]]).to(dtype)
        first, second = ([float_type(x) for x in row] for row in pair.tolist())
        d = float(D.iou(first, second)) - D.diou_penalty(first, second, 1.0)
        if not 0.0 < d < 1.0:
            continue
        checked += 1
        for threshold in (d, np.nextafter(d, -1.0), np.nextafter(d, 2.0), d - 1e-9, d + 1e-9, d - 1e-7, d + 1e-7):
            cpu = nmsbench.run_nms("diou_nms", pair, scores, float(threshold))
            for path in ("one_block", "cooperative", "mask_then_block_resolve"):
                gpu = diou_nms.diou_nms_cuda(pair.cuda(), scores.cuda(), iou_threshold=float(threshold), beta=1.0,
                                             path=path)
                assert gpu.keep.tolist() == cpu.keep.tolist(), (k, threshold, path)
    assert checked > 30
