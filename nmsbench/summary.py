"""What a run prints when it ends: the answer first (a sweep's verdict lines, from clean rows
only), its rows as tables with every noisy cell marked NOISY_MARK and a footnote naming the
reasons, the skipped implementations with their reasons, the error rows and the counts.
Made from the rows the run wrote (collected as they came), never by reading the results
file back."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Optional

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
LISTED = 20  # error rows and skipped implementations listed by name; the rest are counted
NOISY_MARK = "†"  # beside a cell whose row is noisy (its time less certain); the footnote names why
BASELINE = "torchvision"  # what the verdicts' speedups are over


def frame_of(rows: list[dict]) -> pd.DataFrame:
    """The rows as a results table (every column, missing ones empty)."""
    frame = pd.DataFrame(rows)
    return frame.reindex(columns=list(dict.fromkeys([*COLUMNS, *frame.columns])))


def show(benchmark: str, rows: list[dict], counts: dict, out: Path, exact: Optional[Callable[[str], bool]] = None) -> None:
    """Print the summary of a run of ``benchmark`` that wrote ``rows`` to ``out``: a sweep's
    verdicts first (:func:`verdict_lines`; ``exact(name)``: whether an implementation is
    exact, default the registry's word), then the tables with noisy cells marked, their
    footnote, the skipped implementations and the error rows."""
    frame = frame_of(rows)
    ok = frame[frame["status"] == "ok"]
    if benchmark not in ("pipeline", "accuracy"):
        for line in verdict_lines(frame, exact):
            console.print(line, highlight=False, markup=False)
    {"pipeline": _pipeline_tables, "accuracy": _accuracy_tables}.get(benchmark, _sweep_tables)(ok)
    for line in noise_footnote(ok):
        console.print(line, highlight=False, markup=False)
    noisy = len(counts.get("noisy_rows", [])) or int(_noisy(ok).sum())
    if noisy:
        console.print(f"[yellow]warning[/]: {noisy} noisy row(s), marked {NOISY_MARK} above; their times are less certain "
                      "(a busy machine? fewer --threads, --repeat-noisy K or a longer --min-run-time; --verbose lists each "
                      "as it comes, the noisy and noise columns mark them)")
    for line in skipped_lines(frame):
        console.print(line, highlight=False, markup=False)
    host = counts.get("host") or {}
    if host.get("slow"):
        waited = f"; {host['waited_s']:g} s went to waiting for its usual speed (--host-wait)" if host.get("waited_s") else ""
        console.print(f"note: the host ran slow (its gauge over {host['slow_limit']:g}x its usual speed) in {host['slow']} of "
                      f"{host['measurements']} measurements; those were left out of their rows' medians, and rows "
                      f"left with fewer than half their rounds are flagged noisy{waited}")
    _listed(counts.get("error_rows", []), "[red]errors[/]: {} row(s):", "the error column holds each message")
    spent, cluster = counts.get("time") or {}, counts.get("cluster") or {}
    if cluster and spent.get("total_s"):  # the cases were timed on the workers, not by this process's clock
        def sec(value) -> str:
            return f"{value or 0:,.1f} s" if (value or 0) < 10 else f"{value:,.0f} s"

        workers = len(cluster.get("workers") or [])
        inside = f", {sec(cluster['task_s'])} inside their tasks" if "task_s" in cluster else ""
        busy = ""
        if cluster.get("busy_s") is not None and workers and cluster.get("cases_s"):
            busy = f" (busy {cluster['busy_s'] / (cluster['cases_s'] * workers):.0%} of that time)"
        console.print(f"took {sec(spent['total_s'])} on {cluster.get('spec')} (after {sec(cluster.get('connect_s'))} reaching "
                      f"or starting it): {sec(cluster.get('warm_s'))} warming its workers, {sec(cluster.get('cases_s'))} for "
                      f"the cases{inside} on {workers} worker(s){busy}", highlight=False)
    elif spent.get("total_s"):
        per_timer = ", ".join(f"{name} {seconds:,.0f} s" for name, seconds in (counts.get("timers_s") or {}).items())
        timing = f"{spent['timed_s']:,.0f} s timing" + (f" ({per_timer})" if len(counts.get("timers_s") or {}) > 1 else "")
        console.print(f"took {spent['total_s']:,.0f} s: {timing}, {spent['prepared_s']:,.0f} s warming "
                      f"up and checking outputs, {spent['other_s']:,.0f} s the rest (box sets, references, compiling, writing)",
                      highlight=False)
    written = counts["ok"] + counts["error"] + counts["skipped"]
    before = counts.get("before", 0)
    # ``before``: this grid's rows the file held already (a resumed run); the file may hold other grids' rows too
    console.print(f"wrote {written} rows to {out}" + (f" ({before} more of this grid were there before)" if before else "")
                  + f": {counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped, {counts.get('noisy', 0)} noisy")


# --- the answer first: verdict lines from clean rows (ok, not noisy)


def _noisy(frame: pd.DataFrame) -> pd.Series:
    """Whether each row is flagged noisy (a bool, or its text in a file read back)."""
    return frame["noisy"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0", "yes"))


def _registry_exact(name: str) -> bool:
    from .registry import implementations

    impl = implementations().get(name)
    return bool(impl and impl.exact)


def _entries(frame: pd.DataFrame) -> pd.Series:
    """Each row's entry: its implementation, with its parameters where the implementation
    has rows of several parameter sets."""
    params = frame["params"].astype(object).where(frame["params"].notna(), "").astype(str)
    several = frame["impl"].map(params.groupby(frame["impl"]).nunique() > 1)
    return frame["impl"].astype(str).where(~several, frame["impl"].astype(str) + " " + params.map(_short_params))


def verdict_lines(frame: pd.DataFrame, exact: Optional[Callable[[str], bool]] = None) -> list[str]:
    """A sweep's answer, per block of its tables (scenario, device, timer and the other
    SUMMARY_BLOCKS; a recording's rows apart): from clean rows only (ok and not noisy), the
    fastest exact ``hard`` implementation at the smallest and the largest N and its speedup
    over torchvision there (torchvision's median / its median), then the same for each
    family with more than one entry (any entry of it, "not exact" said), and "no clean row"
    where none is."""
    exact = exact or _registry_exact
    ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()]
    if ok.empty:
        return []
    ok = ok.assign(_clean=~_noisy(ok), _entry=_entries(ok), n=ok["n"].astype(int),
                   median_us=ok["median_us"].astype(float))
    recorded = _present(ok["image"]) & _present(ok["n_cap"])
    ok = ok.assign(_recording=(ok["image"].astype(str) + "@" + ok["input_size"].astype(str)).where(recorded, ""))
    varying = {c for c in SUMMARY_BLOCKS if ok[c].nunique(dropna=False) > 1}
    lines = [f"verdict (clean rows only: ok and not noisy; speedup: {BASELINE}'s median / the implementation's "
             "at the same N)"]
    for values, group in ok.groupby([*SUMMARY_BLOCKS, "_recording"], sort=False, dropna=False):
        key = dict(zip([*SUMMARY_BLOCKS, "_recording"], values))
        label = _title(key, varying).split(" · ", 1)[1]
        lines.append(f"{label} · {key['timer']} timer" + (f" · {key['_recording']}" if key["_recording"] else "") + ":")
        if not group["_clean"].any():
            lines.append(f"  no clean row ({len(group)} ok row(s), all noisy)")
            continue
        ends = sorted({group["n"].min(), group["n"].max()})
        hard = group[(group["family"] == "hard") & group["impl"].map(exact)]
        exact_line = _at_ends(hard, group, ends, exact)
        lines.append("  fastest exact hard: " + exact_line)
        for family in dict.fromkeys(group["family"]):
            members = group[group["family"] == family]
            if members["_entry"].nunique() < 2 or (family == "hard" and members["impl"].map(exact).all()):
                continue
            line = _at_ends(members, group, ends, exact)
            if family == "hard" and line == exact_line:  # an exact one is the fastest of them all
                continue
            lines.append(f"  fastest {family}" + (" (exact or not)" if family == "hard" else "") + f": {line}")
    return lines


def _at_ends(candidates: pd.DataFrame, group: pd.DataFrame, ends: list[int], exact: Callable[[str], bool]) -> str:
    parts = []
    for n in ends:
        clean = candidates[candidates["_clean"] & (candidates["n"] == n)]
        if clean.empty:
            parts.append(f"N={n:,} no clean row")
            continue
        best = clean.loc[clean["median_us"].idxmin()]
        text = f"N={n:,} {best['_entry']}{'' if exact(best['impl']) else ' (not exact)'} {best['median_us']:,.1f} µs"
        base = group[(group["impl"] == BASELINE) & (group["n"] == n)]
        if best["impl"] == BASELINE:
            text += f" ({BASELINE} itself)"
        elif base.empty:
            text += f" (no {BASELINE} row)"
        elif not base["_clean"].any():
            text += f" ({BASELINE}: no clean row)"
        else:
            text += f", {base[base['_clean']]['median_us'].min() / best['median_us']:.2f}x {BASELINE}"
        parts.append(text)
    return "; ".join(parts)


# --- noisy cells and skipped rows


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def noise_footnote(ok: pd.DataFrame) -> list[str]:
    """The footnote of the marked cells: each kind of reason (the ``noise`` column's, numbers
    set aside), how many noisy rows give it, and its numbers' range."""
    noisy = ok[_noisy(ok)]
    if noisy.empty:
        return []
    kinds: dict[str, list[list[str]]] = {}
    for _, row in noisy.iterrows():
        text = row["noise"] if _present(pd.Series([row["noise"]])).iloc[0] else ""
        for reason in (str(text).split("; ") if text else ["no reason recorded"]):
            kinds.setdefault(_NUMBER.sub("#", reason), []).append(_NUMBER.findall(reason))
    parts = []
    for kind, numbers in sorted(kinds.items(), key=lambda item: -len(item[1])):
        shown = kind
        for i in range(kind.count("#")):
            values = sorted({float(ns[i]) for ns in numbers if len(ns) > i})
            low, high = (f"{v:g}" for v in (values[0], values[-1])) if values else ("?", "?")
            shown = shown.replace("#", low if low == high else f"{low}–{high}", 1)
        parts.append(f"{shown} ({len(numbers)} row{'s' if len(numbers) != 1 else ''})")
    return [f"{NOISY_MARK} noisy, its time less certain: " + "; ".join(parts)]


def skipped_lines(frame: pd.DataFrame) -> list[str]:
    """The implementations a run skipped, each with its reasons (the ``error`` column of its
    skipped rows) and the devices and rows they cover."""
    skipped = frame[frame["status"] == "skipped"]
    if skipped.empty:
        return []
    reasons = skipped.assign(error=skipped["error"].fillna("").astype(str)).groupby(["impl", "error"], sort=False)
    listed = [f"  {impl} ({', '.join(dict.fromkeys(part['device'].astype(str)))}): {error or 'no reason given'} "
              f"({len(part)} row{'s' if len(part) != 1 else ''})" for (impl, error), part in reasons]
    lines = [f"skipped: {skipped['impl'].nunique()} implementation(s), {len(skipped)} row(s):", *listed[:LISTED]]
    if len(listed) > LISTED:
        lines.append(f"  ... and {len(listed) - LISTED} more (the error column of the skipped rows holds each reason)")
    return lines


def _marked(value: str, noisy: bool) -> str:
    return f"{value}{NOISY_MARK}" if noisy and value else value


def _listed(texts: list[str], head: str, rest: str) -> None:
    if not texts:
        return
    console.print(head.format(len(texts)))
    for text in texts[:LISTED]:
        console.print(f"  {text}", markup=False)
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
                             cell=[_marked(f"{float(m):,.1f} (N={int(n)})", noisy)
                                   for m, n, noisy in zip(group["median_us"], group["n"], _noisy(group))],
                             n_cap=group["n_cap"].astype(int))
        pivot = group.pivot_table(index=["recording", "impl"], columns="n_cap", values="cell", aggfunc="first", sort=False)
        index, header = ("recording", "impl"), [f"cap {int(c)}" for c in pivot.columns]
    else:
        group = group.assign(n=group["n"].astype(int), cell=[_marked(f"{float(m):,.1f}", noisy)
                                                             for m, noisy in zip(group["median_us"], _noisy(group))])
        pivot = group.pivot_table(index="impl", columns="n", values="cell", aggfunc="first")
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
    noisy = ok[_noisy(ok)].assign(us_per_image=1.0)  # a cell with any noisy row is marked
    for (source, device, timer, conf), group in per_image_table(ok).groupby(["scenario", "device", "timer", "overlap"], sort=False):
        pivot = group.pivot_table(index=["impl", "stage"], columns="batch", values="us_per_image", aggfunc="median")
        marks = per_image_table(noisy) if not noisy.empty else group.iloc[:0]
        marks = marks[(marks["scenario"] == source) & (marks["device"] == device) & (marks["timer"] == timer)
                      & (marks["overlap"] == conf)]
        marked = set(zip(marks["impl"], marks["stage"], marks["batch"]))
        table = Table(title=f"µs per image ({timer} timer) · {source} · {device} · conf {float(conf):g}")
        table.add_column("pipeline")
        table.add_column("stage")
        for batch in pivot.columns:
            table.add_column(f"B={int(batch)}", justify="right")
        for (impl, stage), values in pivot.iterrows():
            table.add_row(str(impl), str(stage), *("" if pd.isna(v) else _marked(f"{v:,.1f}", (impl, stage, batch) in marked)
                                                   for batch, v in values.items()))
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
        group = group.assign(_noisy=_noisy(group))
        for _, r in group.sort_values(["ap", "median_us"], ascending=[False, True]).iterrows():
            table.add_row(str(r["impl"]), *([_short_params(r["params"])] if several else []), f"{float(r['iou_threshold']):g}",
                          *(_percent(r[c]) for c in ("ap", "ap50", "ar100", "ar100_crowded")),
                          _marked(f"{float(r['median_us']):,.1f}", r["_noisy"]))
        console.print(table)
    if not rows.empty:
        console.print(f"AP, AR: COCO bbox metrics in % ({evaluator_name()}), at most {MAX_DETECTIONS} detections per image; "
                      f"crowded: images with two objects of one category at IoU > {CROWDED_IOU:g}; µs / image: median of "
                      "one timed call per image")


def _percent(value) -> str:
    """A metric held as a fraction 0..1 (the ap columns), printed in % with one decimal as
    README and ``nmsbench export`` print it."""
    try:
        return "" if value is None or value != value or value == "" else f"{100 * float(value):.1f}"
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
