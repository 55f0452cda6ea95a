"""Agreement of a kept set with the reference (greedy NMS by torchvision)."""

from __future__ import annotations

import torch


def compare_keep(keep: torch.Tensor, ref_keep: torch.Tensor) -> dict:
    """kept, ref_kept, Jaccard of the two kept sets (1.0 when both are empty), and the
    counts kept only by the variant (extra) and only by the reference (missing)."""
    kept = set(keep.tolist())
    ref = set(ref_keep.tolist())
    union = len(kept | ref)
    return {
        "kept": len(kept),
        "ref_kept": len(ref),
        "jaccard": len(kept & ref) / union if union else 1.0,
        "extra": len(kept - ref),
        "missing": len(ref - kept),
    }
