"""The suppression differences view: boxes on a canvas, the agreement heatmap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .layout import _rgba, empty_figure

# The four classes of a box in the differences view, drawn in this order (last on top).
BOX_CLASSES = ("suppressed by both", "kept by both", "only A", "only B")
BOX_COLORS = {
    "kept by both": "#009E73",        # bluish green
    "only A": "#0072B2",              # blue
    "only B": "#D55E00",              # vermillion
    "suppressed by both": "#A8A8A8",  # grey
}

# Kept boxes of a variant that decays scores (Matrix NMS, Soft-NMS) are drawn fainter the
# less of their score is left: (lowest final / input score of the bin, opacity, label).
DECAY_BINS = ((0.75, 1.0, "75% or more"), (0.5, 0.6, "50-75%"), (0.25, 0.35, "25-50%"), (0.0, 0.15, "under 25%"))
MOVED_COLORS = ("#222222", "#7A5195")  # the moved boxes of A and of B (weighted NMS), dashed


def _decay_bin(remaining: np.ndarray) -> np.ndarray:
    """Index into DECAY_BINS per box; NaN (no decaying variant keeps it) is bin 0."""
    out = np.zeros(len(remaining), dtype=int)
    for i in range(len(DECAY_BINS)):
        out[np.nan_to_num(remaining, nan=1.0) < (DECAY_BINS[i - 1][0] if i else np.inf)] = i
    return out


def boxes_canvas(boxes: np.ndarray, classes: np.ndarray, names: tuple[str, str] = ("A", "B"), *,
                 scores: np.ndarray | None = None, remaining: np.ndarray | None = None, canvas: float | None = 1024.0,
                 title: str | None = None, height: int = 720, moved: dict | None = None) -> go.Figure:
    """The boxes drawn as outlines on an image-like canvas (y down), coloured by class:
    ``classes[i]`` is one of :data:`BOX_CLASSES` indices (0 suppressed by both, 1 kept by
    both, 2 only A, 3 only B). The legend names A and B and counts each class.
    ``remaining[i]`` (final / input score where a score-decaying variant keeps box i, NaN
    elsewhere; :func:`nmsbench.differences.remaining_score`) sets the box's opacity by
    :data:`DECAY_BINS`, with a legend of its own. ``moved`` (name -> (K, 4) boxes) draws
    where a box-moving variant (weighted NMS) put its kept boxes, dashed."""
    boxes = np.asarray(boxes, dtype=float).reshape(-1, 4)
    classes = np.asarray(classes, dtype=int)
    remaining = np.full(len(boxes), np.nan) if remaining is None else np.asarray(remaining, dtype=float)
    decays = bool(np.isfinite(remaining).any())
    bins = _decay_bin(remaining)
    fig = go.Figure()
    labels = {"only A": f"kept only by {names[0]}", "only B": f"kept only by {names[1]}"}
    widths = {"suppressed by both": 0.8, "kept by both": 1.6, "only A": 2.4, "only B": 2.4}
    for code, cls in enumerate(BOX_CLASSES):
        index_all = np.flatnonzero(classes == code)
        name = f"{labels.get(cls, cls)} ({len(index_all)})"
        color = BOX_COLORS[cls]
        parts = [(k, index_all[bins[index_all] == k]) for k in range(len(DECAY_BINS))]
        parts = [(k, index) for k, index in parts if len(index)] or [(0, index_all)]
        for first, (k, index) in zip([True] + [False] * len(parts), parts):
            alpha = DECAY_BINS[k][1]
            b = boxes[index]
            xs = np.column_stack([b[:, 0], b[:, 2], b[:, 2], b[:, 0], b[:, 0], np.full(len(b), np.nan)]).ravel()
            ys = np.column_stack([b[:, 1], b[:, 1], b[:, 3], b[:, 3], b[:, 1], np.full(len(b), np.nan)]).ravel()
            if not len(index):  # an empty class still gets its legend entry, with its count of 0
                xs = ys = np.array([np.nan])
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, legendgroup=cls, showlegend=first,
                                     connectgaps=False, hoverinfo="skip", line=dict(color=_rgba(color, alpha), width=widths[cls]),
                                     fill="toself", fillcolor=_rgba(color, (0.05 if code == 0 else 0.12) * alpha),
                                     meta={"role": "boxes", "class": cls, "count": int(len(index)), "opacity": alpha}))
            if len(index):  # box centres carry the hover text
                cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
                text = [f"box {i}" + (f", score {scores[i]:.3f}" if scores is not None else "")
                        + (f"<br>final score {remaining[i] * scores[i]:.3f} ({remaining[i]:.0%} of it)"
                           if scores is not None and np.isfinite(remaining[i]) else "")
                        + f"<br>{labels.get(cls, cls)}" for i in index]
                fig.add_trace(go.Scatter(x=cx, y=cy, mode="markers", marker=dict(size=5, color=color, opacity=0.35 * alpha),
                                         legendgroup=cls, showlegend=False, hovertext=text, hoverinfo="text",
                                         meta={"role": "centres", "class": cls}))
    for k, (name, where) in enumerate((moved or {}).items()):  # where a merging variant moved its kept boxes
        b = np.asarray(where, dtype=float).reshape(-1, 4)
        xs = np.column_stack([b[:, 0], b[:, 2], b[:, 2], b[:, 0], b[:, 0], np.full(len(b), np.nan)]).ravel()
        ys = np.column_stack([b[:, 1], b[:, 1], b[:, 3], b[:, 3], b[:, 1], np.full(len(b), np.nan)]).ravel()
        fig.add_trace(go.Scatter(x=xs if len(b) else [np.nan], y=ys if len(b) else [np.nan], mode="lines",
                                 name=f"{name}'s kept boxes, moved ({len(b)})", legendgroup=f"moved {name}",
                                 connectgaps=False, hoverinfo="skip",
                                 line=dict(color=MOVED_COLORS[k % len(MOVED_COLORS)], width=1.6, dash="dash"),
                                 meta={"role": "moved", "impl": name, "count": int(len(b))}))
    if decays:  # the opacity key: how much of its score a kept box has left
        for lowest, alpha, label in DECAY_BINS:
            count = int((np.isfinite(remaining) & (bins == DECAY_BINS.index((lowest, alpha, label)))).sum())
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"{label} ({count})", legendgroup="decay",
                                     legendgrouptitle_text="kept, final score left:",
                                     line=dict(color=_rgba("#333333", alpha), width=4),
                                     meta={"role": "decay key", "opacity": alpha, "count": count}))
    if canvas:
        extent = max(canvas, float(np.nanmax(boxes[:, 2:])) if len(boxes) else canvas)
        lo = min(0.0, float(np.nanmin(boxes[:, :2])) if len(boxes) else 0.0)
        fig.update_xaxes(range=[lo, extent])
        fig.update_yaxes(range=[extent, lo])
    else:
        fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="x (px)", showgrid=False, zeroline=False, constrain="domain")
    fig.update_yaxes(title_text="y (px)", showgrid=False, zeroline=False, scaleanchor="x", scaleratio=1, constrain="domain")
    fig.update_layout(height=height, title=title, legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0),
                      margin=dict(l=60, r=20, t=110 if title else 80, b=50), plot_bgcolor="white",
                      meta={"figure": "boxes_canvas", "decayed": decays})
    return fig


ANNOTATED_MAX = 8  # implementations up to which the agreement heatmap writes each cell's value


def agreement_heatmap(matrix: pd.DataFrame, title: str | None = None) -> go.Figure:
    """Pairwise agreement (Jaccard index of the kept sets) as a heatmap, each cell's value
    written in it up to ANNOTATED_MAX implementations (beyond, the cells are too narrow for
    it to be read: hover gives it)."""
    if matrix.empty:
        return empty_figure("No implementation ran on this case.")
    z = matrix.to_numpy(dtype=float)
    annotated = len(matrix) <= ANNOTATED_MAX
    fig = go.Figure(go.Heatmap(
        z=z, x=list(matrix.columns), y=list(matrix.index), zmin=0, zmax=1, colorscale="Viridis",
        text=[[f"{v:.2f}" for v in row] for row in z] if annotated else None,
        texttemplate="%{text}" if annotated else None, textfont=dict(size=13 if len(matrix) <= 5 else 10),
        colorbar=dict(title=dict(text="Jaccard"), thickness=12),
        hovertemplate="%{y} vs %{x}<br>Jaccard of kept sets %{z:.3f}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    size = 110 + (60 if annotated else 32) * len(matrix)
    fig.update_layout(height=max(size, 300), title=title, margin=dict(l=130, r=10, t=60 if title else 30, b=130),
                      meta={"figure": "agreement"})
    return fig
