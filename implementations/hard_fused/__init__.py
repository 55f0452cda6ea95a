"""hard_fused: exact greedy NMS (family hard), our own design.

The same indices as torchvision, index for index (ties by lower input index), any N,
with labels. Importing the package registers both backends:

- ``cpu.py``: numba, blocks of rank order tested against the kept boxes in parallel;
- ``cuda.py``: the host side of ``hard_fused.cu``: ``choose_path`` and the table of
  paths (``PATHS``), each call shape's plan, and ``hard_fused_cuda(..., path=None)``.

``padded=True`` (``graph_safe``) returns keep padded to N with -1 and the count on the
device with no host synchronization, so the op can be captured in a CUDA graph.
Why the kernels are built as they are: implementations/DESIGN.md.
"""

from .cpu import hard_fused_cpu
from .cuda import CUDA_MODULE, DEFINES, PATHS, check_path, choose_path, hard_fused_cuda, plan_for

__all__ = ["CUDA_MODULE", "DEFINES", "PATHS", "check_path", "choose_path", "hard_fused_cpu", "hard_fused_cuda",
           "plan_for"]
