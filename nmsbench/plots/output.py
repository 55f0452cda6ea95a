"""Figures for print and files: the print style, PDF/PNG/SVG through kaleido."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go


def style_for_print(fig: go.Figure, *, width: int | None = None, height: int | None = None) -> go.Figure:
    """White background, black axes, a serif-free print font, legend below the panels."""
    fig = go.Figure(fig)
    fig.update_layout(
        template="simple_white", font=dict(family="Liberation Sans, Arial, Helvetica, sans-serif", size=12, color="black"),
        legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="center", x=0.5, title_text=""),
        margin=dict(l=70, r=20, t=50 if not fig.layout.title.text else 80, b=120), width=width, height=height,
        paper_bgcolor="white", plot_bgcolor="white",
    )
    fig.update_xaxes(showgrid=True, gridcolor="#e6e6e6", mirror=True, ticks="outside")
    fig.update_yaxes(showgrid=True, gridcolor="#e6e6e6", mirror=True, ticks="outside")
    fig.update_annotations(font_size=13)
    return fig


IMAGE_FORMATS = (".pdf", ".png", ".svg")


def write_figure(fig: go.Figure, path, *, width: int = 1000, height: int | None = None, scale: float = 2.0) -> Path:
    """Write a figure as PDF, PNG or SVG with kaleido (which drives Chrome/Chromium)."""
    path = Path(path)
    if path.suffix.lower() not in IMAGE_FORMATS:
        raise ValueError(f"{path.name}: choose a .pdf, .png or .svg file name")
    _point_kaleido_at_chromium()
    fig.write_image(str(path), width=width, height=height or fig.layout.height or 600, scale=scale)
    return path


def _point_kaleido_at_chromium() -> None:
    """kaleido looks for Chrome on its own; Debian's chromium lives at /usr/bin/chromium."""
    import os
    import shutil

    if not os.environ.get("BROWSER_PATH"):
        for candidate in ("chromium", "chromium-browser", "google-chrome"):
            found = shutil.which(candidate)
            if found:
                os.environ["BROWSER_PATH"] = found
                break
