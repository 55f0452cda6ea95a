"""``events``: CUDA events around each call, one sync at the end (the GPU's clock, the
host's gaps inside a call included)."""

from .. import timing
from . import Timer, min_calls, register_timer


def events_measurer(call, settings):
    runs = min_calls(settings)
    return lambda seconds: timing.event_blocks(call, min_run_time=seconds, min_runs=runs)


EVENTS = register_timer(Timer(
    name="events", devices=("cuda",), order=3, build=lambda offered: offered.op, measurer=events_measurer,
    dash="dot", help="CUDA events around each call: host-bound time on the GPU's clock"))
