"""Whether `nmsbench compare` calls what it should on a GPU machine: two checks, each
sweeping through the real `nmsbench sweep` command (twice, in this one process), then
comparing the two runs as `nmsbench compare` does.

- ``aa``: the same sweep twice (every CUDA implementation, ``--n 64..8192``, uniform and
  clustered, timers wall and device). Target: no faster/slower verdict on device rows at
  the default threshold, at most 2 % of wall rows.
- ``slowed``: a sweep of one implementation, then of a test-only copy of it made
  ``--fraction`` slower (tests/slowed.py: the original, then that fraction of its own time
  burnt on the same device; registered under the original's name for that sweep only, so
  the rows pair). Target: ``slower`` in at least 90 % of its cases from N = 1024 on.

    python benchmarks/compare_check.py all --out results/runs/compare-check

writes the runs (CSV, samples, sidecar) and markdown tables (the verdicts, the shares per
timer) under --out, and prints the shares against their targets.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from nmsbench import compare, implementations

TESTS = Path(__file__).resolve().parent.parent / "tests"  # tests/slowed.py: the slowed copy
sys.path.insert(0, str(TESTS))

AA_TARGETS = {"device": 0.0, "wall": 0.02}  # largest share of faster or slower rows
SLOWED_TARGET, SLOWED_FROM_N = 0.90, 1024


def implementations_on(device: str) -> list[str]:
    """Every implementation with an available backend on ``device`` and no sweep limit."""
    names = []
    for name, impl in sorted(implementations().items()):
        backend = impl.backends.get(device)
        if backend is not None and backend.availability()[0] and backend.sweep_max_n is None:
            names.append(name)
    if not names:
        raise SystemExit(f"no {device} implementation is available here")
    return names


def sweep(out: Path, impls: list[str], args, slowed: str = "") -> Path:
    """One `nmsbench sweep` in a process of its own: a device-timer pass leaves CUPTI attached
    to its process, which slows every later CUDA call's host side, so a second sweep in the
    same process would not be an A/A twin of the first. ``slowed``: that implementation
    runs as its slowed copy (tests/slowed.py) in that process."""
    argv = ["sweep", "--device", args.device, "--impl", ",".join(impls), "--n", args.n, "--scenario", args.scenario,
            "--timer", args.timer, "--out", str(out), "--force"]
    if args.min_run_time:
        argv += ["--min-run-time", str(args.min_run_time)]
    print("nmsbench", " ".join(argv), flush=True)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from nmsbench.cli import main\n"
            "if sys.argv[2]:\n    from slowed import slowed\n    held = slowed(sys.argv[2], float(sys.argv[3]))\n"
            "    held.__enter__()  # held to the end: a dropped context manager would put the original back\n"
            "main.main(sys.argv[4:], prog_name='nmsbench')")
    done = subprocess.run([sys.executable, "-c", code, str(TESTS), slowed, str(args.fraction), *argv])
    if done.returncode != 0:
        raise SystemExit(f"the sweep into {out} failed (exit {done.returncode})")
    return out


def shares_table(result: pd.DataFrame) -> pd.DataFrame:
    table = compare.shares(result)
    for column in ("faster", "slower", "uncertain"):
        table[column] = table[column].map(lambda v: f"{v:.1%}")
    return table


def markdown_table(frame: pd.DataFrame) -> str:
    rows = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    rows += ["| " + " | ".join(map(str, r)) + " |" for r in frame.itertuples(index=False)]
    return "\n".join(rows) + "\n"


def report(name: str, result: pd.DataFrame, summary: pd.DataFrame, verdict_lines: list[str], out: Path) -> None:
    text = (f"# {name}\n\n" + "\n".join(verdict_lines) + "\n\n" + markdown_table(summary) + "\n"
            + compare.markdown(result))
    (out / f"{name}.md").write_text(text)
    result.to_csv(out / f"{name}-verdicts.csv", index=False)
    print(f"\n{name}:\n" + "\n".join(verdict_lines) + "\n" + markdown_table(summary), flush=True)


def check_aa(args, out: Path) -> None:
    impls = args.impl.split(",") if args.impl else implementations_on(args.device)
    a, b = sweep(out / "aa-a.csv", impls, args), sweep(out / "aa-b.csv", impls, args)
    result = compare.compare_files(a, b, threshold=args.threshold, alpha=args.alpha)
    summary = shares_table(result)
    lines = [f"A/A: {len(result)} pairs, {compare.counts(result)}; threshold ±{args.threshold:.0%}, alpha {args.alpha:g}"]
    for timer, limit in AA_TARGETS.items():
        rows = result[(result["timer"] == timer) & result["verdict"].isin(["faster", "slower", "same", "uncertain"])]
        if len(rows):
            share = rows["verdict"].isin(["faster", "slower"]).mean()
            lines.append(f"- {timer}: {share:.1%} faster or slower (target ≤ {limit:.0%}): "
                         f"{'met' if share <= limit else 'MISSED'}")
    report("aa", result, summary, lines, out)


def check_slowed(args, out: Path) -> None:
    base = sweep(out / "slowed-base.csv", [args.slowed], args)
    new = sweep(out / "slowed-new.csv", [args.slowed], args, slowed=args.slowed)
    result = compare.compare_files(base, new, threshold=args.threshold, alpha=args.alpha)
    large = result[pd.to_numeric(result["n"], errors="coerce") >= SLOWED_FROM_N]
    summary = shares_table(large)
    lines = [f"{args.slowed} made {args.fraction:.0%} slower: {len(result)} pairs, {compare.counts(result)}"]
    for timer, rows in large.groupby("timer"):
        share = rows["verdict"].eq("slower").mean()
        lines.append(f"- {timer}, N ≥ {SLOWED_FROM_N}: {share:.1%} slower of {len(rows)} (target ≥ {SLOWED_TARGET:.0%}): "
                     f"{'met' if share >= SLOWED_TARGET else 'MISSED'}; median ratio {rows['ratio'].median():.3f}")
    report("slowed", result, summary, lines, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("check", choices=["aa", "slowed", "all"])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs and the markdown tables")
    parser.add_argument("--n", default="64..8192")
    parser.add_argument("--scenario", default="uniform,clustered")
    parser.add_argument("--timer", default="wall,device")
    parser.add_argument("--device", default="cuda", help="cuda (the targets); cpu for a quick look at the machinery")
    parser.add_argument("--impl", default="", help="A/A: these implementations (default: every one on --device)")
    parser.add_argument("--min-run-time", type=float, help="the sweep's --min-run-time (default: the sweep's)")
    parser.add_argument("--slowed", default="bitmask_two_phase", help="the implementation whose copy is slowed")
    parser.add_argument("--fraction", type=float, default=0.10, help="how much slower the copy is")
    parser.add_argument("--threshold", type=float, default=compare.DEFAULT_THRESHOLD)
    parser.add_argument("--alpha", type=float, default=compare.DEFAULT_ALPHA)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.check in ("aa", "all"):
        check_aa(args, args.out)
    if args.check in ("slowed", "all"):
        check_slowed(args, args.out)


if __name__ == "__main__":
    main()
