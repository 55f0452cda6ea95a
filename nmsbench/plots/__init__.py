"""Plotly figure builders: a results table in, a ``plotly.graph_objects.Figure`` out.

The dashboard (``app.py``) shows these figures and ``nmsbench plot`` writes them, styled
by :func:`style_for_print`, to PDF/PNG/SVG. They only read result tables (and, for the
suppression differences, arrays computed by :mod:`nmsbench.differences`).

    >>> rows = tables.select(tables.load_results(paths), timer=["wall"])
    >>> time_vs_n(rows)                 # median µs vs N, log-log, IQR band, one panel per scenario
    >>> speedup_vs_n(rows, "torchvision")

One module per subject: :mod:`.style` (each implementation's colour and marker, from the
registry), :mod:`.layout` (what every figure shares), :mod:`.curves` (the NMS sweep),
:mod:`.pipeline`, :mod:`.accuracy`, :mod:`.differences` and :mod:`.output` (print and
files); every public name is importable from ``nmsbench.plots``.
"""

from .style import (  # noqa: F401 (re-exported)
    EXTRA_COLORS, EXTRA_SYMBOLS, DASHES, SYMBOLS, PINNED_COLORS, PINNED_SYMBOLS, impl_style, color_map, symbol_map,
)
from .layout import (  # noqa: F401 (re-exported)
    N_AXIS, TIME_AXIS, PANEL_HEIGHT, empty_figure, PLOT_COLUMNS, log_tick_values, hollow, noisy_markers, noisy_key,
)
from .curves import (  # noqa: F401 (re-exported)
    time_vs_n, speedup_vs_n, gpu_timer_dashes, wall_vs_device, memory_vs_n, OVERLAP_AXES, time_vs_overlap, curves_for_print,
)
from .pipeline import (  # noqa: F401 (re-exported)
    STAGE_COLORS, TOTAL_COLOR, REFERENCE_COLOR, DEVICE_SYMBOLS, BATCH_AXIS, PER_IMAGE_AXIS, STAGE_NOTE, pipeline_color_map,
    pipeline_order, pipeline_time_per_image, pipeline_stage_bars, pipeline_cpu_vs_gpu,
)
from .accuracy import (  # noqa: F401 (re-exported)
    FRONT_COLOR, ACCURACY_TIME_AXIS, pareto,
)
from .differences import (  # noqa: F401 (re-exported)
    BOX_CLASSES, BOX_COLORS, DECAY_BINS, MOVED_COLORS, boxes_canvas, ANNOTATED_MAX, agreement_heatmap,
)
from .output import (  # noqa: F401 (re-exported)
    style_for_print, IMAGE_FORMATS, write_figure,
)
