"""``nmsbench diff``: what each implementation keeps on one box set, written to a file.

Regenerates one box set exactly as ``nmsbench sweep`` does (``nmsbench.datasets.generate``
with the same scenario, overlap knob, N, seed and classes), runs each implementation on it
once through ``nmsbench.run_nms`` and writes the boxes, the scores, every implementation's
kept indices and final scores (Matrix NMS and Soft-NMS change scores) and the case's
metadata to a JSON file, by default ``results/runs/diff-<time>.json``. The dashboard's
suppression differences view draws these files; it never runs NMS itself.

``nmsbench.cli`` adds this command to its group.
"""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path

import click

from . import datasets

DEFAULT_SCENARIO = "clustered"
DEFAULT_N = 512


def default_diff_path(directory: Path = Path("results") / "runs") -> Path:
    return directory / f"diff-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"


@click.command("diff")
@click.option("--scenario", default=DEFAULT_SCENARIO, show_default=True, type=click.Choice(list(datasets.SYNTHETIC)),
              help="Box-set scenario (as in `nmsbench sweep --scenario`).")
@click.option("--overlap", type=float, help="The scenario's overlap knob. Default: the scenario's own default.")
@click.option("--n", "n", default=DEFAULT_N, show_default=True, type=click.IntRange(min=1), help="Number of boxes.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the generated box set.")
@click.option("--iou", default=0.5, show_default=True, type=click.FloatRange(0, 1), help="IoU threshold.")
@click.option("--classes", default=1, show_default=True, type=click.IntRange(min=1),
              help="Number of labels; above 1 the NMS is class-aware.")
@click.option("--impl", "impls", multiple=True,
              help="Implementations to run (repeat or comma-separate). Default: every one that runs on --device here.")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "cuda"]), help="Where to run them.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Implementation parameter, given to those that take it (e.g. score_threshold=0.1, kernel=linear).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="JSON file to write. Default: results/runs/diff-<time>.json.")
@click.option("--canvas", default="fixed", show_default=True, type=click.Choice(["fixed", "density"]),
              help="fixed: the 1024-px canvas; density: its side grows as sqrt(N) (1024 px at N = 1024), as `sweep --canvas`.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
def diff_command(scenario, overlap, n, seed, iou, classes, impls, device, params, out, force, canvas):
    """Run implementations on one regenerated box set and write what each keeps (for the
    dashboard's suppression differences view).

    \b
    nmsbench diff                                            clustered, N = 512, every CPU implementation
    nmsbench diff --scenario chain --n 256 --impl torchvision,allpairs
    nmsbench diff --device cuda --impl hard_fused,matrix_recompute,torchvision
    """
    from . import differences
    from .cli_options import _split, parse_params
    from .registry import implementations
    from .results import environment

    spec = datasets.SCENARIOS[scenario]
    lo, hi = (float(v) for v in spec.knob_range)
    if overlap is not None and not lo <= overlap <= hi:
        raise click.BadParameter(f"{scenario}'s knob ({spec.knob}) runs from {lo:g} to {hi:g}, got {overlap:g}",
                                 param_hint="--overlap")
    given = parse_params(params)
    registry = implementations()
    names = _split(impls)
    unknown = [name for name in names if name not in registry]
    if unknown:
        raise click.BadParameter(f"unknown implementation(s) {', '.join(unknown)}; known: {', '.join(sorted(registry))}",
                                 param_hint="--impl")
    if not names:
        ready = differences.availability(device)
        names = [name for name, reason in ready.items() if not reason]
        if not names:
            raise click.ClickException(f"no implementation runs on {device} here")
    for name in names:  # a bad parameter is one clear message, not an error in the file
        impl = registry[name]
        try:
            impl.resolve_params(impl.accepted_params(given))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--param") from None
    unused = sorted(set(given) - {p.name for name in names for p in registry[name].params})
    if unused:
        raise click.BadParameter(f"no chosen implementation takes {', '.join(unused)}", param_hint="--param")
    path = out or default_diff_path()
    if path.exists() and not force:
        raise click.UsageError(f"{path} exists; give --force to overwrite it, or another --out")

    case = differences.run_case(scenario, n, overlap, seed, iou, classes=classes, impls=names, device=device,
                                params=given, canvas=canvas)
    env = environment()
    command = "nmsbench diff " + shlex.join([
        "--scenario", scenario, "--overlap", f"{case.overlap:g}", "--n", str(n), "--seed", str(seed), "--iou", f"{iou:g}",
        "--classes", str(classes), "--impl", ",".join(names), "--device", device, "--canvas", canvas,
        *[a for k, v in given.items() for a in ("--param", f"{k}={v}")], "--out", str(path)])
    case.meta = {"command": command, "environment": env, "created": env["timestamp"]}
    if not case.keeps:  # nothing to show: no file, and why
        reasons = "; ".join(f"{name}: {why}" for name, why in {**case.unavailable, **case.errors}.items())
        raise click.ClickException(f"no implementation ran on {device} ({reasons}); nothing written")
    differences.write_case(case, path)

    click.echo(f"{scenario}{' (density canvas)' if canvas == 'density' else ''}, knob {case.overlap:g}, N = {case.n}, "
               f"seed {seed}, IoU {iou:g} on {device}:")
    reference = "torchvision" if "torchvision" in case.keeps else next(iter(case.keeps), None)
    for name in names:
        if name in case.keeps:
            note = ""
            if reference and name != reference:
                note = f", Jaccard vs {reference} {differences.jaccard(case.keeps[name], case.keeps[reference]):.3f}"
            if name in case.finals:
                left = differences.remaining_score(case, [name])
                note += f", {int((left[case.keeps[name]] < 0.5).sum())} kept with less than half their score"
            click.echo(f"  {name}: keeps {len(case.keeps[name])}{note}")
        else:
            click.echo(f"  {name}: not run: {case.unavailable.get(name) or case.errors.get(name)}")
    click.echo(f"wrote {path}")
