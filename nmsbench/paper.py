"""Paper exports: ``nmsbench plot`` (the dashboard's figures, print-styled, to PDF, PNG or
SVG) and ``nmsbench export`` (compact tables: markdown, LaTeX, CSV) from results CSVs.

Bad input is a :class:`Refused` (a ValueError naming the option at fault, or none where
the selection holds nothing to show); the command line shows it as a usage error."""

from __future__ import annotations

import sys
from pathlib import Path

from .engine.axes import split_all as _split
from .progress import console


class Refused(ValueError):
    """Bad input of a plot or an export; ``param_hint`` names the option at fault (None:
    the files and selection hold nothing to show)."""

    def __init__(self, message: str, param_hint: str | None = None):
        super().__init__(message)
        self.param_hint = param_hint


class NothingToShow(Refused):
    """The given files and selection hold nothing to show (no measured rows, no such benchmark or timer)."""


class ExportFailed(RuntimeError):
    """A figure could not be written (static export needs Chromium)."""


def _selected_results(paths, scenarios, impls, devices, timers, baseline=None, benchmarks=(), *, wants_baseline=False,
                      default_benchmark=None, apply_devices=True):
    """Load RESULTS CSVs and keep the asked-for rows: (rows, baseline); every problem is
    one clear message. Rows of `nmsbench pipeline` (benchmark=pipeline) are left out
    unless asked for (or ``default_benchmark`` is pipeline), or unless the files hold
    nothing else. With ``wants_baseline`` and no ``baseline``, the baseline is numpy (the
    reference pipeline) for pipeline rows and torchvision for sweeps (for a sweep of one
    family without it, the family's exact CPU reference: soft_nms, ...). ``apply_devices``
    False checks --device but keeps every device's rows (the caller picks them later)."""
    from . import tables

    try:
        frame = tables.load_results(paths)
    except ValueError as e:  # not a results file: bad input, exit status 2 like every other
        raise Refused(str(e), param_hint="RESULTS") from None
    files = ", ".join(Path(p).name for p in paths)
    checks = (("--benchmark", "benchmark", benchmarks), ("--scenario", "scenario", scenarios), ("--impl", "impl", impls),
              ("--device", "device", devices), ("--timer", "timer", timers))
    for hint, column, values in checks:
        known = tables.options(frame, column)
        unknown = [v for v in _split(values) if v not in known]
        if unknown:
            raise Refused(f"{', '.join(unknown)} not in {files}; it has: {', '.join(map(str, known)) or 'nothing'}",
                                     param_hint=hint)
    if baseline is not None and baseline not in tables.options(frame, "impl"):
        raise Refused(f"{baseline} not in {files}; it has: {', '.join(tables.options(frame, 'impl'))}",
                                 param_hint="--baseline")
    have = tables.options(frame, "benchmark")
    if default_benchmark and default_benchmark not in have:
        raise NothingToShow(f"no {default_benchmark} rows in {files} (benchmark: {', '.join(have) or 'none'}); "
                                   f"`nmsbench {default_benchmark} --out results/<name>.csv` makes them")
    benchmark = _split(benchmarks) or ([default_benchmark] if default_benchmark else ["nms"] if "nms" in have else [])
    frame = tables.select(frame, benchmark=benchmark)
    rows = tables.select(frame, scenario=_split(scenarios), device=_split(devices) if apply_devices else [], timer=_split(timers))
    _check_measured(rows, files)
    if wants_baseline and baseline is None and set(rows["benchmark"]) != {"accuracy"}:  # accuracy tables have no baseline
        baseline = tables.PIPELINE_BASELINE if set(rows["benchmark"]) == {"pipeline"} else tables.DEFAULT_BASELINE
        have_impls = tables.options(frame, "impl")
        families = set(tables.ok_rows(rows)["family"]) if "family" in rows.columns else set()
        if baseline not in have_impls and len(families) == 1:
            # one family without torchvision (a Soft-NMS run): its exact CPU reference, where the files have it
            from .agreement import FAMILY_REFERENCES

            baseline = FAMILY_REFERENCES.get(next(iter(families)), baseline)
        if baseline not in have_impls:
            raise Refused(f"{baseline} not in {files}; it has: {', '.join(have_impls)}; "
                                     "name one with --baseline", param_hint="--baseline")
    _check_measured(rows, files, baseline)
    return rows, baseline


def _check_measured(rows, files: str, baseline: str | None = None) -> None:
    """A clear message where the selection (or its baseline) measured nothing."""
    from . import tables

    if tables.ok_rows(rows).empty:
        counts = ", ".join(f"{n} {s}" for s, n in rows["status"].value_counts().items()) or "no rows"
        raise NothingToShow(f"no measured (status ok) rows in {files} match the selection ({counts})")
    if baseline is not None and tables.ok_rows(rows[rows["impl"] == baseline]).empty:
        raise NothingToShow(f"the baseline {baseline} has no measured rows in the selection; pick another with --baseline")


def _restrict_impls(rows, impls):
    """Rows of the chosen implementations (speedups are computed before this, on all rows)."""
    chosen = _split(impls)
    return rows[rows["impl"].isin(chosen)] if chosen else rows


PLOT_KINDS = ("curves", "time", "speedup", "timers", "memory", "overlap", "pipeline", "pipeline-stages", "pipeline-devices",
              "pareto")
PIPELINE_KINDS = ("pipeline", "pipeline-stages", "pipeline-devices")


def _stages(stages, *, one: bool = False) -> list[str]:
    from .tables import PIPELINE_STAGES

    chosen = _split(stages)
    bad = [s for s in chosen if s not in PIPELINE_STAGES]
    if bad:
        raise Refused(f"{', '.join(bad)}: choose from {', '.join(PIPELINE_STAGES)}", param_hint="--stage")
    if one and len(chosen) > 1:
        raise Refused("--kind pipeline draws one stage; --kind pipeline-stages draws them all", param_hint="--stage")
    return chosen or ["total"]


def plot(results, out, scenarios, impls, devices, timers, baseline, benchmarks, stages, kind, metric, at_n, width, height,
         scale) -> None:
    """`nmsbench plot`: the dashboard's curves from results CSV(s), for print."""
    from . import plots, tables

    if out.suffix.lower() not in plots.IMAGE_FORMATS:
        raise Refused(f"{out.name}: choose a .pdf, .png or .svg file name", param_hint="--out")
    if stages and kind not in PIPELINE_KINDS:
        raise Refused(f"--stage is for the pipeline kinds ({', '.join(PIPELINE_KINDS)})", param_hint="--stage")
    if metric and kind != "pareto":
        raise Refused("--metric is for --kind pareto (accuracy rows)", param_hint="--metric")
    if kind == "pareto":
        _plot_pareto(results, out, scenarios, impls, devices, timers, baseline, benchmarks, stages, metric or "ap", width,
                     height, scale)
        return
    if kind in PIPELINE_KINDS:
        _plot_pipeline(results, out, scenarios, impls, devices, timers, benchmarks, stages, kind, width, height, scale)
        return
    rows, baseline = _selected_results(results, scenarios, impls, devices, timers, baseline if kind in ("curves", "speedup") else None,
                                       benchmarks, wants_baseline=kind in ("curves", "speedup"))
    colors = plots.color_map(tables.options(rows, "impl"))
    show = _split(impls) or None
    shown = _restrict_impls(rows, impls)  # speedups need the baseline's rows even when it is not shown
    if tables.ok_rows(shown).empty:
        raise NothingToShow("no measured rows of the chosen implementations in the selection")
    if kind == "overlap" and at_n is not None and at_n not in set(tables.ok_rows(shown)["n"]):
        raise Refused(f"no measured rows at N = {at_n}; the selection has N = "
                                 f"{', '.join(str(int(n)) for n in tables.options(tables.ok_rows(shown), 'n'))}", param_hint="--at-n")
    panels = max(tables.ok_rows(shown)["scenario"].nunique(), 1)
    if kind == "curves":
        fig, size = plots.curves_for_print(rows, baseline, show=show, colors=colors), (max(360 * panels, 700), 720)
    elif kind == "time":
        fig, size = plots.time_vs_n(shown, colors=colors), (1100, None)
    elif kind == "speedup":
        fig, size = plots.speedup_vs_n(rows, baseline, show=show, colors=colors), (1100, None)
    elif kind == "timers":
        try:
            both = _restrict_impls(_selected_results(results, scenarios, impls, devices, ("wall", "device", "events"), None,
                                                     benchmarks)[0], impls)
        except NothingToShow:
            raise
        except Refused:  # the files have no device timer at all
            both = shown.iloc[0:0]
        fig, size = plots.wall_vs_device(both, colors=colors), (1100, None)
    elif kind == "memory":
        fig, size = plots.memory_vs_n(shown, colors=colors), (1100, None)
    else:
        fig, size = plots.time_vs_overlap(shown, at_n, colors=colors), (900, 560)
    if fig is None:
        raise NothingToShow({
            "timers": "the selection has no GPU-timer rows to plot (CUDA runs record them with --timer device or events)",
            "memory": "the selection has no peak-memory values to plot (CUDA runs record them)",
        }[kind])
    titles = {"time": "Median time vs N (band: median ± IQR/2)", "speedup": f"Speedup vs {baseline} (above 1 = faster)",
              "timers": "Wall time (solid) vs GPU time (dashed: kernels, copies and sets; dotted: CUDA events)",
              "memory": "Peak device memory per call",
              "overlap": f"Time vs realized overlap at N = {(fig.layout.meta or {}).get('n', '')}"}
    if kind in titles:
        fig.update_layout(title_text=titles[kind])
    _write_print(fig, out, width or size[0], height or size[1] or int(fig.layout.height or 600) + 60, scale)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes): {kind}, {tables.ok_rows(shown)['impl'].nunique()} implementations, "
                  f"{panels} scenario(s)")




def export(results, fmt, scenarios, impls, devices, timers, baseline, benchmarks, stages, metric, out) -> None:
    """`nmsbench export`: a compact table from results CSV(s)."""
    from . import tables

    # every device's rows first: a cuda pipeline row is compared with the numpy reference on the CPU
    rows, baseline = _selected_results(results, scenarios, impls, devices, timers, baseline, benchmarks, wants_baseline=True,
                                       apply_devices=False)
    if "accuracy" in set(rows["benchmark"]):
        _export_accuracy(rows, fmt, impls, devices, baseline, stages, metric, out)
        return
    if metric:
        raise Refused("--metric is for accuracy rows (--benchmark accuracy)", param_hint="--metric")
    if set(rows["benchmark"]) == {"pipeline"}:
        chosen = _stages(stages)
        try:
            table = tables.pipeline_table(rows, baseline, impls=_split(impls) or None, stages=chosen,
                                          devices=_split(devices) or None)
        except ValueError:
            raise NothingToShow("no measured rows of the chosen pipelines, devices and stages in the selection") from None
        _write_or_echo(tables.render_pipeline_table(table, fmt), out,
                       f"{table['impl'].nunique()} pipelines x {table['batch'].nunique()} batch sizes")
        return
    if stages:
        raise Refused("--stage picks stages of pipeline rows; this selection has sweep rows", param_hint="--stage")
    rows = tables.select(rows, device=_split(devices))
    _check_measured(rows, ", ".join(Path(p).name for p in results), baseline)
    table = tables.speedup_table(rows, baseline, impls=_split(impls) or None)
    if table.empty:
        raise NothingToShow("no measured rows of the chosen implementations in the selection")
    _write_or_echo(tables.render_table(table, fmt), out,
                   f"{table['n'].nunique()} box counts x {table['impl'].nunique()} implementations")




def _write_print(fig, out: Path, width: int, height: int, scale: float) -> None:
    from . import plots

    fig = plots.style_for_print(fig, width=width, height=height)
    try:
        plots.write_figure(fig, out, width=width, height=height, scale=scale)
    except Exception as e:  # kaleido needs Chrome/Chromium; say so instead of a traceback
        raise ExportFailed(
            f"could not write {out} ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else 'no message'}); "
            "static export uses kaleido, which needs Chromium (Debian: apt-get install chromium)") from None


def _plot_pipeline(results, out, scenarios, impls, devices, timers, benchmarks, stages, kind, width, height, scale):
    """`nmsbench plot --kind pipeline*`: the dashboard's Pipeline tab figures, for print."""
    from . import plots, tables

    if _split(benchmarks) not in ([], ["pipeline"]):
        raise Refused(f"--kind {kind} draws `nmsbench pipeline` rows; leave --benchmark out", param_hint="--benchmark")
    stage = _stages(stages, one=True)[0]
    rows, _ = _selected_results(results, scenarios, impls, devices, timers, None, (), default_benchmark="pipeline")
    rows = _restrict_impls(rows, impls)
    measured = tables.per_image(rows)
    if measured.empty:
        raise NothingToShow("no measured rows of the chosen pipelines in the selection")
    colors = plots.pipeline_color_map(tables.options(measured, "impl"))
    if kind == "pipeline":
        if measured[measured["stage"] == stage].empty:
            raise Refused(f"no measured {stage} rows; the selection has stages {', '.join(tables.options(measured, 'stage'))}",
                                     param_hint="--stage")
        fig = plots.pipeline_time_per_image(rows, stage=stage, colors=colors)
        fig.update_layout(title_text=f"Time per image vs batch size ({stage}; one call on the batch / batch size)")
    elif kind == "pipeline-stages":
        fig = plots.pipeline_stage_bars(rows)
        fig.update_layout(title_text="Time per image by stage (bars: decode and nms timed alone; mark: total, end to end)")
    else:
        fig = plots.pipeline_cpu_vs_gpu(rows, colors=colors)
        if fig is None:
            raise NothingToShow("the selection has no pipeline with wall-timer total rows on both cpu and cuda of one "
                                       "machine; `nmsbench pipeline --device cpu,cuda` on a GPU machine makes them")
        fig.update_layout(title_text="CPU time / GPU time per image, end to end (above 1: the GPU is faster)")
    _write_print(fig, out, width or 1100, height or int(fig.layout.height or 600) + 80, scale)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes): {kind}, {measured['impl'].nunique()} pipelines, "
                  f"{measured['scenario'].nunique()} source(s), batch sizes "
                  f"{', '.join(str(int(b)) for b in tables.options(measured, 'batch'))}")


def _refuse_unused(what: str, **given) -> None:
    """A usage error for an option (``--name``) that ``what`` has no use for, where given."""
    for name, value in given.items():
        if value:
            raise Refused(f"not used by {what}", param_hint=f"--{name}")


def _plot_pareto(results, out, scenarios, impls, devices, timers, baseline, benchmarks, stages, metric, width, height, scale):
    """`nmsbench plot --kind pareto`: the dashboard's Accuracy tab figure, for print."""
    from . import plots, tables

    _refuse_unused("--kind pareto", baseline=baseline, stage=stages)
    if _split(benchmarks) not in ([], ["accuracy"]):
        raise Refused("--kind pareto draws `nmsbench accuracy` rows; leave --benchmark out", param_hint="--benchmark")
    rows, _ = _selected_results(results, scenarios, impls, devices, timers, None, (), default_benchmark="accuracy")
    rows = _restrict_impls(rows, impls)
    label = tables.ACCURACY_LONG_NAMES[metric]
    fig = plots.pareto(rows, metric, colors=plots.color_map(tables.options(rows, "impl")))
    meta = fig.layout.meta or {}
    if meta.get("empty"):
        raise NothingToShow(meta["message"])
    fig.update_layout(title_text=f"{label} vs NMS time per image (dashed: the Pareto front, ringed: its settings)")
    panels = sum(1 for name in fig.layout if name.startswith("xaxis"))
    _write_print(fig, out, width or (1000 if panels == 1 else 1400), height or int(fig.layout.height or 600) + 120, scale)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes): pareto of {label}, {meta['settings']} settings, "
                  f"{meta['front']} on the front, {panels} panel(s)")
    if meta["without_metric"]:
        where = f" ({', '.join(meta['without_metric_in'])})" if meta["without_metric_in"] else ""
        console.print(f"not drawn: {meta['without_metric']} settings without a value of {label}{where}")
    if meta["not_measured"]:
        console.print(f"not drawn: {meta['not_measured']} error or skipped rows")


def _export_accuracy(rows, fmt, impls, devices, baseline, stages, metric, out) -> None:
    """`nmsbench export` of accuracy rows: one row per group and setting (tables.accuracy_points)."""
    from . import tables

    if set(rows["benchmark"]) != {"accuracy"}:
        raise Refused("accuracy rows make a table of their own: --benchmark accuracy", param_hint="--benchmark")
    _refuse_unused("an accuracy table", baseline=baseline, stage=stages)
    rows = _restrict_impls(tables.select(rows, device=_split(devices)), impls)
    points = tables.accuracy_points(rows, metric or "ap")
    if points.empty:
        raise NothingToShow("no measured accuracy rows of the chosen implementations and devices in the selection")
    _write_or_echo(tables.render_accuracy_table(points, fmt), out,
                   f"{len(points)} settings of {points['impl'].nunique()} implementations, {int(points['front'].sum())} on the front")


def _write_or_echo(text: str, out: Path | None, summary: str) -> None:
    """An exported table to ``out`` (saying what it holds) or to stdout."""
    if out:
        out.write_text(text)
        console.print(f"wrote {out}: {summary}")
    else:
        sys.stdout.write(text)


