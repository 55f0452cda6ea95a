"""How well two runs of the same sweep agree: for every case both ran (implementation,
scenario, overlap, N, dtype, IoU, timer), each implementation's ratio to a reference
implementation in run A and in run B, and the |difference| between the two ratios
(|ratio_A / ratio_B - 1|). Prints its median and 90th percentile per timer, by N and
by implementation. Run the same sweep twice in one session, then:

    python benchmarks/aa_ratios.py aa-a.csv aa-b.csv --reference torchvision

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse

import pandas as pd

from nmsbench.results import read_results

CASE = ["impl", "device", "dtype", "timer", "scenario", "overlap", "n", "iou_threshold"]


def ratios(path: str, reference: str) -> pd.Series:
    """Each ok row's median over the reference implementation's median in the same case."""
    frame = read_results(path)
    frame = frame[(frame["status"] == "ok") & (frame["benchmark"] == "nms")]
    times = frame.set_index(CASE)["median_us"]
    base = times.xs(reference, level="impl")
    times = times.drop(reference, level="impl")
    return times / base.reindex(times.index.droplevel("impl")).to_numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--reference", default="torchvision", help="the implementation ratios are taken against")
    args = parser.parse_args()
    difference = (ratios(args.a, args.reference) / ratios(args.b, args.reference) - 1).abs().dropna()
    if difference.empty:
        raise SystemExit("the two runs share no case with the reference implementation")
    for timer, values in difference.groupby(level="timer"):
        print(f"{timer}: {len(values)} pairs, median {values.median():.1%}, 90th percentile {values.quantile(0.9):.1%}, "
              f"max {values.max():.1%}")
        for level in ("n", "impl"):
            medians = values.groupby(level=level).median()
            print(f"  median by {level}: " + ", ".join(f"{key} {value:.1%}" for key, value in medians.items()))


if __name__ == "__main__":
    main()
