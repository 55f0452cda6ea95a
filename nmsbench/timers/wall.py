"""``wall``: blocks of back-to-back calls on the CUDA-synchronizing clock, what a Python
caller waits for (:class:`nmsbench.timing.WallTimer`)."""

from .. import timing
from . import Timer, block_seconds, register_timer


def wall_measurer(call, settings):
    """``seconds -> Blocks`` of a :class:`~nmsbench.timing.WallTimer` whose block size is fixed
    here, once for every round."""
    return timing.WallTimer(call, threads=settings.threads, block_seconds=block_seconds(settings)).blocks


WALL = register_timer(Timer(
    name="wall", devices=("cpu", "cuda"), order=0, build=lambda offered: offered.op, measurer=wall_measurer,
    help="blocks of back-to-back calls, waiting for the GPU: what a Python caller waits for, launches included"))
