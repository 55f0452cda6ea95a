"""matrix_recompute: Matrix NMS (family matrix) in O(N) memory, the IoUs recomputed.

Matrix NMS needs every pairwise IoU twice: for each box's max IoU with its parents
(cmax) and for the decays f(iou_ij) / f(cmax_i). Storing the N x N matrix (as
matrix_naive and matrix_fused do) costs memory traffic and capacity; recomputing the
IoUs from boxes held in shared memory costs arithmetic only, so nothing N x N exists and
N = 131072 runs. Importing the package registers both backends:

- ``cpu.py``: numba, matrix_fused's two passes (which are exactly this design);
- ``cuda.py``: the host side of ``matrix_recompute.cu``: ``choose_path`` and the table
  of paths (``PATHS``), the one-launch plans, and ``matrix_recompute_cuda(..., path=None)``.

Why the kernels are built as they are: implementations/DESIGN.md.
"""

from .cpu import matrix_recompute_cpu
from .cuda import CUDA_MODULE, DEFINES, PATHS, check_path, choose_path, matrix_recompute_cuda, plan_for

__all__ = ["CUDA_MODULE", "DEFINES", "PATHS", "check_path", "choose_path", "matrix_recompute_cpu",
           "matrix_recompute_cuda", "plan_for"]
