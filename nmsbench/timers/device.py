"""``device``: what the GPU did per call, from CUPTI's activity records (torch.profiler).

``median_us`` is the summed duration of the call's kernels, copies and sets; the extra
columns are the GPU's busy span and what the call asked of it. GPU durations: the host
gauge does not judge them. Timed in a pass of its own, after every other timer."""

from .. import timing
from . import Timer, min_calls, register_timer

COLUMNS = ("span_us", "span_iqr_us", "launches", "copies", "syncs")


def device_measurer(call, settings):
    runs = min_calls(settings)
    return lambda seconds: timing.device_blocks(call, min_run_time=seconds, min_runs=runs)


def activity_columns(t: timing.Timing) -> dict:
    """The device timer's columns of a row (busy span, launches, copies, syncs per call;
    blank for rows of other timers)."""
    return {name: "" if getattr(t, name) is None else getattr(t, name) for name in COLUMNS}


DEVICE = register_timer(Timer(
    name="device", devices=("cuda",), order=2, build=lambda offered: offered.op, measurer=device_measurer,
    extra=activity_columns, host_bound=False, dash="dash", columns=COLUMNS, separate_pass=True,
    help="what the GPU did per call, from CUPTI: summed kernel, copy and set time, busy span, launches, syncs"))
