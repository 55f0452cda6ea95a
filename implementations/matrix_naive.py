"""Matrix NMS (SOLOv2) in plain PyTorch, the formula written out literally.

IoU matrix, upper triangle (row i ranks above column j), column max = each box's max IoU
with its parents, compensation matrix, decay matrix, column min. Every step materializes
an N x N tensor: this is the baseline the fused kernels are measured against.
"""

from __future__ import annotations

import torch

from nmsbench.boxes import pairwise_iou, result_by_final_score, score_order
from nmsbench.families import MATRIX_PARAMS
from nmsbench.memory_guard import check_fits
from nmsbench.registry import register


@register(
    name="matrix_naive", family="matrix", devices=("cpu", "cuda"), params=MATRIX_PARAMS, host_sync=True,
    summary="plain PyTorch SOLOv2 formula: IoU matrix, triu, column max, decay matrix, min",
    style=("#E69F00", "triangle-down"),
)
def matrix_naive(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    size = boxes.shape[0]
    check_fits("matrix_naive", 5 * size * size * boxes.element_size(), boxes.device, n=size,
               formula=f"5 N² x {boxes.element_size()} bytes: five N x N matrices at its peak")
    order = score_order(scores)
    sorted_boxes, sorted_scores = boxes.detach()[order], scores.detach()[order]  # no autograd graph, as every entry
    iou = pairwise_iou(sorted_boxes, sorted_boxes).triu(diagonal=1)  # iou[i, j], i ranked above j
    if labels is not None:
        sorted_labels = labels[order]
        iou = iou * (sorted_labels[:, None] == sorted_labels[None, :])
    n = iou.shape[0]
    compensate = iou.max(dim=0).values if n else iou.new_zeros(0)  # cmax_i: box i's max IoU with its parents
    compensate = compensate[:, None].expand(n, n)  # compensate[i, j] = cmax_i
    if kernel == "gaussian":
        decay = torch.exp((compensate**2 - iou**2) / sigma)
    else:
        # A parent that duplicates a box above it (cmax_i = 1) constrains nothing.
        decay = ((1 - iou) / (1 - compensate)).masked_fill_(compensate == 1, float("inf"))
    decay = decay.min(dim=0).values if n else decay.new_ones(0)
    final = sorted_scores * decay.to(sorted_scores.dtype)
    kept = (final >= score_threshold).nonzero().squeeze(1)  # rank positions, ascending
    return result_by_final_score(order[kept], final[kept])
