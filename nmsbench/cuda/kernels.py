"""Discovery of our CUDA kernels, so that the kernel tests and the GPU check cover every
variant without a list to keep: the ``CudaModule``-s of the bridge and of every module
under ``nmsbench.variants`` (packages' submodules and private modules included), and
the registered implementations whose CUDA backend launches one of them. Like the
registry's discovery, it imports the variants by name only.
"""

from __future__ import annotations

import importlib
import pkgutil

from .compile import CudaModule
from .rank import RANK_MODULE
from .validate import MODULE as VALIDATE_MODULE

PACKAGE = "nmsbench.variants"  # imported by name, as the registry's discovery does


def variant_modules() -> list:
    """Every module under ``nmsbench.variants``, imported (which registers the variants)."""
    package = importlib.import_module(PACKAGE)
    names = [info.name for info in pkgutil.walk_packages(package.__path__, PACKAGE + ".")]
    return [importlib.import_module(name) for name in sorted(names)]


def cuda_modules() -> list[CudaModule]:
    """Every ``CudaModule`` a variant module holds at its top level, and the bridge's own
    (rank.cu, _validate.cu), each once (by .cu file and defines: diou_nms's compilation
    of hard_fused.cu is a module of its own)."""
    found: dict[tuple, CudaModule] = {}
    values = [RANK_MODULE, VALIDATE_MODULE, *(value for module in variant_modules() for value in vars(module).values())]
    for value in values:
        if isinstance(value, CudaModule):
            found.setdefault((value.cu_file, tuple(sorted(value.defines.items()))), value)
    return [found[key] for key in sorted(found)]


def holds_cuda_module(module_name: str) -> bool:
    """Whether the module ``module_name`` or its package (below nmsbench.variants) holds a CudaModule."""
    parts = module_name.split(".")
    for stop in range(len(parts), 2, -1):
        module = importlib.import_module(".".join(parts[:stop]))
        if any(isinstance(value, CudaModule) for value in vars(module).values()):
            return True
    return False


def kernel_implementations() -> list[str]:
    """Registered implementations whose CUDA backend is ours: its function's module (or
    that module's package) holds a CudaModule. Sorted by name."""
    import nmsbench

    return sorted(name for name, impl in nmsbench.implementations().items()
                  if "cuda" in impl.backends and holds_cuda_module(impl.backends["cuda"].fn.__module__))
