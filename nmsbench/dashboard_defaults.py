"""The dashboard's default selection: one machine and one device at a time, and few lines.

Pure functions of a prepared results frame (:func:`nmsbench.tables.prepare`), so they are
tested without Streamlit. The sidebar's "machine / GPU" and "device" filters start on
:func:`default_filters`'s values, its "family" filter on :func:`default_families`' (the
exact greedy family where the selection holds more implementations than a legend reads
well); the user can widen them.
"""

from __future__ import annotations

import pandas as pd

from . import tables

LEGEND_MAX = 12  # legend entries a chart of the default view holds at most
DEFAULT_FAMILY = "hard"  # exact greedy NMS, torchvision's family: what the other families are measured against
RUNS_PREFIX = "runs/"  # a user's own sweeps, under results/runs/ (sources are paths relative to results/)
UPLOADED = "(uploaded)"


def _is_run(source: pd.Series) -> pd.Series:
    return source.str.startswith(RUNS_PREFIX) | source.str.endswith(UPLOADED)


def _is_reference(source: pd.Series) -> pd.Series:
    """The shelf at the top of results/: no folder in the name, not an upload."""
    return ~source.str.contains("/", regex=False) & ~source.str.endswith(UPLOADED) & source.ne("")


def _newest_file_pair(rows: pd.DataFrame) -> tuple[str, str] | None:
    """(hardware, device) of the newest file among ``rows``: the file with the latest
    timestamp; within it, the pair with the most measured rows (ties: the newest row's)."""
    if rows.empty:
        return None
    stamps = pd.to_datetime(rows["timestamp"], errors="coerce", utc=True, format="mixed")
    rows = rows.assign(_stamp=stamps)
    newest = rows.groupby("source")["_stamp"].max().sort_values(na_position="first")
    chosen = rows[rows["source"] == newest.index[-1]]
    ok = chosen[chosen["status"] == "ok"]
    chosen = ok if not ok.empty else chosen
    counts = (chosen.groupby(["hardware", "device"])
              .agg(count=("_stamp", "size"), stamp=("_stamp", "max"))
              .sort_values(["count", "stamp"], na_position="first"))
    hardware, device = counts.index[-1]
    return str(hardware), str(device)


def default_filters(frame: pd.DataFrame) -> dict[str, list[str]]:
    """The sidebar's starting "machine / GPU" (``hardware``) and ``device`` values: those of
    the user's newest run (under runs/ or uploaded) if any, else of the newest CUDA reference
    file at the top of results/, else of the newest reference file; ``{}`` (everything)
    when the frame holds no NMS sweep rows. Only NMS sweeps count (the curves view's rows)."""
    needed = {"source", "hardware", "device", "timestamp", "status"}
    if frame.empty or not needed <= set(frame.columns):
        return {}
    rows = frame[frame["hardware"].ne("") & frame["device"].ne("")]
    if "benchmark" in rows.columns:
        rows = rows[rows["benchmark"].isin(["nms", ""])]
    source = rows["source"].astype(str)
    reference = rows[_is_reference(source)]
    for candidates in (rows[_is_run(source)], reference[reference["device"] == "cuda"], reference):
        pair = _newest_file_pair(candidates)
        if pair:
            return {"hardware": [pair[0]], "device": [pair[1]]}
    return {}


def multi_point_scenarios(frame: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(scenarios with at least two distinct N, the others): a scenario measured at one N
    makes a panel of single points in time vs N, so the default view leaves it out."""
    if frame.empty or "scenario" not in frame.columns:
        return [], []
    counts = frame.dropna(subset=["n"]).groupby("scenario")["n"].nunique()
    keep = sorted(str(s) for s, c in counts.items() if c >= 2)
    dropped = sorted(str(s) for s in frame["scenario"].unique() if str(s) not in keep)
    return keep, dropped


def _sweep_rows(frame: pd.DataFrame, choices: dict) -> pd.DataFrame:
    """The measured NMS sweep rows (the curves view's) of ``choices`` (column -> values;
    the wall timer where none is chosen and the rows have it)."""
    choices = {k: v for k, v in choices.items() if k in frame.columns and v}
    rows = tables.ok_rows(tables.select(frame, **choices))
    if "benchmark" in rows.columns and "benchmark" not in choices:
        rows = rows[rows["benchmark"].isin(["nms", ""])]
    if "timer" not in choices and "timer" in rows.columns and rows["timer"].eq("wall").any():
        rows = rows[rows["timer"].eq("wall")]
    return rows


def default_families(frame: pd.DataFrame, choices: dict) -> list[str]:
    """The sidebar's starting "family" values: ``[DEFAULT_FAMILY]`` where the rows that the
    other filters' ``choices`` select hold more than :data:`LEGEND_MAX` implementations
    (one legend entry each) and some of that family; else ``[]`` (every family). A choice
    of implementations by name leaves the families alone."""
    if frame.empty or "family" not in frame.columns or choices.get("impl"):
        return []
    rows = _sweep_rows(frame, {k: v for k, v in choices.items() if k != "family"})
    if rows["impl"].nunique() <= LEGEND_MAX or DEFAULT_FAMILY not in set(rows["family"]):
        return []
    return [DEFAULT_FAMILY]


def hidden_families(frame: pd.DataFrame, choices: dict) -> list[str]:
    """The families the "family" choice leaves out of the rows the other ``choices`` select."""
    chosen = choices.get("family") or []
    if not chosen or frame.empty or "family" not in frame.columns:
        return []
    rows = _sweep_rows(frame, {k: v for k, v in choices.items() if k != "family"})
    return [f for f in tables.options(rows, "family") if f not in chosen]


def family_caption(chosen: list[str], hidden: list[str]) -> str:
    """One line saying which families the view shows, which it hides and how to add them."""
    if not hidden:
        return ""
    shown = ", ".join(chosen)
    what = " (exact greedy NMS, torchvision's family)" if chosen == [DEFAULT_FAMILY] else ""
    return (f"Family: {shown}{what}. Hidden: {', '.join(hidden)}; add them in the sidebar's family filter "
            "(empty: every family).")
