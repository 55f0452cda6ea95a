"""What ``nmsbench.run_nms`` costs over the backend it calls, on CUDA: the backend alone,
``run_nms`` as a user calls it, and ``run_nms(..., validate=False)`` (the Python layer
without the input check), timed in interleaved rounds (each variant in turn, the order
rotated every round) so that the differences do not depend on what the host did while
one of them ran. Run on a GPU machine:

    python benchmarks/api_overhead.py --n 64,1024,8192,32768 --impl hard_fused,torchvision

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import statistics

import nmsbench
from nmsbench.timing import HostGauge, enough_usual, wall_blocks

from _common import boxes_of, parse_sizes


def interleaved(calls: dict, seconds: float, rounds: int, gauge: HostGauge) -> dict:
    """Each call's median µs per call: ``rounds`` rounds in rotated order, each call timed
    by the sweep's ``wall`` timer (``nmsbench.timing.wall_blocks``) in its turn; a round
    whose turns ran while the host was slow (the sweep's ``HostGauge``) is left out, as
    the sweep leaves such rounds out, where at least half the rounds remain."""
    medians = {name: [] for name in calls}
    names = list(calls)
    usual = []
    for r in range(rounds):
        before, slow = gauge.read(), False
        for name in names[r % len(names):] + names[:r % len(names)]:
            blocks = wall_blocks(calls[name], min_run_time=seconds / rounds / len(calls), threads=1)
            medians[name].append(statistics.median(blocks.times_us))
            after = gauge.read()
            slow |= gauge.judge(before, after)
            before = after
        usual.append(not slow)
    keep = usual if sum(usual) >= enough_usual(rounds) else [True] * rounds
    return {name: statistics.median(v for v, k in zip(values, keep) if k) for name, values in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="64,1024,8192,32768", help="box counts, comma-separated")
    parser.add_argument("--impl", default="", help="implementations (default: every one with a CUDA backend)")
    parser.add_argument("--scenario", default="clustered")
    parser.add_argument("--seconds", type=float, default=0.6, help="timing budget of one size, all variants")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    registered = nmsbench.implementations()
    names = [n for n in args.impl.split(",") if n] or sorted(n for n, i in registered.items() if "cuda" in i.backends)
    gauge = HostGauge()
    print("impl n backend_us api_us no_validate_us api-backend no_validate-backend")
    for name in names:
        impl = registered[name]
        backend = impl.backend("cuda")
        params = impl.resolve_params({})  # the family's defaults
        for n in parse_sizes(args.n):
            case = boxes_of(args.scenario, n)
            b, s = case.boxes, case.scores
            m = interleaved({
                "backend": lambda: backend.fn(b, s, iou_threshold=0.5, labels=None, **params),
                "api": lambda: nmsbench.run_nms(name, b, s, 0.5, **params),
                "no_validate": lambda: nmsbench.run_nms(name, b, s, 0.5, validate=False, **params),
            }, args.seconds, args.rounds, gauge)
            print(f"{name} {n} {m['backend']:.1f} {m['api']:.1f} {m['no_validate']:.1f} "
                  f"{m['api'] - m['backend']:+.1f} {m['no_validate'] - m['backend']:+.1f}", flush=True)
    print("host:", gauge.summary())


if __name__ == "__main__":
    main()
