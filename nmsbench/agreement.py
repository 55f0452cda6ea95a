"""Agreement of a result with the references: greedy NMS by torchvision (every row), and
the family's own exact CPU implementation (the families whose answer is not greedy's)."""

from __future__ import annotations

import torch

# The exact CPU implementation each family's rows are held to beside greedy NMS (a hard
# row's family reference is greedy NMS itself: its columns above say it). An entry of the
# family that is not exact (an external library, a plain loop, float reductions on a GPU)
# shows there how far it is from the definition.
FAMILY_REFERENCES = {"soft": "soft_nms", "diou": "diou_nms", "weighted": "weighted_nms"}
NO_FAMILY_REFERENCE = {"family_ref": "", "family_jaccard": float("nan"), "family_max_diff": float("nan")}


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


def _relative(a: float, b: float) -> float:
    """|a - b| relative to the larger of |a| and |b| (0 where both are 0)."""
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale > 0 else 0.0


def compare_family(result, reference, name: str) -> dict:
    """family_ref (``name``), the Jaccard of the kept sets, and family_max_diff: the largest
    relative difference of what the family returns beside indices (final scores; moved box
    coordinates) over the boxes both keep (NaN where the family returns indices only)."""
    kept, ref = result.keep.cpu().tolist(), reference.keep.cpu().tolist()
    union = len(set(kept) | set(ref))
    out = {"family_ref": name, "family_jaccard": len(set(kept) & set(ref)) / union if union else 1.0,
           "family_max_diff": float("nan")}
    for field in ("scores", "boxes"):
        mine, theirs = getattr(result, field, None), getattr(reference, field, None)
        if mine is None or theirs is None:
            continue
        at = {index: row for row, index in enumerate(ref)}
        mine, theirs = mine.detach().cpu().double().reshape(len(kept), -1), theirs.detach().cpu().double().reshape(len(ref), -1)
        diffs = [_relative(a, b) for row, index in enumerate(kept) if index in at
                 for a, b in zip(mine[row].tolist(), theirs[at[index]].tolist())]
        if diffs:
            out["family_max_diff"] = max(diffs)
    return out
