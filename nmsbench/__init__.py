"""nmsbench: benchmark and compare non-maximum suppression variants on CPU and GPU.

    >>> import nmsbench
    >>> result = nmsbench.run_nms("torchvision", boxes, scores, iou_threshold=0.5)
    >>> result.keep          # int64 indices into the input, by descending score
    >>> nmsbench.implementations()   # the registry, by name

The public names are imported on first use (PEP 562), so that ``import nmsbench.cli``
does not import torch before the command line can handle Ctrl-C.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    "run_nms": "api",
    "batched_nms": "batched",
    "batched_nms_from_head": "batched",
    "BatchedDetections": "batched",
    "release_batched_memory": "batched",
    "BoxSet": "boxes",
    "NMSResult": "boxes",
    "PaddedNMSResult": "boxes",
    "validate_nms_inputs": "inputs",
    "BackendUnavailable": "registry",
    "InsufficientMemory": "memory_guard",
    "Implementation": "registry",
    "implementations": "registry",
    "register": "registry",
}

__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
