"""The dashboard's Compare runs view: two loaded results files, case by case, with the
verdicts of ``nmsbench compare`` (:mod:`nmsbench.compare`: the same rule, the same table).
It reads the files and their raw samples only; no NMS runs here."""

from __future__ import annotations

import io
from pathlib import Path

import streamlit as st

from . import compare
from .results import read_results

COLOURS = {"changed": "#f4a3a3", "slower": "#f8c9a0", "faster": "#b8e6b8", "uncertain": "#f7e7a1",
           "not measured": "#e4e4e4", "only in base": "#e3ccf0", "only in new": "#c9e4f5", "same": ""}
ALPHAS = (0.01, 0.05, 0.002)


@st.cache_data(show_spinner=False, max_entries=32)
def _file_run(path: str, stamp: tuple):
    """(rows, samples) of a results file of the folder; ``stamp`` (its and its samples' mtime
    and size) makes an edited file reload."""
    return compare.load_run(path, name=Path(path).name)


@st.cache_data(show_spinner=False, max_entries=16)
def _upload_run(name: str, data: bytes):
    return read_results(io.BytesIO(data), name=name), {}  # the samples file is not uploaded


def _stamp(path: Path) -> tuple:
    from .engine.samples import samples_path

    return tuple((p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None for p in (path, samples_path(path)))


@st.cache_data(show_spinner="Comparing…", max_entries=16)
def _compare(base_id: tuple, new_id: tuple, threshold: float, alpha: float, _runs: dict):
    """(verdict table, None) or (None, what is wrong); the ids name the two runs' versions."""
    (base, base_samples), (new, new_samples) = _runs[base_id], _runs[new_id]
    names = (base_id[0], new_id[0])
    try:
        result = compare.compare_frames(base, new, base_samples, new_samples, threshold, alpha, names)
        return compare.checked(result, base, new, *names), None
    except ValueError as e:
        return None, str(e)


def _runs(folder: Path, data_key: tuple, uploads) -> dict:
    """The loaded runs by id (name, version): the folder's files of ``data_key``, then the uploads."""
    runs = {}
    for source in data_key:
        if len(source) == 3:  # (path, mtime, size): a file of the folder
            path = Path(source[0])
            name = str(path.relative_to(folder)) if path.is_relative_to(folder) else path.name
            runs[(name, *source[1:])] = _file_run(str(path), _stamp(path))
    for upload in uploads or []:
        data = upload.getvalue()
        try:
            runs[(f"{upload.name} (uploaded)", len(data))] = _upload_run(upload.name, data)
        except ValueError:
            continue  # the sidebar names what is wrong with it
    return runs


def _newest(runs: dict) -> list:
    """Run ids, oldest first (by their rows' latest timestamp)."""
    def stamp(run_id):
        frame = runs[run_id][0]
        return str(frame["timestamp"].dropna().astype(str).max()) if "timestamp" in frame and len(frame) else ""
    return sorted(runs, key=stamp)


def compare_view(folder: Path, data_key: tuple, uploads) -> None:
    st.caption("Two runs, case by case, as `nmsbench compare BASE NEW` calls them: rows pair by case (any machine or "
               "commit); agreement or status changes are `changed`; times get `faster`, `slower`, `same` or "
               "`uncertain` from the raw samples (a Mann–Whitney U test on the block times and a minimum effect). This view "
               "reads the two files whole: the sidebar's filters apply to the other views.")
    runs = _runs(Path(folder), data_key, uploads)
    if len(runs) < 2:
        st.info("Compare runs needs two results files: run e.g. `nmsbench sweep --n 64..1024 --device cpu` before and "
                "after a change (each writes a CSV and its raw samples under results/runs/) and reload.")
        return
    ids = {run_id[0]: run_id for run_id in _newest(runs)}
    names = list(ids)
    for key in ("cmp_base", "cmp_new"):  # a file that went away must not break the widget
        if st.session_state.get(key) not in (None, *names):
            del st.session_state[key]
    c1, c2, c3, c4 = st.columns([2, 2, 0.8, 0.8])
    base = c1.selectbox("Base", names, index=len(names) - 2, key="cmp_base", help="Default: the second newest run")
    new = c2.selectbox("New", names, index=len(names) - 1, key="cmp_new", help="Default: the newest run")
    base_id, new_id = ids[base], ids[new]
    threshold = c3.number_input("Threshold (%)", 0.0, 100.0, compare.DEFAULT_THRESHOLD * 100, 1.0, key="cmp_threshold",
                                help="Smallest change called faster or slower") / 100
    alpha = c4.selectbox("alpha", ALPHAS, key="cmp_alpha", help="Significance level of the test")
    if base_id == new_id:
        st.info("Base and new are the same file: choose two runs.")
        return
    result, error = _compare(base_id, new_id, threshold, alpha, runs)
    if error:
        st.error(error)
        return
    counts = compare.counts(result)
    for column, (verdict, n) in zip(st.columns(len(counts)), counts.items()):
        column.metric(verdict, n)
    found = list(counts)
    chosen = st.multiselect("Verdicts", found, key="cmp_verdicts", placeholder="all")
    timers = compare.display(result)["timer"].unique().tolist() if len(result) else []
    timer = st.multiselect("Timers", timers, key="cmp_timers", placeholder="all") if len(timers) > 1 else []
    shown = result[result["verdict"].isin(chosen or found) & (result["timer"].isin(timer) if timer else True)]
    table = compare.display(shown)
    styled = table.style.map(lambda v: f"background-color: {COLOURS.get(v, '')}" if COLOURS.get(v) else "",
                             subset=["verdict"])
    st.dataframe(styled, hide_index=True, width="stretch", key="cmp_table")
    st.caption(f"ratio = new / base (the Hodges–Lehmann estimate on the block times; above 1 is slower), its "
               f"{(1 - alpha) * 100:g} % interval from a bootstrap over rounds, p of the U test. faster / slower: p < {alpha:g}, "
               f"the ratio beyond ±{threshold:.0%} and the interval on that side of 1; same: within ±{threshold:.0%}; "
               "uncertain: large but not significant, rounds that disagree, a noisy row, or no raw samples (uploads have "
               "none). Rows that need a look come first.")
    st.download_button("Download the verdicts as CSV", shown.to_csv(index=False), file_name="nmsbench-compare.csv",
                       mime="text/csv", key="cmp_download")
    if result["why"].str.startswith("no raw samples").any() and result["p"].isna().all():
        st.warning(f"{base} or {new} has no raw samples (a file written before runs kept them, or an upload): "
                   "every timed pair is uncertain.")
