"""Compare two runs: pair their rows by case and give each pair a verdict.

``compare_files(BASE, NEW)`` pairs the rows of two results files by
:func:`nmsbench.results.case_key` (the machine and the commit are not part of it, so a run
on another machine or at another commit pairs with the base), reads both runs' raw samples
(:mod:`nmsbench.engine.samples`) and calls each pair, in this order:

- ``only in base`` / ``only in new``: the case is in one file only;
- ``changed``: the status differs (ok, error, skipped), or an agreement column does
  (``AGREEMENT``: kept, jaccard, extra, missing, the family and accuracy columns);
- ``not measured``: neither run measured the case (the same error or skip in both);
- ``uncertain``: a run has no raw samples, or fewer than ``MIN_SAMPLES`` block times;
- otherwise, from the samples, with ``ratio`` = NEW / BASE (above 1: slower) and the
  effect threshold ``t`` symmetric in log (beyond: ratio > 1 + t or < 1 / (1 + t)):
  ``faster`` / ``slower`` when the Mann–Whitney U test on the pooled block times is
  significant (p < alpha), the ratio is beyond ``t``, and the interval lies on the same
  side of 1 (beyond ``t`` itself where a run is flagged noisy); ``same`` when the
  interval sits inside ``±t``, or the ratio is within ``t`` (unless a run is flagged noisy
  and its interval reaches beyond ``±t``: ``uncertain``); ``uncertain`` otherwise (large
  but not significant, or the rounds disagree).

The ratio is the Hodges–Lehmann estimate of the shift of the log block times (the
median of all pairwise differences: the statistic that goes with the U test); its
interval is a bootstrap over rounds (resampling each run's round medians), so that
rounds that disagree widen it where the pooled blocks alone would look certain, widened
again by the run-to-run noise of its timer (:func:`run_drift`: the robust spread of the
log ratios of the pairs of that device and timer that stayed within the threshold), which a
run's own rounds cannot see.
See DESIGN.md, "Comparing runs".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .results import KEY_COLUMNS, RUN_COLUMNS, case_key, read_results

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.01
MIN_SAMPLES = 5  # pooled block times a run needs for a test
DRIFT_MIN_PAIRS = 8  # pairs of one timer needed to estimate its run-to-run noise
BOOTSTRAP = 2000  # resamples of the rounds for the interval
MAX_PAIRS = 250_000  # pairwise differences for the Hodges–Lehmann estimate (beyond: quantiles of each side)
VERDICTS = ("changed", "slower", "faster", "uncertain", "not measured", "only in base", "only in new", "same")
# agreement columns and how far two values may differ and still agree (counts exactly;
# family_max_diff is itself a float32 rounding-level difference)
AGREEMENT = {"kept": 0, "ref_kept": 0, "jaccard": 1e-9, "extra": 0, "missing": 0, "family_ref": None,
             "family_jaccard": 1e-9, "family_max_diff": 1e-5, "candidates": 0, "mismatched": 0,
             "ap": 1e-9, "ap50": 1e-9, "ap75": 1e-9, "ar100": 1e-9, "ar100_crowded": 1e-9, "detections": 0}
OUT_COLUMNS = [*KEY_COLUMNS, "base_median_us", "new_median_us", "ratio", "ci_low", "ci_high", "p", "verdict", "why"]


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value).strip()


def _differs(a, b, tolerance) -> bool:
    if tolerance is None:
        return _text(a) != _text(b)
    x, y = _number(a), _number(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) != math.isnan(y) or (math.isnan(x) and _text(a) != _text(b))
    return abs(x - y) > tolerance


def agreement_changes(base: pd.Series, new: pd.Series) -> list[str]:
    """What differs between two rows of one case apart from time: status and agreement."""
    status_a, status_b = _text(base.get("status")).lower(), _text(new.get("status")).lower()
    if status_a != status_b:
        error = _text(new.get("error")) or _text(base.get("error"))
        return [f"status {status_a} → {status_b}" + (f" ({error})" if error else "")]
    return [f"{c} {_shown(base.get(c))} → {_shown(new.get(c))}" for c, tol in AGREEMENT.items()
            if _differs(base.get(c), new.get(c), tol)]


def _shown(value) -> str:
    number = _number(value)
    return (f"{number:.6g}" if not math.isnan(number) else _text(value)) or "—"


def _hodges_lehmann(a: np.ndarray, b: np.ndarray) -> float:
    """Median of all pairwise differences b_j - a_i (quantiles of each side when too many)."""
    if len(a) * len(b) > MAX_PAIRS:
        q = np.linspace(0, 1, int(math.sqrt(MAX_PAIRS)))
        a, b = np.quantile(a, q), np.quantile(b, q)
    return float(np.median(np.subtract.outer(b, a)))


def _round_interval(base_rounds: np.ndarray, new_rounds: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile bootstrap interval of median(new rounds) / median(base rounds); NaN with
    fewer than two rounds on a side (nothing to resample)."""
    if len(base_rounds) < 2 or len(new_rounds) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(0)  # the same files give the same verdicts
    a = np.median(base_rounds[rng.integers(0, len(base_rounds), (BOOTSTRAP, len(base_rounds)))], axis=1)
    b = np.median(new_rounds[rng.integers(0, len(new_rounds), (BOOTSTRAP, len(new_rounds)))], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(b / a, [tail, 100 - tail])
    return float(low), float(high)


def pair_ratio(base, new) -> float:
    """NEW / BASE of one pair's raw samples (the Hodges–Lehmann shift of the log block
    times); NaN without enough samples."""
    if base is None or new is None:
        return math.nan
    a, b = np.asarray(base.pooled(), dtype=float), np.asarray(new.pooled(), dtype=float)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if min(len(a), len(b)) < MIN_SAMPLES:
        return math.nan
    return math.exp(_hodges_lehmann(np.log(a), np.log(b)))


def run_drift(ratios, threshold: float = DEFAULT_THRESHOLD) -> float:
    """The run-to-run noise of one timer between two runs, as a log-ratio standard
    deviation: the robust spread (1.4826 × MAD) of the log ratios of its pairs that stayed
    within ``threshold``. Two runs on a shared host differ by more than either run's own
    rounds show (the host's state moves between runs); the pairs that did not move beyond
    the threshold, which no verdict could call faster or slower anyway, measure how far
    unchanged cases wander (an empirical null, as in Efron's large-scale inference), while
    the pairs that did change, however many, stay out of it. 0 with fewer than
    DRIFT_MIN_PAIRS such pairs (a comparison where nearly everything changed: its
    intervals are the rounds' alone)."""
    limit = math.log1p(threshold)
    logs = np.log(np.asarray([r for r in ratios if np.isfinite(r) and r > 0], dtype=float))
    logs = logs[np.abs(logs) <= limit]
    if len(logs) < DRIFT_MIN_PAIRS:
        return 0.0
    return float(1.4826 * np.median(np.abs(logs - np.median(logs))))


def judge(base, new, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA, noisy: bool = False,
          drift: float = 0.0) -> dict:
    """The timing verdict of one pair from its raw samples (``Samples`` or None): ratio,
    ci_low, ci_high, p, verdict and why (the rule is in the module's docstring). ``drift``
    (:func:`run_drift`) widens the rounds' interval by the run-to-run noise."""
    from scipy.stats import mannwhitneyu, norm

    check_settings(threshold, alpha)
    out = {"ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan}
    missing = [side for side, s in (("BASE", base), ("NEW", new)) if s is None]
    if missing:
        return {**out, "verdict": "uncertain", "why": f"no raw samples in {' and '.join(missing)}"}
    a, b = np.asarray(base.pooled(), dtype=float), np.asarray(new.pooled(), dtype=float)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if min(len(a), len(b)) < MIN_SAMPLES:
        return {**out, "verdict": "uncertain",
                "why": f"too few samples for a test ({len(a)} and {len(b)} block times; {MIN_SAMPLES} needed)"}
    ratio = math.exp(_hodges_lehmann(np.log(a), np.log(b)))
    p = float(mannwhitneyu(b, a, alternative="two-sided").pvalue)
    low, high = _round_interval(np.asarray(base.round_medians_us, dtype=float), np.asarray(new.round_medians_us, dtype=float),
                                1 - alpha)
    if drift > 0 and not math.isnan(low):
        widen = math.exp(float(norm.ppf(1 - alpha / 2)) * drift)
        low, high = low / widen, high * widen
    out = {"ratio": ratio, "ci_low": low, "ci_high": high, "p": p}
    limit = 1 + threshold
    has_interval = not math.isnan(low)
    inside = has_interval and 1 / limit <= low and high <= limit
    within = 1 / limit <= ratio <= limit
    shown = f"{ratio - 1:+.1%}"
    if not inside and not within:
        side = "slower" if ratio > 1 else "faster"
        # the interval on that side of 1; beyond the threshold itself where a run is noisy
        edge = (limit if noisy else 1.0)
        apart = not has_interval or (low > edge if side == "slower" else high < 1 / edge)
        if p < alpha and apart:
            return {**out, "verdict": side, "why": f"{shown}, beyond ±{threshold:.0%}, p = {p:.2g}"}
        why = (f"{shown} but not significant (p = {p:.2g} ≥ {alpha:g})" if p >= alpha
               else f"{shown} but the rounds disagree (interval {low:.3f}–{high:.3f} includes 1)")
        return {**out, "verdict": "uncertain", "why": why}
    if not inside and noisy:
        return {**out, "verdict": "uncertain",
                "why": f"{shown}, but a run is noisy and its interval {low:.3f}–{high:.3f} reaches beyond ±{threshold:.0%}"}
    return {**out, "verdict": "same", "why": f"{shown}, within ±{threshold:.0%}"}


def check_settings(threshold: float, alpha: float) -> None:
    if not (isinstance(threshold, (int, float)) and 0 <= threshold < 10):
        raise ValueError(f"threshold must be a fraction between 0 and 10 (0.05 = 5 %), not {threshold!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must be between 0 and 1, not {alpha!r}")


def _keyed(frame: pd.DataFrame, name: str) -> dict[tuple, pd.Series]:
    """Rows by case key; a file holding one case several times (runs of several machines or
    commits concatenated) is refused: which of them to compare would be a guess."""
    rows: dict[tuple, pd.Series] = {}
    for _, row in frame.iterrows():
        key = case_key(row)
        if key in rows:
            runs = sorted({" ".join(_text(r.get(c)) for c in RUN_COLUMNS) for r in (rows[key], row)})
            raise ValueError(f"{name} measures one case more than once ({_describe(key)}; runs: {' | '.join(runs)}): "
                             "compare files that hold one run each")
        rows[key] = row
    return rows


def _describe(key: tuple) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(KEY_COLUMNS, key) if v)


def _noisy(row: pd.Series) -> bool:
    return _text(row.get("noisy")).lower() in ("true", "1", "1.0", "yes")


def _timer_of(key: tuple) -> tuple:
    """(benchmark, device, timer) of a case key: the pairs that share a run-to-run noise."""
    row = dict(zip(KEY_COLUMNS, key))
    return row["benchmark"], row["device"], row["timer"]


def _drifts(base_rows: dict, new_rows: dict, base_samples: dict, new_samples: dict,
            threshold: float = DEFAULT_THRESHOLD) -> dict[tuple, float]:
    """:func:`run_drift` of each (benchmark, device, timer) over its ok pairs that agree."""
    ratios: dict[tuple, list[float]] = {}
    for key, a in base_rows.items():
        b = new_rows.get(key)
        if b is None or _text(a.get("status")).lower() != "ok" or agreement_changes(a, b):
            continue
        ratios.setdefault(_timer_of(key), []).append(pair_ratio(base_samples.get(key), new_samples.get(key)))
    return {group: run_drift(values, threshold) for group, values in ratios.items()}


def compare_frames(base: pd.DataFrame, new: pd.DataFrame, base_samples: dict | None = None, new_samples: dict | None = None,
                   threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
                   names: tuple[str, str] = ("BASE", "NEW")) -> pd.DataFrame:
    """One row per case of either frame (results as ``read_results`` gives them), with its
    verdict; ``*_samples`` map case keys to ``Samples`` (``read_samples``)."""
    check_settings(threshold, alpha)
    base_rows, new_rows = _keyed(base, names[0]), _keyed(new, names[1])
    base_samples, new_samples = base_samples or {}, new_samples or {}
    drift = _drifts(base_rows, new_rows, base_samples, new_samples, threshold)
    out = []
    for key in [*base_rows, *(k for k in new_rows if k not in base_rows)]:
        a, b = base_rows.get(key), new_rows.get(key)
        row = dict(zip(KEY_COLUMNS, key))
        row["base_median_us"] = _number(a.get("median_us")) if a is not None else math.nan
        row["new_median_us"] = _number(b.get("median_us")) if b is not None else math.nan
        if a is None or b is None:
            out.append({**row, "verdict": "only in new" if a is None else "only in base",
                        "why": f"no such case in {names[0] if a is None else names[1]}"})
            continue
        changes = agreement_changes(a, b)
        if changes:
            out.append({**row, "verdict": "changed", "why": "; ".join(changes)})
        elif _text(a.get("status")).lower() != "ok":
            reason = _text(b.get("error")) or _text(a.get("error"))
            out.append({**row, "verdict": "not measured",
                        "why": f"{_text(a.get('status')).lower()} in both" + (f": {reason}" if reason else "")})
        else:
            out.append({**row, **judge(base_samples.get(key), new_samples.get(key), threshold, alpha,
                                       noisy=_noisy(a) or _noisy(b), drift=drift.get(_timer_of(key), 0.0))})
    frame = pd.DataFrame(out, columns=OUT_COLUMNS)
    for column in NUMERIC_KEYS:  # keys are text ("1024.0"); numbers again for sorting and display
        frame[column] = _maybe_numeric(frame[column])
    return frame


NUMERIC_KEYS = ("n", "n_cap", "overlap", "iou_threshold", "seed", "batch", "classes", "input_size")


def _maybe_numeric(values: pd.Series) -> pd.Series:
    """Numbers where every non-blank value is one (integers as integers), else the text."""
    text = values.fillna("").astype(str)
    numbers = pd.to_numeric(text.where(text.ne(""), None), errors="coerce")
    if numbers.notna().sum() != text.ne("").sum():
        return values
    whole = numbers.dropna()
    return numbers.astype("Int64") if len(whole) and (whole == whole.round()).all() else numbers


def load_run(path, name: str | None = None) -> tuple[pd.DataFrame, dict]:
    """A results file and its raw samples (``{}`` where it has no samples file)."""
    from .engine.samples import read_samples

    name = name or str(path)
    if not Path(path).is_file():
        raise ValueError(f"{name}: no such results file")
    return read_results(path, name=name), read_samples(path)


def compare_files(base_path, new_path, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """:func:`compare_frames` of two results files; ``ValueError`` when a file is not one,
    the files hold different benchmarks, or no case pairs."""
    check_settings(threshold, alpha)
    (base, base_samples), (new, new_samples) = load_run(base_path), load_run(new_path)
    return checked(compare_frames(base, new, base_samples, new_samples, threshold, alpha, (str(base_path), str(new_path))),
                   base, new, str(base_path), str(new_path))


def checked(result: pd.DataFrame, base: pd.DataFrame, new: pd.DataFrame, base_name: str, new_name: str) -> pd.DataFrame:
    """``result``, or ValueError where the runs cannot be compared."""
    kinds = [set(f["benchmark"].map(_text).replace("", "nms")) if "benchmark" in f else {"nms"} for f in (base, new)]
    if not (kinds[0] & kinds[1]):
        raise ValueError(f"{base_name} holds {', '.join(sorted(kinds[0])) or 'no'} rows and {new_name} "
                         f"{', '.join(sorted(kinds[1])) or 'no'} rows: different benchmarks do not compare")
    if not result["verdict"].isin(VERDICTS[:5] + VERDICTS[-1:]).any():
        raise ValueError(f"no case of {base_name} is in {new_name}: nothing to compare")
    return result


def counts(result: pd.DataFrame) -> dict[str, int]:
    """Rows per verdict, in ``VERDICTS`` order (verdicts with no row left out)."""
    found = result["verdict"].value_counts()
    return {v: int(found[v]) for v in VERDICTS if v in found}


def shares(result: pd.DataFrame) -> pd.DataFrame:
    """Per timer: pairs with a timing verdict, and the share of faster and slower ones."""
    timed = result[result["verdict"].isin(["faster", "slower", "same", "uncertain"])]
    out = timed.groupby("timer")["verdict"].agg(
        pairs="size", faster=lambda v: v.eq("faster").mean(), slower=lambda v: v.eq("slower").mean(),
        uncertain=lambda v: v.eq("uncertain").mean())
    return out.reset_index()


def agreement(result: pd.DataFrame) -> pd.DataFrame:
    """Per timer, how closely the two runs agree over every pair with a timing verdict:
    ``pairs``, and the median and 90th percentile of |NEW / BASE - 1| (an A/A pair's figure:
    what two runs of one command on one machine differ by)."""
    timed = result[result["verdict"].isin(["faster", "slower", "same", "uncertain"])]
    off = (pd.to_numeric(timed["ratio"], errors="coerce") - 1).abs()
    out = off.groupby(timed["timer"]).agg(pairs="size", median="median", p90=lambda v: v.quantile(0.9))
    return out.reset_index()


def agreement_line(result: pd.DataFrame) -> str:
    """:func:`agreement` as one line ("" when no pair has a timing verdict)."""
    parts = [f"{r.timer} {r.median:.1%} / {r.p90:.1%} ({r.pairs} pairs)" for r in agreement(result).itertuples()]
    return "|NEW / BASE - 1|, median / 90th percentile: " + ", ".join(parts) if parts else ""


def ordered(result: pd.DataFrame) -> pd.DataFrame:
    """Rows that need a look first (VERDICTS order, ``same`` last), then by case."""
    rank = result["verdict"].map({v: i for i, v in enumerate(VERDICTS)})
    sort = [c for c in ("benchmark", "impl", "device", "timer", "scenario", "n") if c in result]
    return result.assign(_rank=rank).sort_values(["_rank", *sort], kind="stable").drop(columns="_rank")


def display(result: pd.DataFrame) -> pd.DataFrame:
    """``ordered`` rows as text for a table: the key columns that vary (impl, timer and n
    always), times, ratio, interval and p formatted."""
    rows = ordered(result)
    keys = [c for c in KEY_COLUMNS if c in ("impl", "timer", "n") or rows[c].astype(str).nunique() > 1]

    def fmt(value, spec: str) -> str:
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)

    out = rows[keys].astype(str).replace({"nan": ""})
    out["base µs"] = rows["base_median_us"].map(lambda v: fmt(v, ".4g"))
    out["new µs"] = rows["new_median_us"].map(lambda v: fmt(v, ".4g"))
    out["ratio"] = rows["ratio"].map(lambda v: fmt(v, ".3f"))
    out["interval"] = [f"{fmt(lo, '.3f')}–{fmt(hi, '.3f')}" if not math.isnan(lo) else ""
                       for lo, hi in zip(rows["ci_low"], rows["ci_high"])]
    out["p"] = rows["p"].map(lambda v: fmt(v, ".2g"))
    out["verdict"], out["why"] = rows["verdict"], rows["why"].fillna("")
    return out.reset_index(drop=True)


def markdown(result: pd.DataFrame) -> str:
    """A markdown table of :func:`display`, verdict counts on top."""
    table = display(result)
    lines = [", ".join(f"{n} {v}" for v, n in counts(result).items()), "",
             "| " + " | ".join(table.columns) + " |", "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"
