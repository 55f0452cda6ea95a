"""What the probes share: a case's boxes on the GPU, and an op spec ("impl" or
"impl:path") turned into a zero-argument call on them, through public surfaces only
(the registry's CUDA backend, its ``choose_path`` and its ``path=`` override)."""

from __future__ import annotations

import sys

import torch

import nmsbench
from nmsbench import datasets


def parse_sizes(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def boxes_of(scenario: str, n: int, seed: int = 0, classes: int = 1):
    """A scenario's box set on the GPU (generated on the CPU from the seed, as a sweep does)."""
    return datasets.generate(scenario, n, seed=seed, classes=classes).to("cuda")


def op_call(spec: str, boxes, iou_threshold: float = 0.5, padded: bool = False, params: dict | None = None):
    """``spec`` "impl" or "impl:path" -> (zero-argument call of its CUDA backend on
    ``boxes`` with its family's parameters (``params`` over the defaults), the path it
    takes or None for a backend without paths)."""
    name, _, path = spec.partition(":")
    impl = nmsbench.implementations()[name]
    backend = impl.backend("cuda")
    params = impl.resolve_params(dict(params or {}))  # the family's defaults (Matrix NMS, Soft-NMS, DIoU), overridden
    extra = {"padded": True} if padded else {}
    module = sys.modules[backend.fn.__module__]
    chosen = None
    if hasattr(module, "choose_path"):
        chosen = path or module.choose_path(boxes.boxes.shape[0], boxes.boxes.dtype, padded, boxes.boxes.device,
                                            boxes.labels is not None)
        extra["path"] = chosen
    elif path:
        raise SystemExit(f"{name} has no paths to choose from")

    def call():
        return backend.fn(boxes.boxes, boxes.scores, iou_threshold=iou_threshold, labels=boxes.labels, **params,
                          **extra)

    return call, chosen


def same_result(a, b) -> bool:
    if not torch.equal(a.keep, b.keep):
        return False
    return a.scores is None or torch.equal(a.scores, b.scores)
