"""How well two runs of the same sweep agree: for every case both ran (implementation,
scenario, overlap, N, dtype, IoU, timer), each implementation's ratio to a reference
implementation in run A and in run B, and the |difference| between the two ratios
(|ratio_A / ratio_B - 1|). Prints its median and 90th percentile per timer, by N and
by implementation, and the same for the pairs whose four rows (the implementation and
the reference, in both runs) are all clean (not ``noisy``). Run the same sweep twice in
one session, then:

    python benchmarks/aa_ratios.py aa-a.csv aa-b.csv --reference torchvision

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse

import pandas as pd

from nmsbench.results import read_results

CASE = ["impl", "device", "dtype", "timer", "scenario", "overlap", "n", "iou_threshold"]


def ratios(path: str, reference: str) -> tuple[pd.Series, pd.Series]:
    """(each ok row's median over the reference implementation's median in the same case,
    whether both rows are clean)."""
    frame = read_results(path)
    frame = frame[(frame["status"] == "ok") & (frame["benchmark"] == "nms")]
    indexed = frame.set_index(CASE)
    times, clean = indexed["median_us"], ~indexed["noisy"].astype(bool)
    base, base_clean = times.xs(reference, level="impl"), clean.xs(reference, level="impl")
    times, clean = times.drop(reference, level="impl"), clean.drop(reference, level="impl")
    at = times.index.droplevel("impl")
    return times / base.reindex(at).to_numpy(), clean & base_clean.reindex(at).fillna(False).to_numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--reference", default="torchvision", help="the implementation ratios are taken against")
    args = parser.parse_args()
    (ratio_a, clean_a), (ratio_b, clean_b) = ratios(args.a, args.reference), ratios(args.b, args.reference)
    difference = (ratio_a / ratio_b - 1).abs().dropna()
    if difference.empty:
        raise SystemExit("the two runs share no case with the reference implementation")
    clean = (clean_a & clean_b.reindex(clean_a.index).fillna(False)).reindex(difference.index).fillna(False)
    for timer, values in difference.groupby(level="timer"):
        print(f"{timer}: {len(values)} pairs, median {values.median():.1%}, 90th percentile {values.quantile(0.9):.1%}, "
              f"max {values.max():.1%}")
        for level in ("n", "impl"):
            medians = values.groupby(level=level).median()
            print(f"  median by {level}: " + ", ".join(f"{key} {value:.1%}" for key, value in medians.items()))
        kept = values[clean.xs(timer, level="timer", drop_level=False).to_numpy()]
        if len(kept):
            print(f"  clean in both runs: {len(kept)} pairs, median {kept.median():.1%}, "
                  f"90th percentile {kept.quantile(0.9):.1%}")
        else:
            print("  clean in both runs: no pair")


if __name__ == "__main__":
    main()
