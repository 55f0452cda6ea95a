"""What the public call adds in a sweep: for every case with both an ``api`` and a
``wall`` row, ``api`` - ``wall`` in µs, per implementation (median, maximum, cells over
a limit), over all cells and over the cells whose rows are both clean and whose ``wall``
time is at most ``--short`` µs (where a difference of a few µs can be resolved at all).
Run on a sweep with ``--timer wall,api``:

    python benchmarks/api_vs_wall.py results/h200-cuda.csv --limit 15

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse

import pandas as pd

from nmsbench.results import read_results

CASE = ["impl", "device", "dtype", "scenario", "overlap", "n", "iou_threshold"]


def differences(path: str) -> pd.DataFrame:
    frame = read_results(path)
    frame = frame[(frame["status"] == "ok") & (frame["benchmark"] == "nms")]
    rows = {timer: frame[frame["timer"] == timer].set_index(CASE)[["median_us", "noisy"]] for timer in ("api", "wall")}
    both = rows["api"].add_suffix("_api").join(rows["wall"].add_suffix("_wall"), how="inner")
    both["difference_us"] = both["median_us_api"] - both["median_us_wall"]
    both["clean"] = ~(both["noisy_api"].astype(bool) | both["noisy_wall"].astype(bool))
    return both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results")
    parser.add_argument("--limit", type=float, default=15.0, help="µs over wall that a cell may take")
    parser.add_argument("--short", type=float, default=1000.0, help="wall µs up to which a cell counts as short")
    args = parser.parse_args()
    both = differences(args.results)
    if both.empty:
        raise SystemExit(f"{args.results} has no case with both an api and a wall row (sweep with --timer wall,api)")
    short = both[both["clean"] & (both["median_us_wall"] <= args.short)]
    print(f"{'impl':18s} {'cells':>5s} {'median':>8s} {'max':>9s} {'over':>5s} | clean and short: {'cells':>5s} "
          f"{'median':>8s} {'over':>5s}")
    for impl, group in both.groupby(level="impl"):
        kept = short.xs(impl, level="impl") if impl in short.index.get_level_values("impl") else short.iloc[:0]
        print(f"{impl:18s} {len(group):5d} {group['difference_us'].median():8.1f} {group['difference_us'].max():9.1f} "
              f"{int((group['difference_us'] > args.limit).sum()):5d} |                  {len(kept):5d} "
              f"{kept['difference_us'].median() if len(kept) else float('nan'):8.1f} "
              f"{int((kept['difference_us'] > args.limit).sum()):5d}")
    print(f"all: {len(both)} cells, {int((both['difference_us'] > args.limit).sum())} over +{args.limit:g} µs; clean "
          f"and short: {len(short)} cells, {int((short['difference_us'] > args.limit).sum())} over")


if __name__ == "__main__":
    main()
