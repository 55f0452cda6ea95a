"""Ranking by score on the device (rank.cu): one counting launch below ``MERGE_RANK_MIN``
boxes, sorted chunks merged (three launches) from there; every CUDA backend ranks with it."""

from __future__ import annotations

import functools

import torch

from .compile import COUNT_BOXES, HERE, RANK_WARPS, CudaModule, device_index
from .launch import Address, CompiledLaunch, blocks
from .memory import HostCount, Scratch
from .paths import KernelPath, PathTable

MERGE_CHUNK = 256  # keys per chunk of the merge rank (rank.cu), one per thread
RANK_MODULE = CudaModule("rank.cu", templates={"rank_by_score_kernel": "QQQiQQQQQ", "chunk_sort_kernel": "QiQ",
                                                  "group_merge_kernel": "iQQ", "merge_rank_kernel": "QQQiiQQQQQQ"},
                         defines={"MERGE_CHUNK": MERGE_CHUNK}, directory=HERE)
# From here up rank_by_score merges sorted chunks (three launches, O(N log N)) instead of
# counting (one launch, O(N^2)): where the merge became faster (results/PERFLOG.md).
MERGE_RANK_MIN = 8193


def _box_words(n: int, dtype: torch.dtype) -> int:
    """8-byte words that n boxes of ``dtype`` take (rounded up)."""
    return -(-4 * n * dtype.itemsize // 8)


# rank_by_score's paths: one counting launch, or sorted chunks merged (from MERGE_RANK_MIN boxes)
RANK_PATHS = PathTable("rank_by_score", (
    KernelPath("counting", one_launch=True,
               passes_over=lambda n, *call, **context: None if n < MERGE_RANK_MIN else
               f"from {MERGE_RANK_MIN} boxes the merge is faster"),
    KernelPath("merge"),
))


@functools.lru_cache(maxsize=1024)  # on every rank's path
def choose_rank_path(n: int, path: str | None = None) -> str:
    """The rank's path for n boxes: ``path`` if given (a ValueError naming the paths if it
    is none of them), else the table's choice: "merge" from MERGE_RANK_MIN boxes and
    "counting" below."""
    if path is None:
        return RANK_PATHS.choose(n)
    RANK_PATHS.check(path, n)
    return path


def _key_array_words(n: int, dtype: torch.dtype) -> int:
    """8-byte words of one of the merge rank's two key arrays (sorted chunks, sorted
    groups), the chunks padded to MERGE_CHUNK slots: the score key and the index packed in
    64 bits for float scores, 16 bytes (a 64-bit key, an int32 index) for double."""
    return blocks(n, MERGE_CHUNK) * MERGE_CHUNK * (2 if dtype == torch.float64 else 1)


@functools.lru_cache(maxsize=256)
def _ranked_offsets(n: int, dtype: torch.dtype, labels: bool) -> tuple[int, int, int, int]:
    """Byte offsets from ``into`` of the ranked boxes, the ranked labels (-1: none) and the
    merge's two key arrays, as ``rank_by_score(..., into=)`` lays them out (the order
    first, at 0)."""
    boxes_at = 8 * n
    labels_at = boxes_at + 8 * _box_words(n, dtype)
    keys_at = labels_at + (8 * n if labels else 0)
    return boxes_at, labels_at if labels else -1, keys_at, keys_at + 8 * _key_array_words(n, dtype)


@functools.lru_cache(maxsize=256)
def rank_scratch_words(n: int, dtype: torch.dtype, labels: bool, path: str | None = None) -> int:
    """8-byte words that ``rank_by_score(..., into=address)`` writes at ``address``: the
    order, the ranked boxes (input dtype), the ranked labels and, for the merge rank, its
    two key arrays (``_ranked_offsets``' layout)."""
    _, _, chunk_at, group_at = _ranked_offsets(n, dtype, labels)
    if choose_rank_path(n, path) == "merge":
        return group_at // 8 + _key_array_words(n, dtype)
    return chunk_at // 8


class _Ranked:
    """Addresses of rank_by_score's outputs in a caller's allocation (see ``into``)."""

    __slots__ = ("sorted_boxes", "sorted_scores", "sorted_labels", "chunk_sorted", "group_sorted")

    def __init__(self, address: int, n: int, dtype: torch.dtype, labels: bool):
        boxes_at, labels_at, chunk_at, group_at = _ranked_offsets(n, dtype, labels)
        self.sorted_boxes = Address(address + boxes_at)
        self.sorted_scores = None
        self.sorted_labels = Address(address + labels_at) if labels else None
        self.chunk_sorted = Address(address + chunk_at)
        self.group_sorted = Address(address + group_at)


def rank_by_score(launch, boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor | None,
                  with_scores: bool = False, into: int | None = None, path: str | None = None,
                  verdict: HostCount | None = None):
    """Rank the boxes on the device: descending score, ties by lower input index, NaN
    first, as ``torch.sort(descending=True, stable=True)`` does. Below ``MERGE_RANK_MIN``
    boxes one launch counts (rank.cu's rank_by_score_kernel); from there three launches
    sort chunks, merge groups of chunks, and merge the groups (chunk_sort_kernel,
    group_merge_kernel, merge_rank_kernel). ``path`` (one of RANK_PATHS) forces one
    (tests, probes).

    Returns ``(order, ranked)``: ``order`` (int64 tensor, input index of each rank) and
    ``ranked`` (a ``Scratch``) with ``sorted_boxes``, ``sorted_labels`` (None when ``labels``
    is None) and, with ``with_scores``, ``sorted_scores``, all in rank order and in the
    input dtype.
    With ``into`` (a device address with ``rank_scratch_words`` 8-byte words the caller
    owns, for the same ``path``; not with ``with_scores``) nothing is allocated:
    ``order`` is its address there and ``ranked`` holds the others' addresses.
    With ``verdict`` (from :func:`input_verdict`) the launch that reads every box also
    checks run_nms's value rules (:func:`raise_if_bad_input` reads the verdict).
    """
    n, device, dtype = boxes.shape[0], boxes.device, boxes.dtype
    path = choose_rank_path(n, path)
    if into is not None:
        if with_scores:
            raise ValueError("rank_by_score: into= does not take with_scores")
        order, scratch = Address(into), _Ranked(into, n, dtype, labels is not None)
    else:
        order = torch.empty(n, dtype=torch.int64, device=device)
        key_words = _key_array_words(n, dtype) if path == "merge" else 0
        scratch = Scratch(
            device, sorted_boxes=(4 * n, dtype), sorted_scores=(n if with_scores else 0, dtype),
            sorted_labels=(0 if labels is None else n, torch.int64),
            chunk_sorted=(key_words, torch.int64), group_sorted=(key_words, torch.int64),
        )
        if not with_scores:
            scratch.sorted_scores = None
        if labels is None:
            scratch.sorted_labels = None
    if labels is not None:
        labels = labels.to(torch.int64).contiguous()
    boxes, scores = boxes.contiguous(), scores.contiguous()
    rank_launches(n, dtype, path, device)(
        launch.stream, boxes.data_ptr(), scores.data_ptr(), _address(labels), _address(order),
        _address(scratch.sorted_boxes), _address(scratch.sorted_scores), _address(scratch.sorted_labels),
        _address(scratch.chunk_sorted), _address(scratch.group_sorted), 0 if verdict is None else verdict.address)
    return order, scratch


def _address(value) -> int:
    """A launch argument's address: a tensor's data pointer, an address as is, None as 0."""
    if value is None:
        return 0
    return value.data_ptr() if isinstance(value, torch.Tensor) else int(value)


class RankLaunches:
    """``rank_by_score``'s launches at one (n, dtype, path, device), prepared once
    (``rank_launches``): a call takes the raw stream and the addresses of the inputs
    (labels 0: none), the outputs (0: not wanted), for the merge its two key arrays, and
    the address of an ``input_verdict`` (0: no value check)."""

    __slots__ = ("n", "slots", "launches")

    def __init__(self, n: int, dtype: torch.dtype, path: str, device: torch.device):
        index = device_index(device)
        chunks = blocks(n, MERGE_CHUNK)
        self.n, self.slots = n, chunks * MERGE_CHUNK
        if path == "counting":
            self.launches = (CompiledLaunch(RANK_MODULE.get("rank_by_score_kernel", dtype, device),
                                            (blocks(n, COUNT_BOXES),), (32 * RANK_WARPS,),
                                            RANK_MODULE.codes["rank_by_score_kernel"], index),)
        else:
            self.launches = tuple(
                CompiledLaunch(RANK_MODULE.get(name, dtype, device), (chunks,), (MERGE_CHUNK,), RANK_MODULE.codes[name],
                               index)
                for name in ("chunk_sort_kernel", "group_merge_kernel", "merge_rank_kernel"))

    def __call__(self, stream: int, boxes: int, scores: int, labels: int, order: int, sorted_boxes: int,
                 sorted_scores: int, sorted_labels: int, chunk_sorted: int = 0, group_sorted: int = 0,
                 verdict: int = 0) -> None:
        outputs = (order, sorted_boxes, sorted_scores, sorted_labels, verdict)
        if len(self.launches) == 1:
            self.launches[0](stream, boxes, scores, labels, self.n, *outputs)
        else:
            chunk_sort, group_merge, merge_rank = self.launches
            chunk_sort(stream, scores, self.n, chunk_sorted)
            group_merge(stream, self.slots, chunk_sorted, group_sorted)
            merge_rank(stream, boxes, scores, labels, self.n, self.slots, group_sorted, *outputs)


@functools.lru_cache(maxsize=256)
def rank_launches(n: int, dtype: torch.dtype, path: str | None, device: torch.device) -> RankLaunches:
    """The ``RankLaunches`` for n boxes of ``dtype`` on ``device`` (path None: by n, as
    ``rank_by_score`` picks)."""
    return RankLaunches(n, dtype, choose_rank_path(n, path), device)

