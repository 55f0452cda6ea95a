"""``api``: the wall clock around the public call (``nmsbench.run_nms``), input checks included."""

from . import Timer, register_timer
from .wall import wall_measurer


def build_public(offered):
    """The benchmark's public call, checked once to give the op's output."""
    if offered.public is None:
        raise ValueError("the api timer needs a public call, and this benchmark offers none")
    offered.check("api", offered.public())
    return offered.public


API = register_timer(Timer(
    name="api", devices=("cpu", "cuda"), order=1, build=build_public, measurer=wall_measurer,
    help="the same clock around nmsbench.run_nms exactly as a user calls it, input validation included"))
