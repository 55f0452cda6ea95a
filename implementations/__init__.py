"""The NMS variants (installed as ``nmsbench.variants``); importing a module or package
here registers its backends with ``nmsbench.registry.register``, and the registry
imports every one whose name does not start with "_".

- one module per variant (``allpairs.py`` ...), or a package for a variant with several
  CUDA paths (``hard_fused/``, ``matrix_recompute/``: ``cpu.py``, ``cuda.py``, the .cu);
  a CUDA variant keeps its kernels (.cu) beside its host code;
- the CUDA bridge is the harness's (``nmsbench.cuda``: ``CudaModule``, launches, ranking,
  path tables, ``_common.cuh``, ``rank.cu``); variants import it, never the reverse;
- ``_cpu.py``: the CPU backends' shared helpers;
- ``DESIGN.md``: why the kernels are built as they are (measurements: results/PERFLOG.md).
"""
