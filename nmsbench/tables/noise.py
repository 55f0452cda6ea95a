"""Noisy rows, marked wherever a number is shown: which rows are noisy, why (the ``noise``
column, every reason of the rule in :mod:`nmsbench.timing`), and the footnote that says
what the mark means. Tables put :data:`NOISY_MARK` after a noisy cell's number; figures
draw a noisy point hollow (:mod:`nmsbench.plots.layout`)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

import pandas as pd

NOISY_MARK = "†"
HOLLOW_NOTE = "hollow marker: noisy (hover for why)"

# A reason of the noisy rule (nmsbench.timing.Timing.noise) by its wording, named short.
_KINDS = [
    (re.compile(r"block"), "too few blocks"),
    (re.compile(r"^IQR"), "wide IQR"),
    (re.compile(r"percentile"), "long tail"),
    (re.compile(r"rounds spread"), "rounds disagree"),
    (re.compile(r"host ran slow"), "slow host"),
    (re.compile(r"busy|contend|cores|CPU", re.IGNORECASE), "CPU contention"),
]


def noisy_mask(frame: pd.DataFrame) -> pd.Series:
    """True for each noisy row (the ``noisy`` column read as a file gives it: True, "True",
    "true", 1); False where the column is blank or missing (older files, accuracy rows)."""
    if "noisy" not in frame.columns:
        return pd.Series(False, index=frame.index)
    values = frame["noisy"]
    if pd.api.types.is_bool_dtype(values):
        return values.fillna(False).astype(bool)
    text = values.astype(object).where(values.notna(), "").astype(str).str.strip().str.lower()
    return text.isin(["true", "1", "1.0", "yes"])


def clean_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without its noisy rows (the dashboard's "Hide noisy points")."""
    return frame[~noisy_mask(frame)]


def noise_kind(reason: str) -> str:
    """A reason of the noisy rule, named short ("slow host" for "the host ran slow in 5 of 5 rounds")."""
    for pattern, kind in _KINDS:
        if pattern.search(reason):
            return kind
    return reason.strip() or "unknown reason"


def noise_kinds(reasons: Iterable[str]) -> Counter:
    """How many of the given ``noise`` texts name each kind of reason (a text counts once per kind)."""
    counts: Counter = Counter()
    for text in reasons:
        text = "" if text is None or (isinstance(text, float) and pd.isna(text)) else str(text)
        counts.update({noise_kind(part) for part in text.split(";") if part.strip()} or {"reason not recorded"})
    return counts


def joined_reasons(reasons: Iterable[str]) -> str:
    """The distinct reasons of several rows' ``noise`` texts, "; "-separated, in first-seen order."""
    seen: dict[str, None] = {}
    for text in reasons:
        if isinstance(text, str):
            for part in text.split(";"):
                if part.strip():
                    seen[part.strip()] = None
    return "; ".join(seen)


def noisy_footnote(noise: Iterable[str], what: str = "cells") -> str:
    """The footnote of a table with noisy cells (``noise``: the noise text of each marked
    cell): "† noisy: 3 cells (slow host 2, wide IQR 1) ..."; "" when there are none."""
    noise = list(noise)
    if not noise:
        return ""
    kinds = ", ".join(f"{kind} {count}" for kind, count in noise_kinds(noise).most_common())
    return (f"{NOISY_MARK} noisy: {len(noise)} {what} ({kinds}); the rule is in nmsbench.timing, each row's reasons "
            "in its noise column.")


def with_noise(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``noisy`` as booleans and ``noise`` as text (blank where clean)."""
    noisy = noisy_mask(frame)
    noise = frame["noise"] if "noise" in frame.columns else pd.Series("", index=frame.index)
    noise = noise.astype(object).where(noise.notna() & noisy, "").astype(str)
    return frame.assign(noisy=noisy, noise=noise)
