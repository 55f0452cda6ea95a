"""``graph``: the op's padded, sync-free form captured once in a CUDA graph, its replays
timed like ``wall`` (replay plus synchronize); ``graph_safe`` backends only."""

from .. import timing
from . import Timer, register_timer
from .wall import wall_measurer


def build_replay(offered):
    """The replay of ``offered.capture`` captured once, checked to give the op's output."""
    if offered.capture is None:
        raise ValueError("the graph timer needs a capturable call, and this benchmark offers none")
    graph, output = timing.capture_graph(offered.capture)
    graph.replay()
    offered.check("graph", output)
    return graph.replay


GRAPH = register_timer(Timer(
    name="graph", devices=("cuda",), order=4, build=build_replay, measurer=wall_measurer, needs_graph_safe=True,
    help="replays of the padded op captured in a CUDA graph, timed like wall; graph_safe backends only"))
