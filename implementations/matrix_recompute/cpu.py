"""matrix_recompute's CPU backend (numba, ``prange``): matrix_fused's two passes.

Pass 1 keeps each box's max IoU with its parents (cmax), pass 2 recomputes the IoUs for
each box's minimum decay: nothing N x N is stored, as in the CUDA backend.
"""

from __future__ import annotations

import torch

from nmsbench.boxes import PaddedNMSResult, result_by_final_score
from nmsbench.families import MATRIX_PARAMS
from nmsbench.registry import register

from .._cpu import sorted_inputs
from ..matrix_fused import decay_factors, max_iou_with_parents


def _padded(keep: torch.Tensor, scores: torch.Tensor, n: int) -> PaddedNMSResult:
    count = keep.shape[0]
    padded_keep = torch.full((n,), -1, dtype=torch.int64, device=keep.device)
    padded_scores = torch.zeros(n, dtype=scores.dtype, device=scores.device)
    padded_keep[:count], padded_scores[:count] = keep, scores
    return PaddedNMSResult(padded_keep, torch.tensor(count, dtype=torch.int64, device=keep.device), padded_scores)


@register(
    name="matrix_recompute", family="matrix", devices=("cpu",), requires=("numba",), params=MATRIX_PARAMS,
    summary="numba prange: pass 1 max IoU with parents, pass 2 recomputes IoUs for the min decay; O(N) memory",
    style=("#0072B2", "square"),
)
def matrix_recompute_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold, padded=False):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    cmax = max_iou_with_parents(sorted_boxes, sorted_labels)
    decay = decay_factors(sorted_boxes, sorted_labels, cmax, kernel == "linear", sigma)
    final = scores.detach()[order] * torch.from_numpy(decay).to(scores.dtype)
    kept = (final >= score_threshold).nonzero().squeeze(1)
    result = result_by_final_score(order[kept], final[kept])
    return _padded(result.keep, result.scores, boxes.shape[0]) if padded else result
