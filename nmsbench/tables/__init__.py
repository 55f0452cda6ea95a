"""Result tables for people: loading several CSVs, selecting rows, speedups, paper tables.

Everything here reads result tables (``read_results`` frames) and returns tables; the
figure builders in :mod:`nmsbench.plots`, the dashboard (``app.py``) and the ``plot`` and
``export`` commands all go through it, so they show the same numbers.

    >>> frame = load_results(["results/h200-host-cpu.csv"])
    >>> rows = select(frame, scenario=["clustered"], timer=["wall"])
    >>> table = speedup_table(rows, baseline="torchvision")      # one row per case and impl
    >>> print(render_table(table, "markdown"))                  # N x implementation

One module per subject: :mod:`.core` (NMS sweeps: loading, selecting, speedups, rendering),
:mod:`.pipeline`, :mod:`.accuracy` and :mod:`.runs` (the files' environment); every public
name is importable from ``nmsbench.tables``.
"""

from .core import (  # noqa: F401 (re-exported)
    NUMERIC_COLUMNS, TEXT_COLUMNS, CASE_KEYS, SERIES_DIMS, FILTERS, OPTIONAL_FILTERS, DEFAULT_BASELINE, ACCURACY_METRICS, prepare,
    prepare_many, load_results, concat, options, select, ok_rows, not_measured, varying, LABEL_ORDER, add_series, latest_runs, widest_n,
    lines_without, aggregate, with_speedup, variant_labels, group_dims, speedup_table, wide_table, format_us, format_speedup, caption,
    render_table,
)
from .noise import (  # noqa: F401 (re-exported)
    NOISY_MARK, HOLLOW_NOTE, noisy_mask, clean_rows, noise_kind, noise_kinds, joined_reasons, noisy_footnote, with_noise,
)
from .pipeline import (  # noqa: F401 (re-exported)
    PIPELINE_BASELINE, PIPELINE_STAGES, PIPELINE_CASE_KEYS, PIPELINE_DIMS, pipeline_machine, pipeline_rows, per_image,
    with_pipeline_speedup,
    pipeline_table, wide_pipeline_table, PIPELINE_GROUP_LABELS, pipeline_caption, render_pipeline_table, pipeline_agreement,
)
from .accuracy import (  # noqa: F401 (re-exported)
    ACCURACY_LONG_NAMES, ACCURACY_NUMERIC, ACCURACY_DIMS, ACCURACY_SETTING, ACCURACY_GROUP_LABELS, accuracy_rows, pareto_front,
    accuracy_points, accuracy_caption, accuracy_table, render_accuracy_table,
)
from .runs import (  # noqa: F401 (re-exported)
    environment_table, runs_table,
)
