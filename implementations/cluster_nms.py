"""Cluster-NMS (Zheng et al., "Enhancing Geometric Factors in Model Learning and Inference
for Object Detection and Instance Segmentation", 2021), family ``hard``.

Fast NMS suppresses a box when any higher-ranked box overlaps it, kept or not. Cluster-NMS
iterates that matrix with the current keep mask: B = IoU (upper triangle, rank order) with
the rows of the boxes suppressed so far set to 0, until B stops changing; then it is greedy
NMS exactly. Written in plain torch as the authors did (CPU and CUDA), so the suite shows
what this popular formulation costs: O(N^2) memory, and an N x N pass per iteration (as
many iterations as the longest chain of suppressions, plus one).
"""

from __future__ import annotations

import torch

from nmsbench.boxes import NMSResult, pairwise_iou, score_order
from nmsbench.memory_guard import check_fits
from nmsbench.registry import register


@register(
    name="cluster", family="hard", devices=("cpu", "cuda"), exact=True, host_sync=True,
    summary="Cluster-NMS in torch: the Fast-NMS matrix iterated with the keep mask until it stops changing",
    style=("#225555", "star-diamond"),
)
def cluster_nms(boxes, scores, *, iou_threshold, labels=None):
    n = boxes.shape[0]
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=boxes.device))
    check_fits("cluster", 5 * n * n * boxes.element_size(), boxes.device, n=n,
               formula=f"5 N² x {boxes.element_size()} bytes: five N x N matrices at its peak")
    order = score_order(scores)
    ranked = boxes.detach()[order]
    iou = pairwise_iou(ranked, ranked).triu_(diagonal=1)
    if labels is not None:
        ranked_labels = labels[order]
        iou *= ranked_labels[:, None] == ranked_labels[None, :]
    suppressed_by = iou  # B in the authors' code: the rows of boxes still in play
    while True:
        before = suppressed_by
        # a box survives while no box in play overlaps it above the threshold (compared in
        # float64: the threshold is a Python float, as torchvision compares it)
        kept = before.max(dim=0).values.to(torch.float64) <= iou_threshold
        suppressed_by = iou * kept[:, None].to(iou.dtype)
        if torch.equal(before, suppressed_by):
            break
    return NMSResult(order[kept])
