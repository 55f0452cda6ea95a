"""Whole ops side by side in one process: hard_fused and matrix_recompute compiled from the
working tree and from one or more other source folders (each holding _common.cuh and the
op's .cu file), on the same inputs, in interleaved rounds. Prints per (op, scenario, N)
each variant's `wall` (the sweep's timer, median of the rounds), the GPU time of its
kernel launches back to back (matrix_recompute's one-launch paths only: CUDA events over
20 launches, best of 3) and whether its output equals the working tree's.

Make the other variants here first (they travel with the tree, untracked), e.g.
    mkdir -p .ci/baseline && for f in _common.cuh hard_fused.cu matrix_recompute.cu; do
        git show HEAD:implementations/$f > .ci/baseline/$f; done
Run on the device: python3 .ci/ab_ops.py .ci/baseline [more folders]"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_timers import launches_us, wall_us  # noqa: E402

from nmsbench import datasets  # noqa: E402
from nmsbench.variants import _cuda  # noqa: E402
from nmsbench.variants import hard_fused as hf  # noqa: E402
from nmsbench.variants import matrix_recompute as mr  # noqa: E402

DEV = torch.device("cuda")
CASES = [("matrix_recompute", "clustered", n) for n in (512, 1024, 2048, 4096, 8192)] + \
        [("matrix_recompute", "uniform", n) for n in (1024, 4096)] + \
        [("hard_fused", "clustered", n) for n in (512, 1024, 4096, 8192)] + [("hard_fused", "uniform", 4096)]
ROUNDS = 5


class FolderModule(_cuda.CudaModule):
    """A CudaModule whose source comes from ``folder`` instead of implementations/."""

    def __init__(self, folder: Path, like: _cuda.CudaModule):
        super().__init__(like.cu_file)
        self.folder = folder
        self.expressions, self._expression = like.expressions, like._expression

    def source(self) -> str:
        return (self.folder / "_common.cuh").read_text() + (self.folder / self.cu_file).read_text()


BARRIERS: dict[str, dict] = {}  # a variant's grid barrier words (variants may count them differently)


def use(name: str, module_of_op: dict) -> None:
    """Swap each op's CUDA_MODULE and grid barrier words and forget every plan made with
    the ones before."""
    _cuda._barriers = BARRIERS.setdefault(name, {})
    _cuda._zeroed_per_stream(_cuda._barriers, *_cuda._current_stream(DEV), 2)  # the variants before took two words
    hf.CUDA_MODULE, mr.CUDA_MODULE = module_of_op["hard_fused"], module_of_op["matrix_recompute"]
    hf._plans.clear()
    hf._mid_blocks.clear()
    mr._one_launch_plans.clear()
    mr._resident.clear()


def call(op: str, boxes, scores):
    if op == "hard_fused":
        return lambda: hf.hard_fused_cuda(boxes, scores, iou_threshold=0.5)
    return lambda: mr.matrix_recompute_cuda(boxes, scores, iou_threshold=0.5, kernel="gaussian", sigma=0.5,
                                            score_threshold=0.05)


def kernel_us(boxes, scores) -> float:
    """matrix_recompute's one launch alone, back to back (no host wait); nan on other paths."""
    n = boxes.shape[0]
    path, plan = mr._one_launch_plan(n, boxes.dtype, False, False, DEV)
    if plan is None:
        return float("nan")
    memory = torch.empty(plan.words, dtype=torch.int64, device=DEV)
    base = memory.data_ptr()
    index, stream = _cuda._current_stream(DEV)
    head = (boxes.data_ptr(), scores.data_ptr(), 0, 1, n, 0, 0.5, 0.05)
    if path == "single":
        def once():
            plan.launch(stream, *head, base, base + 8 * n, base + 8 * plan.count_word, 0)
    else:
        at = plan.scratch_offsets

        def once():
            plan.launch(stream, *head, base + at[0], base + at[1], base + at[2], 0, base + at[4], base + at[5],
                        base + at[6], _cuda.grid_barrier_address(index, stream), base, base + 8 * n,
                        base + 8 * plan.count_word, 0, plan.mark_slots)  # kernels before the marks ignore the last
    return launches_us(once, reps=20, rounds=3)


def main():
    tree = {"hard_fused": hf.CUDA_MODULE, "matrix_recompute": mr.CUDA_MODULE}
    variants = {"tree": tree}
    for folder in map(Path, sys.argv[1:]):
        variants[folder.name] = {op: FolderModule(folder, module) for op, module in tree.items()}
    for op, scenario, n in CASES:
        data = datasets.generate(scenario, n, seed=0).to("cuda")
        boxes, scores = data.boxes, data.scores
        walls = {name: [] for name in variants}
        kernels, same = {}, {}
        for name, modules in variants.items():  # compile, warm up, check against the tree's output
            use(name, modules)
            out = call(op, boxes, scores)()
            if name == "tree":
                reference = out
            same[name] = torch.equal(out.keep, reference.keep) and (
                out.scores is None or torch.equal(out.scores, reference.scores))
            kernels[name] = kernel_us(boxes, scores) if op == "matrix_recompute" else float("nan")
        for _ in range(ROUNDS):
            for name, modules in variants.items():
                use(name, modules)
                walls[name].append(wall_us(call(op, boxes, scores), 0.05))
        print(f"{op:16s} {scenario:9s} n={n:5d} " + "  ".join(
            f"{name}: wall={statistics.median(walls[name]):6.1f} kernel={kernels[name]:6.1f} same={same[name]}"
            for name in variants), flush=True)


if __name__ == "__main__":
    main()
