"""nmsbench: benchmark and compare non-maximum suppression variants on CPU and GPU.

    >>> import nmsbench
    >>> result = nmsbench.run_nms("torchvision", boxes, scores, iou_threshold=0.5)
    >>> result.keep          # int64 indices into the input, by descending score
    >>> nmsbench.implementations()   # the registry, by name
"""

from .api import run_nms
from .boxes import BoxSet, NMSResult, PaddedNMSResult, validate_nms_inputs
from .registry import BackendUnavailable, Implementation, implementations, register

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "BoxSet",
    "Implementation",
    "NMSResult",
    "PaddedNMSResult",
    "implementations",
    "register",
    "run_nms",
    "validate_nms_inputs",
    "__version__",
]
