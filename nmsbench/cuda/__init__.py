"""The one bridge between torch tensors and our CUDA kernels (NVRTC + CuPy's driver API),
owned by the harness: the variants (``nmsbench.variants``) import it, never the reverse.

- ``compile``: ``CudaModule`` (a .cu file, NVRTC-compiled per device at first use), the
  dtypes and common constants, the tunables variable (``NMSBENCH_CUDA_TUNABLES``);
- ``launch``: launches on torch's current stream (``on_torch_stream``, ``CompiledLaunch``),
  argument packing, per-call-shape plans, occupancy and shared-memory limits;
- ``memory``: ``Scratch``, per-stream words (grid barriers, counters), ``HostCount``;
- ``paths``: ``PathTable`` / ``KernelPath``, the kernel paths of every multi-path op;
- ``rank``: ``rank_by_score`` (rank.cu), every CUDA backend's ranking;
- ``validate``: run_nms's input check on the device (_validate.cu);
- ``kernels``: discovery of every ``CudaModule`` (imports the variants by name; not
  imported here).

``_common.cuh`` (prepended to every .cu file), ``rank.cu`` and ``_validate.cu`` lie here.
``cupy`` is imported lazily, so machines without it still import this package.
"""

from .compile import (BALLOT_WARPS, COMMON_DEFINES, COUNT_BOXES, COUNT_WARPS, CUDA_DTYPES, NVRTC_OPTIONS, RANK_WARPS,
                      SOURCE_TYPES, TUNABLES_VARIABLE, CompileError, CudaModule, device_index, tunable_overrides)
from .launch import (MAX_SHARED_BYTES, PARAM_BYTES, Address, CompiledLaunch, _current_stream, blocks, cached_plan,
                     multiprocessors, on_torch_stream, opted_in_shared_limit, pack_arguments, resident_blocks)
from .memory import HostCount, Scratch, grid_barrier_address, host_count, input_verdict, kept_count, stream_counters
from .paths import KernelPath, PathTable, path_table, path_tables
from .rank import (MERGE_RANK_MIN, RANK_MODULE, RANK_PATHS, _ranked_offsets, choose_rank_path, rank_by_score,
                   rank_launches, rank_scratch_words)

__all__ = ["BALLOT_WARPS", "COMMON_DEFINES", "COUNT_BOXES", "COUNT_WARPS", "CUDA_DTYPES", "MAX_SHARED_BYTES",
           "MERGE_RANK_MIN", "NVRTC_OPTIONS", "PARAM_BYTES", "RANK_MODULE", "RANK_PATHS", "RANK_WARPS",
           "SOURCE_TYPES", "TUNABLES_VARIABLE", "Address", "CompileError", "CompiledLaunch", "CudaModule",
           "HostCount", "KernelPath", "PathTable", "Scratch", "_current_stream", "_ranked_offsets", "blocks",
           "cached_plan", "choose_rank_path", "device_index", "grid_barrier_address", "host_count", "input_verdict",
           "kept_count", "multiprocessors", "on_torch_stream", "opted_in_shared_limit", "pack_arguments",
           "path_table", "path_tables", "rank_by_score", "rank_launches", "rank_scratch_words", "resident_blocks",
           "stream_counters", "tunable_overrides"]
