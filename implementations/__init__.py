"""The NMS variants (installed as ``nmsbench.variants``); importing a module or package
here registers its backends with ``nmsbench.registry.register``, and the registry
imports every one whose name does not start with "_".

- one module per variant (``allpairs.py`` ...), or a package for a variant with several
  CUDA paths (``hard_fused/``, ``matrix_recompute/``: ``cpu.py``, ``cuda.py``, the .cu);
  a CUDA variant keeps its kernels (.cu) beside its host code;
- ``_cuda.py``: the one bridge to NVRTC and the driver (``CudaModule``, launches, ranking);
  ``_common.cuh``: what every kernel file shares; ``rank.cu``: the device ranking;
- ``_cpu.py``: the CPU backends' shared helpers; ``_kernels.py``: discovery of every
  ``CudaModule`` and kernel backend, from which the kernel tests and the GPU check derive;
- ``DESIGN.md``: why the kernels are built as they are (measurements: results/PERFLOG.md).
"""
