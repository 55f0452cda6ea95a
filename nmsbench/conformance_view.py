"""The dashboard's Conformance view: the matrix of an ``nmsbench conformance`` CSV and, for
each differing cell, its smallest example drawn as boxes (kept by the implementation only,
by the definition only, by both, by neither). It reads the files only: no NMS runs here
(no torch, numba or cupy is imported).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from . import conformance_report, plots
from .conformance_cases import CASE_FAMILIES
from .conformance_rules import BY_KEY, NUMBERS
from .results import folder_files

COMMAND = "nmsbench conformance --device cpu --format csv --out results/runs/cpu-conformance.csv"
VERDICT_ORDER = ("unexplained", "differs", "refuses", "agrees", "n/a")


def conformance_files(folder: Path, include_archive: bool = False) -> list[Path]:
    """*conformance*.csv at the top of the results folder and anywhere under runs/ (and archive/ when asked)."""
    return [p for p in folder_files(folder, "*.csv", include_archive) if conformance_report.is_conformance_file(p)]


@st.cache_data(show_spinner=False, max_entries=32)
def load_report(path: str, mtime_ns: int, size: int):
    """(frame, None) or (None, what is wrong)."""
    try:
        return conformance_report.read_conformance(path, Path(path).name), None
    except ValueError as e:
        return None, str(e)


def _kept(out) -> set | None:
    return None if not out or "refused" in out else set(out.get("keep", []))


def example_codes(data: dict) -> np.ndarray:
    """Per box, the differences view's class: 0 kept by neither, 1 by both, 2 only by the
    implementation (A), 3 only by the definition (B)."""
    n = len(data["boxes"])
    mine, theirs = _kept(data.get("observed")) or set(), _kept(data.get("expected")) or set()
    codes = np.zeros(n, dtype=int)
    for k in range(n):
        codes[k] = 1 if k in mine and k in theirs else 2 if k in mine else 3 if k in theirs else 0
    return codes


def example_figure(row, data: dict):
    corners = np.asarray(data.get("corners") or data["boxes"], dtype=float).reshape(-1, 4)
    corners = np.where(np.isfinite(corners), corners, np.nan)  # NaN/Inf examples: what can be drawn
    scores = np.nan_to_num(np.asarray(data["scores"], dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
    fig = plots.boxes_canvas(corners, example_codes(data), (f"{row['impl']} @ {row['device']}", "the definition"),
                             scores=scores, canvas=None, height=520)
    fig.update_layout(meta={"figure": "conformance_example", "impl": row["impl"], "case_family": row["case_family"]})
    return fig


def example_table(data: dict) -> pd.DataFrame:
    mine, theirs = _kept(data.get("observed")), _kept(data.get("expected"))
    boxes = np.asarray(data["boxes"], dtype=float).reshape(-1, 4)
    names = ("cx", "cy", "w", "h") if data.get("fmt") == "cxcywh" else ("x1", "y1", "x2", "y2")
    table = pd.DataFrame(boxes, columns=list(names))
    table.insert(0, "box", range(len(boxes)))
    table["score"] = data["scores"]
    if data.get("labels") is not None:
        table["label"] = [str(v) for v in data["labels"]]
    table["kept by it"] = ["refused" if mine is None else "yes" if k in mine else "" for k in range(len(boxes))]
    table["kept by the definition"] = ["refused" if theirs is None else "yes" if k in theirs else "" for k in range(len(boxes))]
    return table


def _cell_label(row) -> str:
    rules = " + ".join(f"R{NUMBERS[k]}" for k in str(row["rules"]).split("+") if k in BY_KEY)
    what = f"differs ({rules})" if row["verdict"] == "differs" else row["verdict"]
    family = CASE_FAMILIES.get(row["case_family"])
    return f"{row['impl']} @ {row['device']} · {family.short if family else row['case_family']} · {what}"


def conformance_view(folder: Path, include_archive: bool = False) -> None:
    st.caption("Each implementation on each device against its family's exact definition, on families of edge cases "
               "(the threshold's side, tied scores, zero-area boxes, class ids, float16, ...). A differing cell names the "
               "rule that explains it and shows the smallest example found; `unexplained` cells fail the command. "
               f"Make a report with `{COMMAND}` and reload.")
    files = conformance_files(folder, include_archive)
    loaded = {}
    for path in files:
        stat = path.stat()
        loaded[str(path.relative_to(folder))] = load_report(str(path), stat.st_mtime_ns, stat.st_size)
    for _frame, error in loaded.values():
        if error:
            st.error(error)
    readable = [w for w, (frame, _) in loaded.items() if frame is not None and len(frame)]
    if not readable:
        if not loaded:
            st.info(f"No conformance report in `{folder}` (*conformance*.csv at the top or under runs/). Make one with "
                    f"`{COMMAND}` and reload.")
        return
    where = st.selectbox("Report (an `nmsbench conformance` CSV)", readable, key="conf_file")
    frame = loaded[where][0]
    counts = conformance_report.counts(frame)
    columns = st.columns(5)
    for column, verdict in zip(columns, VERDICT_ORDER):
        column.metric(verdict, counts[verdict])
    st.caption(conformance_report.summary(frame) + ". ✓ agrees; ≠ R*n*: differs as rule R*n* explains; – the "
               "implementation takes no such setting (a score threshold, a per-class cap).")
    table = conformance_report.matrix(frame)
    st.dataframe(table.rename(columns={k: CASE_FAMILIES[k].short for k in table.columns}), width="stretch",
                 height=35 * (len(table) + 1) + 3, key="conf_matrix")
    used = conformance_report.used_rules(frame)
    if used:
        st.dataframe(pd.DataFrame({"rule": [f"R{NUMBERS[k]}" for k in used], "convention": [BY_KEY[k].name for k in used],
                                   "found in": [BY_KEY[k].who for k in used]}),
                     hide_index=True, width="stretch", height=35 * (len(used) + 1) + 3, key="conf_rules")
    differing = frame[frame["verdict"].isin(["differs", "unexplained"])]
    differing = differing[[conformance_report.example(r) is not None for _, r in differing.iterrows()]]
    if len(differing):
        options = list(differing.index)
        chosen = st.selectbox("Differing cell", options, format_func=lambda i: _cell_label(differing.loc[i]),
                              key="conf_cell")
        row = differing.loc[chosen]
        data = conformance_report.example(row)
        family = CASE_FAMILIES.get(row["case_family"])
        rules = [BY_KEY[k] for k in str(row["rules"]).split("+") if k in BY_KEY]
        st.markdown(f"**{row['impl']} @ {row['device']}** on *{family.title if family else row['case_family']}*: "
                    + (" + ".join(f"R{NUMBERS[r.key]} {r.name} ({r.who})" for r in rules) if rules
                       else "**unexplained**: no named rule reproduces it")
                    + f". {row['message']}.")
        if data.get("note"):
            st.caption(f"The case: {data['note']}. {conformance_report.describe_example(row)}")
        left, right = st.columns([1.4, 1])
        left.plotly_chart(example_figure(row, data), key="conf_boxes")
        right.dataframe(example_table(data), hide_index=True, width="stretch", key="conf_example")
    refusing = frame[frame["verdict"] == "refuses"]
    if len(refusing):
        with st.expander(f"{len(refusing)} cells refuse (every case raised)"):
            st.dataframe(refusing[["impl", "device", "case_family", "message"]], hide_index=True, width="stretch",
                         key="conf_refusals")
    if str(frame["command"].iloc[0]):
        with st.expander("The command that wrote this report"):
            st.code(str(frame["command"].iloc[0]), language="bash", wrap_lines=True)
