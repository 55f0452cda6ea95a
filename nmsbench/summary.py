"""What a run prints when it ends: its rows as tables, then its noisy and error rows and
the counts. Made from the rows the run wrote (collected as they came), never by reading
the results file back."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from rich.table import Table

from .progress import console
from .results import COLUMNS

# the grid dimensions a sweep summary never pools over: one table per combination of their
# values, each table impl x n. A recorded scenario's tables (real: n is the N a recording gave
# under the cap n_cap) have a row per recording and implementation and a column per cap, each
# cell naming its N.
SUMMARY_BLOCKS = ("device", "timer", "scenario", "canvas", "overlap", "dtype", "iou_threshold", "classes")
SUMMARY_COLUMNS = 12  # columns per table; more are split over several tables, never cut
LISTED = 20  # noisy and error rows listed by name; the rest are counted


def frame_of(rows: list[dict]) -> pd.DataFrame:
    """The rows as a results table (every column, missing ones empty)."""
    frame = pd.DataFrame(rows)
    return frame.reindex(columns=list(dict.fromkeys([*COLUMNS, *frame.columns])))


def show(benchmark: str, rows: list[dict], counts: dict, out: Path) -> None:
    """Print the summary of a run of ``benchmark`` that wrote ``rows`` to ``out``."""
    frame = frame_of(rows)
    ok = frame[frame["status"] == "ok"]
    {"pipeline": _pipeline_tables, "accuracy": _accuracy_tables}.get(benchmark, _sweep_tables)(ok)
    _listed(counts.get("noisy_rows", []), "[yellow]warning[/]: {} noisy row(s); their times are less certain (a busy "
            "machine? fewer --threads, --repeat-noisy K or a longer --min-run-time):", "the noisy and noise columns mark them")
    host = counts.get("host") or {}
    if host.get("slow"):
        waited = f"; {host['waited_s']:g} s went to waiting for its usual speed (--host-wait)" if host.get("waited_s") else ""
        console.print(f"note: the host ran slow (its gauge over {host['slow_limit']:g}x its usual speed) in {host['slow']} of "
                      f"{host['measurements']} measurements; those were left out of their rows' medians, and rows "
                      f"left with fewer than half their rounds are flagged noisy{waited}")
    _listed(counts.get("error_rows", []), "[red]errors[/]: {} row(s):", "the error column holds each message")
    written = counts["ok"] + counts["error"] + counts["skipped"]
    before = counts.get("before", 0)
    console.print(f"wrote {written} rows to {out}" + (f" (now {written + before} rows)" if before else "")
                  + f": {counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped, {counts.get('noisy', 0)} noisy")


def _listed(texts: list[str], head: str, rest: str) -> None:
    if not texts:
        return
    console.print(head.format(len(texts)))
    for text in texts[:LISTED]:
        console.print(f"  {text}")
    if len(texts) > LISTED:
        console.print(f"  ... and {len(texts) - LISTED} more ({rest})")


def _sweep_tables(ok: pd.DataFrame) -> None:
    varying = {c for c in SUMMARY_BLOCKS if ok[c].nunique(dropna=False) > 1}
    for values, group in ok.groupby(list(SUMMARY_BLOCKS), sort=False, dropna=False):
        for table in sweep_tables(group, _title(dict(zip(SUMMARY_BLOCKS, values)), varying)):
            console.print(table)


def _title(key: dict, varying: set) -> str:
    parts = [f"median µs ({key['timer']} timer)", str(key["scenario"])]
    if "canvas" in varying and isinstance(key.get("canvas"), str) and key["canvas"]:
        parts.append(f"{key['canvas']} canvas")
    if "overlap" in varying:
        parts.append(f"overlap {float(key['overlap']):g}")
    if "dtype" in varying:
        parts.append(str(key["dtype"]))
    if "iou_threshold" in varying:
        parts.append(f"IoU {float(key['iou_threshold']):g}")
    if "classes" in varying:
        parts.append(f"{int(key['classes'])} classes")
    parts.append(str(key["device"]))
    return " · ".join(parts)


def _present(column: pd.Series) -> pd.Series:
    return column.notna() & (column.astype(str) != "")


def sweep_tables(group: pd.DataFrame, title: str) -> list[Table]:
    """One block of a sweep's summary (rows never pooled), split every SUMMARY_COLUMNS columns."""
    recorded = _present(group["n_cap"]).any() and _present(group["image"]).any()
    if recorded:
        group = group.assign(recording=group["image"].astype(str) + "@" + group["input_size"].map(lambda s: f"{int(float(s))}"),
                             cell=[f"{float(m):,.1f} (N={int(n)})" for m, n in zip(group["median_us"], group["n"])],
                             n_cap=group["n_cap"].astype(int))
        pivot = group.pivot_table(index=["recording", "impl"], columns="n_cap", values="cell", aggfunc="first", sort=False)
        index, header = ("recording", "impl"), [f"cap {int(c)}" for c in pivot.columns]
    else:
        group = group.assign(n=group["n"].astype(int), median_us=group["median_us"].astype(float))
        pivot = group.pivot_table(index="impl", columns="n", values="median_us", aggfunc="first")
        pivot = pivot.apply(lambda column: column.map(lambda v: "" if pd.isna(v) else f"{v:,.1f}"))
        index, header = ("impl",), [str(int(n)) for n in pivot.columns]
    tables = []
    for start in range(0, len(header), SUMMARY_COLUMNS):
        table = Table(title=title)
        for name in index:
            table.add_column(name, no_wrap=True)
        for name in header[start:start + SUMMARY_COLUMNS]:
            table.add_column(name, justify="right", no_wrap=True)
        for labels, row in pivot.iloc[:, start:start + SUMMARY_COLUMNS].iterrows():
            labels = labels if isinstance(labels, tuple) else (labels,)
            table.add_row(*map(str, labels), *("" if pd.isna(v) else str(v) for v in row))
        tables.append(table)
    return tables


def _pipeline_tables(ok: pd.DataFrame) -> None:
    from .pipeline_bench import per_image_table

    if ok.empty:
        return
    for (source, device, timer, conf), group in per_image_table(ok).groupby(["scenario", "device", "timer", "overlap"], sort=False):
        pivot = group.pivot_table(index=["impl", "stage"], columns="batch", values="us_per_image", aggfunc="median")
        table = Table(title=f"µs per image ({timer} timer) · {source} · {device} · conf {float(conf):g}")
        table.add_column("pipeline")
        table.add_column("stage")
        for batch in pivot.columns:
            table.add_column(f"B={int(batch)}", justify="right")
        for (impl, stage), values in pivot.iterrows():
            table.add_row(str(impl), str(stage), *("" if pd.isna(v) else f"{v:,.1f}" for v in values))
        console.print(table)


def _accuracy_tables(ok: pd.DataFrame) -> None:
    from .accuracy import CROWDED_IOU, MAX_DETECTIONS, evaluator_name

    rows = ok[ok["benchmark"] == "accuracy"]
    for (source, device), group in rows.groupby(["scenario", "device"], sort=False):
        several = group.groupby("impl")["params"].nunique().gt(1).any()
        table = Table(title=f"accuracy · {source} · {device} · {int(group['images'].iloc[0])} images, "
                            f"{int(group['n'].iloc[0]):,} candidates")
        for column in ("implementation", *(["params"] if several else []), "IoU", "AP", "AP50", "AR@100",
                       "AR@100 crowded", "µs / image"):
            table.add_column(column, justify="left" if column in ("implementation", "params") else "right")
        for _, r in group.sort_values(["ap", "median_us"], ascending=[False, True]).iterrows():
            table.add_row(str(r["impl"]), *([_short_params(r["params"])] if several else []), f"{float(r['iou_threshold']):g}",
                          *(_fraction(r[c]) for c in ("ap", "ap50", "ar100", "ar100_crowded")), f"{float(r['median_us']):,.1f}")
        console.print(table)
    if not rows.empty:
        console.print(f"AP, AR: COCO bbox metrics ({evaluator_name()}), at most {MAX_DETECTIONS} detections per image; "
                      f"crowded: images with two objects of one category at IoU > {CROWDED_IOU:g}; µs / image: median of "
                      "one timed call per image")


def _fraction(value) -> str:
    try:
        return "" if value is None or value != value or value == "" else f"{float(value):.3f}"
    except (TypeError, ValueError):
        return ""


def _short_params(text) -> str:
    try:
        return " ".join(f"{k}={v}" for k, v in json.loads(text).items())
    except (ValueError, AttributeError, TypeError, RecursionError):
        return str(text)


def show_diff(case, names: list[str], path: Path) -> None:
    """What ``nmsbench diff`` found: each implementation's kept boxes beside the reference's."""
    from .differences import jaccard, remaining_score

    print(f"{case.scenario}{' (density canvas)' if case.canvas == 'density' else ''}, knob {case.overlap:g}, N = {case.n}, "
          f"seed {case.seed}, IoU {case.iou_threshold:g} on {case.device}:")
    reference = "torchvision" if "torchvision" in case.keeps else next(iter(case.keeps), None)
    for name in names:
        if name not in case.keeps:
            print(f"  {name}: not run: {case.unavailable.get(name) or case.errors.get(name)}")
            continue
        note = f", Jaccard vs {reference} {jaccard(case.keeps[name], case.keeps[reference]):.3f}" if name != reference else ""
        if name in case.finals:
            note += f", {int((remaining_score(case, [name])[case.keeps[name]] < 0.5).sum())} kept with less than half their score"
        print(f"  {name}: keeps {len(case.keeps[name])}{note}")
    print(f"wrote {path}")
