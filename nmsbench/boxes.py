"""Box tensors: the NMS result types, the box set and the IoU convention (the input
checks are in :mod:`nmsbench.inputs`).

IoU follows torchvision exactly, so exact variants can agree with it bit for bit:
``area = (x2 - x1) * (y2 - y1)``, ``inter = max(0, min(x2) - max(x1)) * max(0, min(y2) - max(y1))``,
``iou = inter / (area_a + area_b - inter)``; where the union is 0 (two zero-area boxes) the
IoU is 0, which is what torchvision's NaN comparison does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import torch


class NMSResult(NamedTuple):
    """What every NMS variant returns.

    keep:   int64 indices into the *input* order, sorted by descending final score
            (ties by lower input index), on the input's device.
    scores: final (decayed) scores of the kept boxes, aligned with ``keep``, for
            variants that change scores (Matrix NMS, Soft-NMS); ``None`` otherwise.
    boxes:  the kept boxes as the variant moved them, (len(keep), 4) in the input's
            dtype, for variants that move boxes (weighted NMS); ``None`` otherwise.
    """

    keep: torch.Tensor
    scores: Optional[torch.Tensor] = None
    boxes: Optional[torch.Tensor] = None


class PaddedNMSResult(NamedTuple):
    """The fixed-size output of a ``graph_safe`` backend called with ``padded=True``.

    No host synchronization happens inside such a call, so it can be captured in a CUDA
    graph. keep: (N,) int64 on the input's device; its first ``count`` entries are what
    :class:`NMSResult` would hold, the rest are -1. count: 0-d int64 tensor on the same
    device. scores: (N,) final scores aligned with ``keep`` (padding 0), or ``None``.
    input_check: through ``nmsbench.run_nms``, the verdict of the input check that ran on
    the device with the op (0-d int64: 0 where the input is valid); ``None`` from a
    backend called directly or with ``validate=False``. Bad input does not raise inside
    the call (that would synchronize): :meth:`check` and :meth:`trimmed` raise it.
    """

    keep: torch.Tensor
    count: torch.Tensor
    scores: Optional[torch.Tensor] = None
    input_check: Optional[torch.Tensor] = None

    def check(self) -> "PaddedNMSResult":
        """Raise the ``ValueError`` of bad input, if the input check found any (waits for
        the device); returns the result itself otherwise."""
        if self.input_check is not None:
            verdict = int(self.input_check)
            if verdict:
                from nmsbench.cuda.validate import describe_verdict

                row, reason = describe_verdict(verdict)
                raise ValueError(f"invalid input row {row}: {reason} (the padded call's input check; "
                                 f"nmsbench.validate_nms_inputs on the same tensors gives the values)")
        return self

    def trimmed(self) -> NMSResult:
        """The :class:`NMSResult` this padded output stands for (waits for the count);
        a ``ValueError`` where the input check found bad input."""
        self.check()
        n = int(self.count)
        return NMSResult(self.keep[:n], None if self.scores is None else self.scores[:n])


# The device input check's verdict: 0 for valid input, else (1 + first bad row) * 8 + the
@dataclass
class BoxSet:
    """One generated or loaded set of candidate boxes (always built on the CPU)."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: Optional[torch.Tensor] = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None) -> "BoxSet":
        """The same boxes on ``device`` (and in ``dtype`` for boxes and scores)."""
        return BoxSet(
            boxes=self.boxes.to(device=device, dtype=dtype or self.boxes.dtype),
            scores=self.scores.to(device=device, dtype=dtype or self.scores.dtype),
            labels=None if self.labels is None else self.labels.to(device),
            meta=dict(self.meta),
        )




def score_order(scores: torch.Tensor) -> torch.Tensor:
    """Input indices by descending score, ties by lower input index (torchvision's order)."""
    return torch.sort(scores, descending=True, stable=True).indices


def pairwise_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU matrix between boxes ``a`` (M, 4) and ``b`` (N, 4), in their dtype.

    Same arithmetic as torchvision's NMS kernels, with 0 where the union is 0.
    """
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    w = (torch.minimum(a[:, None, 2], b[None, :, 2]) - torch.maximum(a[:, None, 0], b[None, :, 0])).clamp_(min=0)
    h = (torch.minimum(a[:, None, 3], b[None, :, 3]) - torch.maximum(a[:, None, 1], b[None, :, 1])).clamp_(min=0)
    inter = w * h
    iou = inter / (area_a[:, None] + area_b[None, :] - inter)
    return torch.nan_to_num_(iou, nan=0.0)


def result_by_final_score(indices: torch.Tensor, final_scores: torch.Tensor) -> NMSResult:
    """Kept input ``indices`` with their final scores, ordered by descending final score,
    ties by lower input index (the family rule for score-changing variants)."""
    by_index = indices.sort().indices
    indices, final_scores = indices[by_index], final_scores[by_index]
    rank = torch.sort(final_scores, descending=True, stable=True).indices
    return NMSResult(indices[rank], final_scores[rank])
