"""Result tables for NMS sweeps: loading several CSVs, selecting rows, speedups, paper tables."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..results import ENV_COLUMNS, read_results
from .noise import NOISY_MARK, joined_reasons, noisy_footnote, with_noise

NUMERIC_COLUMNS = [
    "schema_version", "overlap", "classes", "n", "iou_threshold", "seed", "median_us", "iqr_us", "runs",
    "rel_spread", "threads", "peak_mem_bytes", "kept", "ref_kept", "jaccard", "extra", "missing",
    "mean_max_iou", "greedy_suppressed_frac",
    "input_size", "n_cap", "batch", "candidates", "mismatched",  # schema 2
]
TEXT_COLUMNS = ["impl", "family", "device", "dtype", "timer", "scenario", "status", "params", "error",
                "benchmark", "image", "stage", "canvas", "source_params", *ENV_COLUMNS]
# What identifies one measured case apart from the implementation: rows that agree on all
# of these were timed on identical inputs on the same hardware, so their times compare.
# (Columns a file lacks are left out; schema 2 added benchmark, image, ..., stage.)
CASE_KEYS = ["hardware", "benchmark", "device", "dtype", "timer", "threads", "scenario", "canvas", "image", "input_size",
             "overlap", "classes", "n", "iou_threshold", "seed", "batch", "stage"]
# Dimensions that split one implementation into several lines when the selection mixes them
# (git_commit: two runs of the same case from different commits are two lines, not one).
SERIES_DIMS = ["hardware", "benchmark", "device", "dtype", "timer", "threads", "canvas", "image", "input_size", "overlap",
               "iou_threshold", "classes", "params", "batch", "stage", "git_commit"]
# The filters the dashboard offers, as (column, label); OPTIONAL ones only where they vary.
FILTERS = [
    ("benchmark", "benchmark"), ("hardware", "machine / GPU"), ("device", "device"), ("dtype", "dtype"),
    ("impl", "implementation"), ("family", "family"), ("scenario", "scenario"), ("image", "recording"),
    ("overlap", "overlap knob"), ("iou_threshold", "IoU threshold"), ("timer", "timer"), ("source", "results file"),
]
OPTIONAL_FILTERS = {"benchmark", "image"}
DEFAULT_BASELINE = "torchvision"
# The COCO metrics of an accuracy row (fractions 0..1) and their names in figures and tables.
ACCURACY_METRICS = {"ap": "AP", "ap50": "AP50", "ap75": "AP75", "ar100": "AR100", "ar100_crowded": "AR100-crowded"}


def machine_label(frame: pd.DataFrame, chip: pd.Series) -> pd.Series:
    """Each row's "host name: chip", with a stand-in for a name or chip the file left empty
    (``chip``: the model a view names the machine by)."""
    return frame["machine"].replace("", "unknown machine") + ": " + chip.replace("", "unknown hardware")


def prepare(frame: pd.DataFrame, source: str | None = None) -> pd.DataFrame:
    """A results frame made uniform for display: numbers as numbers (bad cells become NaN),
    text as text, plus ``source`` (the file it came from: ``source``, else the frame's own
    ``source`` column, as :func:`prepare_many` leaves it) and ``hardware`` (machine and the
    GPU for cuda rows, the CPU model for cpu rows). Extra columns are kept as they are."""
    frame = frame.copy()
    for column in NUMERIC_COLUMNS:
        if column in frame.columns:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    for column in TEXT_COLUMNS:
        if column not in frame.columns:
            frame[column] = ""
        values = frame[column]
        frame[column] = values.astype(object).where(values.notna(), "").astype(str).str.strip()
    frame["status"] = frame["status"].str.lower()
    frame["params"] = frame["params"].replace("", "{}")
    frame["benchmark"] = frame["benchmark"].replace("", "nms")  # schema-1 files hold sweeps only
    if source is not None or "source" not in frame.columns:
        frame["source"] = source or ""
    gpu_rows = frame["device"].eq("cuda") & frame["gpu"].ne("")
    chip = frame["cpu"].where(~gpu_rows, frame["gpu"])
    # a GPU machine's host CPU is named with its GPU: virtual machines share host names and
    # CPU models, and a GPU machine's CPU rows must not be taken for another machine's
    hosted = ~gpu_rows & frame["gpu"].ne("") & frame["cpu"].ne("")
    chip = chip.where(~hosted, chip + " (host of " + frame["gpu"] + ")")
    frame["hardware"] = machine_label(frame, chip)
    return frame


def prepare_many(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Raw results frames (as :func:`~nmsbench.results.read_results` gives them), each with
    its ``source`` column, stacked and made uniform (:func:`prepare`) in one pass: the work is per
    column, so one pass over all the files costs about what one file does."""
    frames = [f for f in frames if f is not None]
    if not frames:
        return concat([])
    return prepare(pd.concat(frames, ignore_index=True, sort=False))


def load_results(paths: Iterable, names: Sequence[str] | None = None) -> pd.DataFrame:
    """Read and concatenate results CSVs (paths or file-like objects; ``names`` labels
    them). Raises ``ValueError`` naming the first file that is not a results file."""
    paths = list(paths)
    names = list(names) if names else [Path(str(path)).name for path in paths]
    return prepare_many([read_results(path, name=name).assign(source=name) for path, name in zip(paths, names)])


def concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Prepared frames stacked; an empty frame with the usual columns when there are none."""
    frames = [f for f in frames if f is not None]
    if not frames:
        return prepare(pd.DataFrame(columns=["schema_version", *CASE_KEYS[1:], "impl", "family", "params", "status", "median_us"]))
    return pd.concat(frames, ignore_index=True, sort=False)


def options(frame: pd.DataFrame, column: str) -> list:
    """The distinct values of a column, sorted (numbers numerically), without blanks."""
    if column not in frame.columns:
        return []
    values = frame[column].dropna().unique().tolist()
    values = [v for v in values if v != ""]
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def select(frame: pd.DataFrame, **choices) -> pd.DataFrame:
    """Rows whose ``column`` is one of ``choices[column]``; an empty or None choice keeps
    every value. Numbers match with a tolerance (0.1 vs 0.1000000001)."""
    mask = pd.Series(True, index=frame.index)
    for column, wanted in choices.items():
        if wanted is None or (isinstance(wanted, (list, tuple, set)) and not wanted):
            continue
        if column not in frame.columns:
            raise ValueError(f"the results have no column {column!r}")
        wanted = list(wanted) if isinstance(wanted, (list, tuple, set)) else [wanted]
        values = frame[column]
        if pd.api.types.is_numeric_dtype(values):
            numbers = values.to_numpy(dtype=float)
            hit = np.zeros(len(numbers), dtype=bool)
            for w in wanted:
                hit |= np.isclose(numbers, float(w), rtol=1e-9, atol=1e-12)
            mask &= hit
        else:
            mask &= values.isin([str(w) for w in wanted])
    return frame[mask]


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that measured something: status ok and a positive median."""
    ok = frame["status"].eq("ok") & frame["median_us"].gt(0)
    return frame[ok]


def not_measured(frame: pd.DataFrame) -> pd.DataFrame:
    """Error and skipped rows counted by implementation, device, status and message."""
    rest = frame[~frame.index.isin(ok_rows(frame).index)]
    if rest.empty:
        return pd.DataFrame(columns=["impl", "device", "status", "error", "rows"])
    return (rest.groupby(["impl", "device", "status", "error"], dropna=False).size()
            .rename("rows").reset_index().sort_values(["status", "impl", "device"]))


def varying(frame: pd.DataFrame, dims: Sequence[str] = SERIES_DIMS) -> list[str]:
    """The dimensions that take more than one value in ``frame``."""
    return [d for d in dims if d in frame.columns and frame[d].nunique(dropna=False) > 1]


# How a label spells a number of these dimensions
_NUMBER_LABELS = {"threads": "{:g} threads", "batch": "batch {:g}", "input_size": "{:g} px", "overlap": "knob {:g}",
                  "iou_threshold": "IoU {:g}", "classes": "{:g} classes"}


def _fmt_dim(dim: str, value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return f"no {dim}"
    if dim == "git_commit":
        return f"@{value}" if value else "no commit"
    if dim in _NUMBER_LABELS:
        return _NUMBER_LABELS[dim].format(value)
    if dim == "params":
        return "default params" if value == "{}" else str(value)
    return str(value)


# When several dimensions vary, a label names the first ones in this order and leaves out
# any that the ones before already determine (hardware when each device ran on one machine).
LABEL_ORDER = ["benchmark", "device", "timer", "dtype", "threads", "scenario", "canvas", "image", "input_size", "overlap",
               "iou_threshold", "classes", "params", "batch", "stage", "hardware", "git_commit"]


def add_series(frame: pd.DataFrame, dims: Sequence[str] | None = None, shown_by: Sequence[str] = ()) -> pd.DataFrame:
    """Add ``series``: the implementation's name plus the dimensions in ``dims`` (default:
    those that vary) that are needed to tell its rows apart (``torchvision · cuda``), so
    one line never mixes different kinds of rows. Dimensions in ``shown_by`` are told
    apart elsewhere (panels, axes) and so are not named, nor what they determine."""
    frame = frame.copy()
    dims = varying(frame) if dims is None else [d for d in dims if d in frame.columns]
    dims = sorted(dims, key=lambda d: LABEL_ORDER.index(d) if d in LABEL_ORDER else len(LABEL_ORDER))
    known = [d for d in shown_by if d in frame.columns]
    kept: list[str] = []
    for dim in dims:
        if dim in known:
            continue
        if frame.empty or frame.groupby(["impl", *known, *kept], dropna=False)[dim].nunique(dropna=False).max() > 1:
            kept.append(dim)
    dims = kept
    label = frame["impl"].astype(str)
    for dim in dims:
        if dim == "params":  # only where an implementation has several: the parameters that differ
            suffix = [variant[len(name):].strip() for variant, name in zip(variant_labels(frame), frame["impl"].astype(str))]
            part = pd.Series([" · " + text if text else "" for text in suffix], index=frame.index)
        else:
            part = " · " + frame[dim].map(lambda v, d=dim: _fmt_dim(d, v))
        if dim == "threads" and "device" in frame.columns:  # host threads say nothing about a GPU kernel's line
            part = part.where(frame["device"].ne("cuda"), "")
        label = label + part
    frame["series"] = label
    return frame


def latest_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """For each case and implementation (same hardware, device, timer, scenario, N, ...),
    only the rows of the newest results file that measured it (newest by the file's latest
    ``timestamp``): the dashboard's default, one line per implementation and machine
    rather than one per commit. Files that measured other cases keep those rows."""
    if frame.empty or "source" not in frame.columns:
        return frame
    stamps = frame["timestamp"] if "timestamp" in frame.columns else pd.Series("", index=frame.index)
    newest = stamps.groupby(frame["source"]).transform("max")
    order = pd.Series(list(zip(newest, frame["source"])), index=frame.index).rank(method="dense")
    keys = [k for k in [*CASE_KEYS, "impl", "params"] if k in frame.columns]
    best = order.groupby([frame[k] for k in keys], dropna=False).transform("max")
    return frame[order.eq(best)]


def widest_n(frame: pd.DataFrame) -> int | None:
    """The largest N at which the most lines (implementation, hardware, device, threads)
    have measured rows: a default N that shows every implementation of the selection on
    every machine (None when nothing is measured)."""
    ok = ok_rows(frame)
    if ok.empty:
        return None
    keys = [k for k in ("impl", "hardware", "device", "threads") if k in ok.columns]
    counts = ok.groupby("n")[keys].apply(lambda part: len(part.drop_duplicates()))
    return int(counts[counts == counts.max()].index.max())


LINE_KEYS = ("impl", "hardware", "device", "threads", "params", "canvas")  # what makes two rows one curve's


def lines_without(frame: pd.DataFrame, n: int) -> list[str]:
    """The lines (implementation, machine, device, threads, parameters, canvas) with measured
    rows but none at ``n``, each named by what sets it apart ("soft_torch · vm: <its GPU>"):
    what a chart at one N cannot draw, for its caption."""
    ok = ok_rows(frame)
    keys = [k for k in LINE_KEYS if k in ok.columns]
    if ok.empty or not keys:
        return []
    lines = ok[keys].astype(str).drop_duplicates()
    there = ok.loc[ok["n"] == n, keys].astype(str).drop_duplicates()
    absent = lines.merge(there, how="left", indicator=True).query("_merge == 'left_only'")[keys]
    # an implementation's lines told apart by the keys that vary among them (one line: its name alone)
    varying = {impl: [k for k in keys if k != "impl" and part[k].nunique() > 1] for impl, part in lines.groupby("impl")}
    return sorted(" · ".join([row["impl"], *(row[k] for k in varying[row["impl"]])]) for _, row in absent.iterrows())


def aggregate(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per ``keys``: the median of the rows' medians and IQRs (rows repeated over
    seeds or files), the number of rows folded and the first of every other column."""
    keys = list(keys)
    if frame.empty:
        return frame.assign(rows=pd.Series(dtype="int64"))
    agg = {c: "first" for c in frame.columns if c not in keys}
    for column in ("median_us", "iqr_us", "peak_mem_bytes", "mean_max_iou", "greedy_suppressed_frac", "jaccard",
                   "span_us", "launches", "copies", "syncs", *ACCURACY_METRICS):
        if column in frame.columns:
            agg[column] = "median"
    noisy = "noisy" in frame.columns
    if noisy:  # a point is noisy where any row folded into it is; its reasons are all of theirs
        frame = with_noise(frame)
        agg["noisy"] = "max"
        agg.pop("noise", None)
    out = frame.groupby(keys, dropna=False, sort=True).agg(agg)
    out["rows"] = frame.groupby(keys, dropna=False, sort=True).size()
    if noisy:
        out["noisy"] = out["noisy"].astype(bool)
        marked = frame[frame["noisy"]]
        reasons = marked.groupby(keys, dropna=False, sort=True)["noise"].agg(joined_reasons) if not marked.empty else None
        out["noise"] = "" if reasons is None else reasons.reindex(out.index).fillna("")
    return out.reset_index()


def with_speedup(frame: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> pd.DataFrame:
    """Measured rows with ``baseline_us`` and ``speedup`` = baseline median / own median,
    matched on the same case (hardware, device, dtype, timer, scenario, knob, n, IoU,
    seed), so > 1 means faster than the baseline. Where the baseline ran the case with
    several parameter sets (Soft-NMS's two kernels), a row is matched with the baseline's
    row of its own parameters, never with a mix of them. A row on a device the baseline
    never runs on is matched with the baseline on the same machine's other device (a CUDA
    backend against a CPU-only reference such as soft_nms), where that is one device and
    thread count; a row without a baseline twin is dropped."""
    ok = ok_rows(frame)
    keys = [k for k in CASE_KEYS if k in ok.columns]
    base = ok[ok["impl"] == baseline]
    if base.empty:
        return ok.assign(baseline_us=pd.Series(dtype=float), speedup=pd.Series(dtype=float)).iloc[0:0]
    if "params" not in ok.columns:
        ok, base = ok.assign(params="{}"), base.assign(params="{}")
    merged = _match_baseline(ok, base, keys)
    # a baseline that never runs on a row's device (a CUDA backend against a CPU-only
    # reference): the baseline on the same machine's other device, where it ran the case
    # there once
    machine = [k for k in ("machine", "gpu") if k in ok.columns]
    if machine:
        elsewhere = [k for k in keys if k not in ("hardware", "device", "threads")] + machine
        missing = merged["baseline_us"].isna() & ~merged["device"].isin(set(base["device"]))
        once = base.groupby(elsewhere, dropna=False)["device"].transform("nunique").eq(1) & \
            base.groupby(elsewhere, dropna=False)["threads"].transform("nunique").eq(1)
        other = _match_baseline(merged.loc[missing, ok.columns], base[once], elsewhere)
        merged = pd.concat([merged[~missing], other], ignore_index=True)
    merged = merged[merged["baseline_us"].notna()]
    merged["speedup"] = merged["baseline_us"] / merged["median_us"]
    return merged.reset_index(drop=True)


def _match_baseline(rows: pd.DataFrame, base: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``rows`` with ``baseline_us``: the baseline's median on the same ``keys`` and the same
    parameters, or, where the baseline ran those keys with one parameter set only, that
    one's (NaN where neither)."""
    variants = base.groupby(keys, dropna=False)["params"].transform("nunique")
    same_params = base.groupby([*keys, "params"], dropna=False)["median_us"].median().rename("same_params_us")
    one_params = base[variants.eq(1)].groupby(keys, dropna=False)["median_us"].median().rename("one_params_us")
    merged = rows.merge(same_params.reset_index(), on=[*keys, "params"], how="left")
    merged = merged.merge(one_params.reset_index(), on=keys, how="left")
    merged["baseline_us"] = merged["same_params_us"].fillna(merged["one_params_us"])
    return merged.drop(columns=["same_params_us", "one_params_us"])


def variant_labels(frame: pd.DataFrame) -> pd.Series:
    """Each row's implementation as a table names it: the name alone, or, for an
    implementation the selection holds with several parameter sets, the name and the
    parameters that differ between them (``soft_nms kernel=linear``)."""
    if "params" not in frame.columns or frame.empty:
        return frame["impl"].astype(str)
    labels = frame["impl"].astype(str).copy()
    for impl, part in frame.groupby("impl"):
        sets = {text: _params_dict(text) for text in part["params"].unique()}
        if len(sets) < 2:
            continue
        differing = sorted({key for values in sets.values() for key in values
                            if len({json.dumps(v.get(key), sort_keys=True) for v in sets.values()}) > 1})
        for text, values in sets.items():
            shown = " ".join(f"{key}={values.get(key, '-')}" for key in differing)
            labels[part.index[part["params"].eq(text)]] = f"{impl} {shown}"
    return labels


def _params_dict(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"params": text}
    return value if isinstance(value, dict) else {"params": text}


def group_dims(frame: pd.DataFrame, dims: Sequence[str]) -> list[str]:
    """The dimensions of ``dims`` (in that order) that vary in ``frame``, leaving out any
    that the ones before it already determine: a table's group columns. ``git_commit``
    splits the table only where one implementation and parameter set (a column) has rows
    of several commits: a run resumed at a later commit for other parameters is one table."""
    groups: list[str] = []
    for dim in dims:
        if dim not in frame.columns or frame[dim].nunique() <= 1:
            continue
        within = [*groups, *(c for c in ("impl", "params") if c in frame.columns)] if dim == "git_commit" else groups
        if frame.groupby(within or (lambda _: 0))[dim].nunique().max() > 1:
            groups.append(dim)
    return groups


def speedup_table(frame: pd.DataFrame, baseline: str = DEFAULT_BASELINE, impls: Sequence[str] | None = None) -> pd.DataFrame:
    """The export table, long form: one row per case group x N x implementation with the
    median µs, the IQR µs and the speedup vs ``baseline`` (NaN where the case has no
    baseline row). Group columns are the case dimensions that vary in the selection."""
    ok = ok_rows(frame)
    if ok.empty:
        raise ValueError("no measured (status ok) rows in the selection")
    groups = group_dims(ok, ["benchmark", "device", "timer", "dtype", "threads", "scenario", "canvas", "image", "input_size", "overlap",
                             "iou_threshold", "classes", "seed", "batch", "stage", "hardware", "git_commit"])
    if impls:  # by implementation name: every parameter set of a chosen one
        ok = ok[ok["impl"].isin(list(impls)) | ok["impl"].eq(baseline)]
    speed = with_speedup(ok, baseline)
    if impls:
        ok, speed = ok[ok["impl"].isin(list(impls))], speed[speed["impl"].isin(list(impls))]
    # an implementation run with several parameter sets is one column each, never a mix
    if "params" in ok.columns and not ok.empty:
        label_of = dict(zip(zip(ok["impl"], ok["params"]), variant_labels(ok)))
        ok = ok.assign(impl=[label_of[key] for key in zip(ok["impl"], ok["params"])])
        speed = speed.assign(impl=[label_of[key] for key in zip(speed["impl"], speed["params"])])  # rows of ok
    rows = aggregate(ok, [*groups, "n", "impl"])
    if not speed.empty:
        speed = speed.groupby([*groups, "n", "impl"], dropna=False)["speedup"].median().reset_index()
        rows = rows.merge(speed, on=[*groups, "n", "impl"], how="left")
    else:
        rows["speedup"] = float("nan")
    order = _impl_order(rows["impl"].unique(), baseline)
    rows["impl"] = pd.Categorical(rows["impl"], categories=order, ordered=True)
    rows = rows.sort_values([*groups, "n", "impl"]).reset_index(drop=True)
    rows["impl"] = rows["impl"].astype(str)
    counted = "launches" in rows.columns and pd.to_numeric(rows["launches"], errors="coerce").notna().any()
    per_call = ["launches", "copies", "syncs"] if counted else []  # device-timer rows: what a call asks of the GPU
    noise = ["noisy", "noise"] if "noisy" in rows.columns else []  # a cell is noisy where any row folded into it is
    table = rows[[*groups, "n", "impl", "median_us", "iqr_us", "speedup", *per_call, *noise]].copy()
    table.attrs.update(groups=groups, baseline=baseline, impls=order)
    return table


def _impl_order(impls: Iterable[str], baseline: str) -> list[str]:
    """The baseline first (each of its parameter sets), then the others by name."""
    impls = sorted(set(impls))
    first = [i for i in impls if i == baseline or i.startswith(baseline + " ")]
    return first + [i for i in impls if i not in first]


def wide_table(table: pd.DataFrame) -> pd.DataFrame:
    """The long ``speedup_table`` as N x implementation: one row per group and N, for
    each implementation the columns ``<impl> median_us``, ``<impl> noisy`` (where the rows
    say: True where the median is a noisy measurement's) and ``<impl> speedup`` (and
    ``<impl> launches`` where device-timer rows counted them)."""
    groups = table.attrs.get("groups", [])
    impls = table.attrs.get("impls") or _impl_order(table["impl"].unique(), table.attrs.get("baseline", ""))
    index = [*groups, "n"]
    values = ["median_us", *(["noisy"] if "noisy" in table.columns else []), "speedup",
              *(["launches"] if "launches" in table.columns else [])]
    wide = table.assign(**({"noisy": table["noisy"].astype(object)} if "noisy" in table.columns else {})).pivot_table(
        index=index, columns="impl", values=values, aggfunc="first", dropna=False)
    columns, data = [], {}
    for impl in impls:
        for value in values:
            name = f"{impl} {value}"
            columns.append(name)
            data[name] = wide[(value, impl)] if (value, impl) in wide.columns else float("nan")
    out = pd.DataFrame(data, index=wide.index)[columns].reset_index()
    out.attrs.update(table.attrs)
    return out


def format_us(value: float) -> str:
    """Microseconds for a table cell: 3 significant digits below 100, whole numbers above."""
    if value is None or pd.isna(value):
        return ""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_speedup(value: float) -> str:
    """Two decimals, or two significant digits below 0.1 (0.0075, not 0.00)."""
    if value is None or pd.isna(value):
        return ""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def _group_label(dim: str) -> str:
    return {"hardware": "machine", "iou_threshold": "IoU", "overlap": "knob", "git_commit": "commit",
            "image": "recording"}.get(dim, dim)


def _cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, body rows and alignments of the printable N x implementation table."""
    groups = table.attrs.get("groups", [])
    impls = table.attrs.get("impls") or sorted(table["impl"].unique())
    wide = wide_table(table)
    header = [_group_label(g) for g in groups] + ["N"] + list(impls)
    body = []
    for _, row in wide.iterrows():
        cells = [str(row[g]) if not isinstance(row[g], float) else f"{row[g]:g}" for g in groups] + [f"{int(row['n']):,}"]
        for impl in impls:
            median, speed = row[f"{impl} median_us"], row[f"{impl} speedup"]
            launches = row.get(f"{impl} launches", float("nan"))
            if pd.isna(median):
                cells.append("")
                continue
            time = format_us(median) + (NOISY_MARK if _is_true(row.get(f"{impl} noisy")) else "")
            cell = time if pd.isna(speed) else f"{time} ({format_speedup(speed)}×)"
            cells.append(cell if pd.isna(launches) else f"{cell} [{launches:g}]")
        body.append(cells)
    align = ["l"] * len(groups) + ["r"] * (1 + len(impls))
    return header, body, align


def _is_true(value) -> bool:
    """A wide table's ``<impl> noisy`` cell: True only for a true boolean (blank: no row)."""
    return isinstance(value, (bool, np.bool_)) and bool(value)


def caption(table: pd.DataFrame) -> str:
    baseline = table.attrs.get("baseline", DEFAULT_BASELINE)
    launches = " [k]: kernel launches per call (device timer)." if "launches" in table.columns else ""
    noisy = table[table["noisy"].astype(bool)]["noise"] if "noisy" in table.columns else []
    footnote = " " + noisy_footnote(noisy) if len(noisy) else ""
    return f"Median time in µs per call (speedup vs {baseline}; above 1 is faster).{launches}{footnote}"


def render_table(table: pd.DataFrame, fmt: str) -> str:
    """``speedup_table`` as ``markdown``, ``latex`` (booktabs) or ``csv`` (N x impl, full
    precision numbers, one median and one speedup column per implementation)."""
    if fmt == "csv":
        return wide_table(table).to_csv(index=False)
    header, body, align = _cells(table)
    return _render_cells(header, body, align, caption(table), fmt)


def _render_cells(header: list[str], body: list[list[str]], align: list[str], caption_text: str, fmt: str) -> str:
    """A printable table (header, body cells, "l"/"r" per column) as markdown or LaTeX (booktabs)."""
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return caption_text + "\n\n" + "\n".join(lines) + "\n"
    if fmt == "latex":
        def tex(text: str) -> str:
            for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                         ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("×", r"$\times$"), ("µs", r"\textmu s"),
                         (NOISY_MARK, r"\textsuperscript{\dag}")):
                text = text.replace(a, b)
            return text

        lines = [r"\begin{table}[t]", r"\centering", r"\small",
                 r"\begin{tabular}{" + "".join(align) + "}", r"\toprule",
                 " & ".join(tex(h) for h in header) + r" \\", r"\midrule"]
        lines += [" & ".join(tex(c) for c in cells) + r" \\" for cells in body]
        lines += [r"\bottomrule", r"\end{tabular}", r"\caption{" + tex(caption_text) + "}", r"\end{table}"]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown table format {fmt!r}; choose csv, latex or markdown")
