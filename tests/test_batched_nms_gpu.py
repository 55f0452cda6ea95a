"""GPU tests of the batched op's CUDA kernels (implementations/batched_nms.cu): the same
reference as tests/test_batched_nms.py and the CPU backend, output for output and bit for
bit, on random batches and on YOLOv5- and YOLOv8-shaped raw heads; the global merge sort
(forced by a small shared-memory sort) and the whole-GPU sort, detections past the shared cache, tile edges,
batches beyond one grid row; the class-segmented path against the tile path (forced with
fast_max=0) at its size limits; YOLOv5 rows decoded a warp per row at several rows a
thread and class counts; one launch (fused_kernel) against two; a CUDA graph's replays against eager calls; repeats;
torch.compile and torch.export on CUDA.

Marked ``gpu`` and skipped without a CUDA device.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings

import nmsbench
from nmsbench import batched
from nmsbench.timing import capture_graph
from test_batched_nms import (Head, assert_matches, head_cases, random_boxes, random_values, reference, scored_cases,
                              yolov5_raw)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def cuda(t):
    return None if t is None else t.to("cuda")


def assert_same(a, b) -> None:
    """Two BatchedDetections equal field for field (bit for bit, but any NaN equals any NaN:
    the payload of a NaN box's coordinates may change on its way through float32), wherever
    they are."""
    for name, x, y in zip(a._fields, a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, name
        x, y = x.cpu(), y.cpu()
        if x.is_floating_point():
            assert torch.equal(x.isnan(), y.isnan()), name
            x, y = x.nan_to_num(0.0, posinf=math.inf, neginf=-math.inf), y.nan_to_num(0.0, posinf=math.inf,
                                                                                      neginf=-math.inf)
            x, y = x.view(torch.int16 if x.element_size() == 2 else torch.int32 if x.element_size() == 4 else
                          torch.int64), y.view(torch.int16 if y.element_size() == 2 else torch.int32
                                               if y.element_size() == 4 else torch.int64)
        assert torch.equal(x, y), name


@settings(max_examples=80)
@given(scored_cases(max_batch=4, max_n=80))
def test_cuda_equals_the_reference_and_the_cpu_backend(case):
    (boxes, scores, labels), kwargs = case
    det = nmsbench.batched_nms(cuda(boxes), cuda(scores), cuda(labels), **kwargs)
    assert det.boxes.is_cuda
    assert_matches(det, reference(boxes, scores, labels, **kwargs), boxes.dtype)
    assert_same(det, nmsbench.batched_nms(boxes, scores, labels, **kwargs))


@settings(max_examples=60)
@given(head_cases(max_batch=4, max_n=80))
def test_cuda_from_head_equals_the_reference_and_the_cpu_backend(case):
    raw, layout, kwargs = case
    det = nmsbench.batched_nms_from_head(raw.cuda(), layout, **kwargs)
    assert_matches(det, reference(raw, layout=layout, **kwargs), raw.dtype)
    assert_same(det, nmsbench.batched_nms_from_head(raw, layout, **kwargs))


def synthetic(batch: int, seed: int = 0) -> torch.Tensor:
    from nmsbench.datasets.synthetic_raw import synthetic_raw

    return torch.from_numpy(synthetic_raw(batch, seed))


def to_yolov8(raw: torch.Tensor) -> torch.Tensor:
    """A YOLOv5 raw batch as YOLOv8's [B, 4 + C, A] (class scores x objectness)."""
    return torch.cat([raw[..., :4], raw[..., 4:5] * raw[..., 5:]], dim=-1).transpose(1, 2).contiguous()


@pytest.mark.parametrize("conf", [0.25, 0.001])
@pytest.mark.parametrize("multi_label", [False, True])
def test_yolo_shaped_batches_equal_the_cpu_backend_and_the_reference(conf, multi_label):
    raw = synthetic(4, seed=1)
    kwargs = dict(iou_threshold=0.45, score_threshold=conf, max_output_boxes=300, multi_label=multi_label)
    for data, layout in ((raw, "yolov5"), (to_yolov8(raw), "yolov8")):
        det = nmsbench.batched_nms_from_head(data.cuda(), layout, **kwargs)
        assert_same(det, nmsbench.batched_nms_from_head(data, layout, **kwargs))
        if conf == 0.25:
            assert_matches(det, reference(data, layout=layout, **kwargs), data.dtype)
        assert not det.overflow.any() or multi_label


@pytest.mark.parametrize("sort_capacity", [32, 64, 256, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_global_merge_sort_gives_the_same_detections(sort_capacity, dtype):
    """Candidates beyond the shared-memory sort are sorted in chunks and merged in global
    memory: forced with small sort capacities, on ties and distinct scores."""
    generator = torch.Generator().manual_seed(sort_capacity)
    boxes = random_boxes(generator, (3, 3000), span=400, side=30).to(dtype)
    scores = torch.randint(0, 40, (3, 3000, 3), generator=generator).to(dtype) / 40  # many ties
    p = batched._check_params("scores", "xyxy", 0.5, 0.1, 2000, None, False, True, None, None)
    det = nmsbench.BatchedDetections(*batched._run(boxes.cuda(), scores.cuda(), None, p,
                                                   sort_capacity=sort_capacity))
    kwargs = dict(iou_threshold=0.5, score_threshold=0.1, max_output_boxes=2000, multi_label=True)
    assert_same(det, nmsbench.batched_nms(boxes, scores, **kwargs))
    assert_same(det, nmsbench.batched_nms(boxes.cuda(), scores.cuda(), **kwargs))  # the default sort
    assert (det.num_candidates > sort_capacity).all() and (det.num_detections > 0).all()


@pytest.mark.parametrize("sort_capacity", [32, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_whole_gpu_sort_gives_the_same_detections(sort_capacity, dtype):
    """wide_sort_kernel (forced with wide=True and a small shared-memory sort): in one batch
    images of about 50, 1800, 3600 and 12700 candidates (below the block's sort, which then
    sorts them itself, one chunk, two, seven with a ragged last one: up to three merge
    passes), an overflowed image and an empty one, on many ties; the same detections as the
    block's own merge and the CPU backend."""
    generator = torch.Generator().manual_seed(sort_capacity)
    n = 7000
    boxes = random_boxes(generator, (6, n), span=900, side=30).to(dtype)
    scores = torch.randint(1, 60, (6, n, 3), generator=generator).to(dtype) / 60  # many ties
    keep = torch.tensor([20, 700, 1400, 5000, 5000, 0])  # rows with scores; the rest 0 (no candidate)
    scores[torch.arange(n)[None, :] >= keep[:, None]] = 0
    scores[4, :, 1:] = 0.5  # 15000 candidates, beyond the buffer below: overflow, no detections
    scores[5] = 0
    p = batched._check_params("scores", "xyxy", 0.5, 0.1, 3000, None, False, True, None, 14000)
    b, sc = boxes.cuda(), scores.cuda()
    wide = nmsbench.BatchedDetections(*batched._run(b, sc, None, p, sort_capacity=sort_capacity, wide=True,
                                                    graph=False))
    block = nmsbench.BatchedDetections(*batched._run(b, sc, None, p, sort_capacity=sort_capacity, wide=False))
    assert_same(wide, block)
    kwargs = dict(iou_threshold=0.5, score_threshold=0.1, max_output_boxes=3000, multi_label=True, max_candidates=14000)
    assert_same(wide, nmsbench.batched_nms(boxes, scores, **kwargs))
    assert wide.overflow.tolist() == [False, False, False, False, True, False]
    assert (wide.num_candidates[:4].cpu() > torch.tensor([32, 1024, 2048, 6 * 2048])).all()
    assert wide.num_detections[4:].tolist() == [0, 0] and (wide.num_detections[:4] > 0).all()


@pytest.mark.parametrize("max_output", [300, 6000])
def test_large_images_take_the_whole_gpu_sort_and_replay_in_a_graph(max_output):
    """From WIDE_MIN_CAPACITY candidates an image the call adds the whole-GPU sort by
    default; its detections equal the CPU backend's, and a CUDA graph's replays follow new
    inputs."""
    from nmsbench.variants import batched_nms as backend

    n = backend.WIDE_MIN_CAPACITY + 3000
    generator = torch.Generator().manual_seed(max_output)
    boxes = random_boxes(generator, (2, n), span=4000, side=40).float()
    scores = torch.rand(2, n, generator=generator)
    labels = torch.randint(0, 3, (2, n), generator=generator)
    kwargs = dict(iou_threshold=0.5, max_output_boxes=max_output)
    det = nmsbench.batched_nms(boxes.cuda(), scores.cuda(), labels.cuda(), **kwargs)
    assert [plan.wide for key, plan in backend._plans.items() if key[2:6] == (2, n, n, max_output)] == [True]
    assert_same(det, nmsbench.batched_nms(boxes, scores, labels, **kwargs))
    static = [t.cuda() for t in (boxes, scores, labels)]
    graph, captured = capture_graph(lambda: nmsbench.batched_nms(*static, **kwargs))
    for seed in (1, 2):
        scores = torch.rand(2, n, generator=torch.Generator().manual_seed(seed))
        static[1].copy_(scores)
        graph.replay()
        assert_same(nmsbench.BatchedDetections(*captured), nmsbench.batched_nms(boxes, scores, labels, **kwargs))


def hostile_boxes(generator, batch: int, n: int, span: int, side: int) -> torch.Tensor:
    """Integer-grid boxes (duplicates, shared edges, zero areas) with, in each image, NaN
    coordinates, inverted boxes, one box of infinite width, a far outlier, and boxes as
    wide or as tall as the scene."""
    boxes = random_boxes(generator, (batch, n), span=span, side=side)
    boxes[:, 5, 0] = math.nan
    boxes[:, 6, 3] = math.nan
    boxes[:, 7, 2] = boxes[:, 7, 0] - 3  # inverted: intersects nothing
    boxes[:, 8, 0] = -math.inf
    boxes[:, 9] = torch.tensor([1e6, 1e6, 1e6 + 5, 1e6 + 5], dtype=boxes.dtype)
    boxes[:, 10:40] = boxes[:, 40:70]  # duplicates
    boxes[:, 70:73, 0], boxes[:, 70:73, 2] = 0, span  # as wide as the scene
    boxes[:, 73:76, 1], boxes[:, 73:76, 3] = 0, span  # as tall
    return boxes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("scene", ["spread", "crowded"])
def test_many_detections_are_resolved_on_the_overlap_graph(dtype, scene):
    """From GRAPH_MIN_OUTPUT detections an image the whole-GPU pass resolves images of more
    than GRAPH_MIN_CANDIDATES candidates on the overlap graph (rounds over x1-sorted runs):
    the same detections as nms_kernel's own tests (graph=False) and the CPU backend, with
    labels or class-agnostic, multi-label, a per-class cap, a pre_nms_top_k cut, IoU
    threshold 0 (any overlap: a wide box searches every column), ties, duplicates and
    hostile boxes; an image below the limit beside two above it (multi-label:
    all three above); a CUDA graph's replay follows new scores."""
    from nmsbench.variants import batched_nms as backend

    generator = torch.Generator().manual_seed(7 if scene == "spread" else 8)
    n = 3000
    span, side = (1200, 40) if scene == "spread" else (150, 60)  # crowded: long chains, many rounds
    boxes = hostile_boxes(generator, 3, n, span, side).to(dtype)
    scores = torch.randint(1, 30, (3, n, 3), generator=generator).to(dtype) / 30  # many ties
    scores[2, 900:] = 0  # the last image: about 860 candidates, below GRAPH_MIN_CANDIDATES
    labels = torch.randint(0, 3, (3, n), generator=generator)
    b, sc, lab = boxes.cuda(), scores.cuda(), labels.cuda()
    for kwargs in (dict(max_output_boxes=n), dict(max_output_boxes=2000, class_agnostic=True),
                   dict(max_output_boxes=1500, max_output_boxes_per_class=400, pre_nms_top_k=2500),
                   dict(max_output_boxes=4 * n, multi_label=True), dict(max_output_boxes=n, iou_threshold=0.0)):
        args = (sc, None) if kwargs.get("multi_label") else (sc[..., 0], lab)
        cpu_args = (scores, None) if kwargs.get("multi_label") else (scores[..., 0], labels)
        kwargs = dict(iou_threshold=0.4, score_threshold=0.05) | kwargs
        p = batched._check_params("scores", "xyxy", kwargs["iou_threshold"], 0.05, kwargs["max_output_boxes"],
                                  kwargs.get("max_output_boxes_per_class"), kwargs.get("class_agnostic", False),
                                  kwargs.get("multi_label", False), kwargs.get("pre_nms_top_k"), None)
        det = nmsbench.batched_nms(b, *args, **kwargs)
        multi = kwargs.get("multi_label", False)
        shape = (3, n, batched.candidate_capacity(n, 3 if multi else 1, multi, None), kwargs["max_output_boxes"])
        assert [plan.graph for key, plan in backend._plans.items()
                if key[0] == dtype and key[2:6] == shape and key[-2:] == (None, None)] == [True]
        tiles = nmsbench.BatchedDetections(*batched._run(b, *args, p, graph=False))
        assert_same(det, tiles)
        assert_same(det, nmsbench.batched_nms(boxes, *cpu_args, **kwargs))
        assert (det.num_candidates[:2] > backend.GRAPH_MIN_CANDIDATES).all()
        assert (det.num_candidates[2] <= backend.GRAPH_MIN_CANDIDATES) != multi and (det.num_detections > 0).all()
    graph, captured = capture_graph(lambda: nmsbench.batched_nms(b, sc[..., 0], lab, iou_threshold=0.4,
                                                                 max_output_boxes=n))
    sc[..., 0] = sc[..., 0].flip(1)
    graph.replay()
    assert_same(nmsbench.BatchedDetections(*captured),
                nmsbench.batched_nms(boxes, scores[..., 0].flip(1), labels, iou_threshold=0.4, max_output_boxes=n))


@pytest.mark.parametrize("n", [255, 256, 257, 511, 512, 513, 5000])
def test_tile_edges_the_counting_rank_edge_and_detections_past_the_shared_cache(n):
    generator = torch.Generator().manual_seed(n)
    boxes = random_boxes(generator, (2, n), span=int(12 * n**0.5), side=20).float()
    scores = torch.rand(2, n, generator=generator)
    labels = torch.randint(0, 5, (2, n), generator=generator)
    for kwargs in (dict(max_output_boxes=n), dict(max_output_boxes=600, max_output_boxes_per_class=30),
                   dict(max_output_boxes=n, class_agnostic=True, pre_nms_top_k=n // 2)):
        det = nmsbench.batched_nms(boxes.cuda(), scores.cuda(), labels.cuda(), iou_threshold=0.3, **kwargs)
        assert_same(det, nmsbench.batched_nms(boxes, scores, labels, iou_threshold=0.3, **kwargs))
        if n <= 600:
            assert_matches(det, reference(boxes, scores, labels, iou_threshold=0.3, **kwargs), boxes.dtype)


@pytest.mark.parametrize("n", [1, 31, 33, 200, 320, 330, 500, 1024, 1025])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_class_segmented_path_equals_the_tile_path(n, dtype):
    """Up to fast_max candidates an image take the class-segmented path; fast_max=0 forces
    the tile path. Both, and the CPU backend, on ties, duplicates, many classes (runs that
    share mask words), one class for all (the largest mask), caps and labels beyond 32
    bits (which fall back to the tile path). About 0.8 n candidates an image (up to 2.4 n
    with three labels each): both sides of COUNT_SORT_MAX, where the path's two sorts go
    from counting to the merge sort."""
    generator = torch.Generator().manual_seed(n)
    boxes = random_boxes(generator, (3, n), span=int(8 * n**0.5) + 8, side=24).to(dtype)
    scores = (torch.randint(0, 30, (3, n, 70), generator=generator) / 30).to(dtype)  # many ties
    labels = torch.randint(-2, 40, (3, n), generator=generator)
    wide = labels * (2**40)  # classes that do not fit 32 bits
    cases = [
        ("scores", boxes, scores, None, dict(multi_label=False)),
        ("scores", boxes, scores[..., :3], None, dict(multi_label=True, max_output_boxes_per_class=7)),
        ("scores", boxes, scores[..., 0], labels, dict(max_output_boxes=40)),
        ("scores", boxes, scores[..., 0], labels, dict(class_agnostic=True, max_output_boxes=n)),
        ("scores", boxes, scores[..., 0], wide, dict(max_output_boxes=60, max_output_boxes_per_class=3)),
    ]
    for layout, b, sc, lab, extra in cases:
        kwargs = {**dict(iou_threshold=0.4, score_threshold=0.2, max_output_boxes=300), **extra}
        p = batched._check_params(layout, "xyxy", kwargs["iou_threshold"], kwargs["score_threshold"],
                                  kwargs["max_output_boxes"], kwargs.get("max_output_boxes_per_class"),
                                  kwargs.get("class_agnostic", False), kwargs.get("multi_label", False), None, None)
        segmented = nmsbench.BatchedDetections(*batched._run(b.cuda(), sc.cuda(), cuda(lab), p))
        tiles = nmsbench.BatchedDetections(*batched._run(b.cuda(), sc.cuda(), cuda(lab), p, fast_max=0))
        cpu = nmsbench.batched_nms(b, sc, lab, **kwargs)
        assert_same(segmented, cpu)
        assert_same(tiles, cpu)
        assert n == 1 or (cpu.num_detections > 0).all()


@pytest.mark.parametrize("m", [31, 32, 33, 255, 256, 257, 300])
def test_a_class_resolved_lazily_or_from_masks_equals_the_reference(m):
    """The class-segmented path's ways to resolve a class: without sorting the image
    (select_nms, every class of up to SELECT_MAX candidates), a class of up to 32 by
    selection and a larger one from masks in its rank order; else sorted (segmented_nms),
    lazily up to LAZY_MAX (a warp testing each keep's row against the live candidates after
    it) and from masks beyond: one class of m candidates on both sides of those limits and
    of a word's 32 (257 and 300 leave the image to the sorted path), in dense clusters
    (chains of suppression) beside scattered small classes, about half of them kept, ties;
    max_output and the per-class cap below the keeps. (Images of more than COUNT_SORT_MAX
    keeps, which select_nms also leaves to the sorted path: the tile-edge test's.)"""
    from nmsbench.variants import batched_nms as backend

    assert backend.CUDA_MODULE.tunables["LAZY_MAX"] == backend.DEFINES["SELECT_MAX"] == 256  # the limits straddled
    generator = torch.Generator().manual_seed(m)
    boxes = torch.cat([random_boxes(generator, (2, m), span=int(3 * m**0.5) + 8, side=24),
                       random_boxes(generator, (2, 60), span=900, side=12)], dim=1).float()
    scores = torch.randint(1, 40, (2, m + 60), generator=generator) / 40  # ties
    labels = torch.cat([torch.zeros(2, m, dtype=torch.int64), torch.randint(1, 5, (2, 60), generator=generator)], 1)
    for extra in (dict(max_output_boxes=300), dict(max_output_boxes=3),
                  dict(max_output_boxes=300, max_output_boxes_per_class=4)):
        kwargs = dict(iou_threshold=0.3, score_threshold=0.0, **extra)  # every box a candidate
        det = nmsbench.batched_nms(boxes.cuda(), scores.cuda(), labels.cuda(), **kwargs)
        assert (det.num_candidates.cpu() == m + 60).all()
        assert_matches(det, reference(boxes, scores, labels, **kwargs), boxes.dtype)
        assert_same(det, nmsbench.batched_nms(boxes, scores, labels, **kwargs))


@pytest.mark.parametrize("m", [33, 100, 256])
@pytest.mark.parametrize("groups", [1, 8, 17, 40])
def test_a_large_class_with_few_or_many_keeps_equals_the_reference(m, groups):
    """select_nms resolves a class of more than 32 from masks of only the words its resolve
    reads (row r's words r / 32 onwards), its candidates ranked by several threads each: a
    class of m candidates in `groups` far-apart clusters of near-duplicates keeps one a
    cluster (1 to 40 keeps, ended by the last cluster, by the per-class cap or by
    max_output), beside two more large classes of scattered boxes and their ties."""
    generator = torch.Generator().manual_seed(m * 100 + groups)
    cluster = torch.arange(m) % groups
    corner = torch.stack([cluster % 8 * 100.0, cluster // 8 * 100.0], dim=-1)  # clusters 100 apart, boxes ~30
    jitter = torch.randint(0, 4, (m, 2), generator=generator).float()
    big = torch.cat([corner + jitter, corner + jitter + 30], dim=-1)
    others = random_boxes(generator, (1, 90), span=900, side=40)[0].float()
    boxes = torch.cat([big, others]).unsqueeze(0)
    scores = (torch.randint(1, 60, (1, m + 90), generator=generator) / 60)  # ties
    labels = torch.cat([torch.zeros(m, dtype=torch.int64), torch.randint(1, 3, (90,), generator=generator)])[None]
    for extra in (dict(max_output_boxes=300), dict(max_output_boxes=300, max_output_boxes_per_class=16),
                  dict(max_output_boxes=300, max_output_boxes_per_class=17), dict(max_output_boxes=5)):
        kwargs = dict(iou_threshold=0.5, score_threshold=0.0, **extra)  # every box a candidate
        det = nmsbench.batched_nms(boxes.cuda(), scores.cuda(), labels.cuda(), **kwargs)
        assert_matches(det, reference(boxes, scores, labels, **kwargs), boxes.dtype)
        assert_same(det, nmsbench.batched_nms(boxes, scores, labels, **kwargs))
    kept = reference(boxes, scores, labels, iou_threshold=0.5, score_threshold=0.0, max_output_boxes=300)[0]
    assert kept.classes.count(0) == min(groups, m)  # a keep a cluster


@pytest.mark.parametrize("classes", [1, 33, 96, 97, 200])
@pytest.mark.parametrize("rows_per_thread", [1, 2, 4])
def test_yolov5_rows_decoded_a_warp_a_row_equal_the_cpu_backend(classes, rows_per_thread):
    """decode_rows_kernel: rows past a block's end, class scores over several loads a lane,
    ties between classes (the first of equal best), NaN scores, and a threshold below
    every objectness (every row listed)."""
    generator = torch.Generator().manual_seed(classes * 10 + rows_per_thread)
    batch, n = 3, 2 * 1024 + 77
    boxes = random_boxes(generator, (batch, n), span=300, side=40)
    centre = torch.cat([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], dim=-1)
    objectness = random_values(generator, (batch, n, 1), [0.0, 0.1, 0.3, 0.6, 0.9, 1.0])
    class_scores = random_values(generator, (batch, n, classes), [0.0, 0.2, 0.5, 0.5, 0.8, 0.8, math.nan])
    raw = torch.cat([centre, objectness, class_scores], dim=-1).float()
    from nmsbench.variants import batched_nms as backend

    for conf in (0.25, -1.0):
        det = nmsbench.BatchedDetections(*backend.run(
            raw.cuda(), None, None, layout="yolov5", cxcywh=True, n=n, classes=classes, multi_label=False,
            class_agnostic=False, iou_threshold=0.45, score_threshold=conf, max_output=300, max_per_class=300,
            top_k=batched.INT32_MAX, capacity=n, rows_per_thread=rows_per_thread))
        cpu = nmsbench.batched_nms_from_head(raw, iou_threshold=0.45, score_threshold=conf)
        assert_same(det, cpu)
        assert (cpu.num_candidates > 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_one_launch_equals_the_two_and_the_cpu_backend(dtype):
    """fused_kernel (decode and NMS in one launch) against decode + nms_kernel, bit for bit,
    and both against the CPU backend: YOLOv5 rows a warp a row, multi-label, YOLOv8, boxes
    and scores, an overflowing image, a grid of more blocks than the SMs hold at once (its
    images' blocks finish in any order); three calls in a row on the kept scratch (its
    done counters zeroed by each call's last blocks) and two graph replays."""
    from nmsbench.variants import batched_nms as backend

    raw = synthetic(2, seed=11).to(dtype)  # fused: 2 x 99 blocks of 1,024 threads, past one round on the SMs
    small = raw[:, ::8].contiguous()  # 3,150 rows across the whole image
    generator = torch.Generator().manual_seed(12)
    boxes = random_boxes(generator, (2, 500), span=300, side=40).to(dtype)
    scores = torch.rand(2, 500, 3, generator=generator).to(dtype)
    cases = [(raw[:1].contiguous(), None, "yolov5", False, 0.25, None), (raw, None, "yolov5", False, 0.25, None),
             (small, None, "yolov5", True, 0.01, 4 * 3150), (to_yolov8(small), None, "yolov8", False, 0.25, None),
             (small, None, "yolov5", False, 0.01, 20), (boxes, scores, "scores", False, 0.3, None)]
    for data, class_scores, layout, multi_label, conf, max_candidates in cases:
        n = data.shape[2] if layout == "yolov8" else data.shape[1]
        classes = 3 if layout == "scores" else 80
        arguments = dict(layout=layout, cxcywh=layout != "scores", n=n, classes=classes, multi_label=multi_label,
                         class_agnostic=False, iou_threshold=0.45, score_threshold=conf, max_output=300,
                         max_per_class=300, top_k=batched.INT32_MAX,
                         capacity=batched.candidate_capacity(n, classes, multi_label, max_candidates))
        gpu, gpu_scores = data.cuda(), cuda(class_scores)
        two = nmsbench.BatchedDetections(*backend.run(gpu, gpu_scores, None, fused=False, **arguments))
        for _ in range(3):
            assert_same(nmsbench.BatchedDetections(*backend.run(gpu, gpu_scores, None, fused=True, **arguments)), two)
        graph, captured = capture_graph(lambda: backend.run(gpu, gpu_scores, None, fused=True, **arguments))
        for _ in range(2):
            graph.replay()
            torch.cuda.synchronize()
            assert_same(nmsbench.BatchedDetections(*captured), two)
        options = dict(iou_threshold=0.45, score_threshold=conf, multi_label=multi_label, max_candidates=max_candidates)
        cpu = (nmsbench.batched_nms(data, class_scores, **options) if layout == "scores"
               else nmsbench.batched_nms_from_head(data, layout, **options))
        assert_same(two, cpu)
        overflowing = max_candidates == 20  # every image: no detections, overflow set
        assert bool(cpu.overflow.all()) == overflowing and bool((cpu.num_detections > 0).any()) != overflowing


def test_more_images_than_a_grid_row():
    boxes = random_boxes(torch.Generator().manual_seed(5), (70000, 3)).float()
    scores = torch.rand(70000, 3, 2, generator=torch.Generator().manual_seed(6))
    det = nmsbench.batched_nms(boxes.cuda(), scores.cuda(), iou_threshold=0.5, max_output_boxes=4)
    assert_same(det, nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, max_output_boxes=4))


def test_graph_replays_equal_eager_calls_and_follow_the_inputs():
    first, second = synthetic(8, seed=2), synthetic(8, seed=3)
    static = first.cuda()
    graph, captured = capture_graph(lambda: nmsbench.batched_nms_from_head(static))
    for data in (first, second, first):
        static.copy_(data)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(nmsbench.BatchedDetections(*captured), nmsbench.batched_nms_from_head(data.cuda()))
    assert_same(nmsbench.BatchedDetections(*captured), nmsbench.batched_nms_from_head(first))


def test_repeats_are_identical_and_two_streams_agree():
    raw = synthetic(8, seed=4).cuda()
    first = nmsbench.batched_nms_from_head(raw, score_threshold=0.01, multi_label=True)
    for _ in range(20):
        assert_same(nmsbench.batched_nms_from_head(raw, score_threshold=0.01, multi_label=True), first)
    other = to_yolov8(synthetic(8, seed=5)).cuda()
    streams, results = [torch.cuda.Stream(), torch.cuda.Stream()], [None, None]
    for k, stream in enumerate(streams):
        with torch.cuda.stream(stream):
            results[k] = (nmsbench.batched_nms_from_head(raw, score_threshold=0.01, multi_label=True) if k == 0
                          else nmsbench.batched_nms_from_head(other, "yolov8"))
    torch.cuda.synchronize()
    assert_same(results[0], first)
    assert_same(results[1], nmsbench.batched_nms_from_head(other.cpu(), "yolov8"))


def test_compile_export_and_a_graph_on_cuda():
    raw, module = yolov5_raw(batch=3, rows=2000, classes=8).cuda(), Head()
    eager = module(raw)
    compiled = torch.compile(module, fullgraph=True)(raw)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
    program = torch.export.export(module, (raw,))
    assert all(torch.equal(a, b) for a, b in zip(eager, program.module()(raw)))
    graph, captured = capture_graph(lambda: module(raw))
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(eager, captured))


def test_every_call_gets_outputs_of_its_own_that_later_calls_leave_alone():
    """A call's outputs were allocated by the previous call of its shape on its stream, after
    that call's launch: each call's tensors are its own (none shares memory with another
    call's still held), results held across later calls of the same shape keep their values,
    and calls on another stream and under graph capture get outputs of their own too."""
    first_raw, second_raw = synthetic(4, seed=6), synthetic(4, seed=7)
    expected = [nmsbench.batched_nms_from_head(r) for r in (first_raw, second_raw)]
    gpu = [first_raw.cuda(), second_raw.cuda()]
    held = [nmsbench.batched_nms_from_head(gpu[k % 2]) for k in range(6)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        held.append(nmsbench.batched_nms_from_head(gpu[0]))
    torch.cuda.current_stream().wait_stream(side)
    graph, captured = capture_graph(lambda: nmsbench.batched_nms_from_head(gpu[1]))
    graph.replay()
    held.append(nmsbench.BatchedDetections(*captured))
    held.append(nmsbench.batched_nms_from_head(gpu[0]))
    torch.cuda.synchronize()
    pointers = [t.data_ptr() for det in held for t in det if t.numel()]
    assert len(set(pointers)) == len(pointers)
    for k, det in enumerate(held[:6]):
        assert_same(det, expected[k % 2])
    assert_same(held[6], expected[0])
    assert_same(held[7], expected[1])
    assert_same(held[8], expected[0])


def test_eager_calls_reuse_a_scratch_that_nms_kernel_leaves_zeroed():
    """An eager call leaves its scratch for the next call of its shape on its stream, with
    every image's candidate counter zeroed by nms_kernel: calls on inputs with more, then
    fewer, then no candidates each equal the CPU backend, and after each the kept counters
    read zero; a graph captured meanwhile (its own scratch) replays correctly."""
    from nmsbench.variants import batched_nms as backend

    raws = [synthetic(4, seed=8), synthetic(4, seed=9), synthetic(4, seed=8) * 0.0]
    backend._kept_scratch.clear()
    for k, raw in enumerate([*raws, raws[1], raws[0]]):
        det = nmsbench.batched_nms_from_head(raw.cuda(), score_threshold=0.1)
        torch.cuda.synchronize()
        assert_same(det, nmsbench.batched_nms_from_head(raw, score_threshold=0.1))
        assert (det.num_candidates > 0).any() == (k != 2)
        stream = torch.cuda.current_stream().cuda_stream
        (plan, memory), = [(p, m) for (p, s), (m, _) in backend._kept_scratch.items() if s == stream]
        counts = memory[plan.counts_offset:plan.counts_offset + 4 * 4].view(torch.int32)
        assert counts.tolist() == [0, 0, 0, 0]
        if k == 1:
            static = raws[0].cuda()
            graph, captured = capture_graph(lambda: nmsbench.batched_nms_from_head(static, score_threshold=0.1))
            for _ in range(2):
                graph.replay()
                torch.cuda.synchronize()
                assert_same(nmsbench.BatchedDetections(*captured),
                            nmsbench.batched_nms_from_head(raws[0], score_threshold=0.1))
