"""The sweep: every case of the grid, timed and compared, one row each (the ``nms``
benchmark's plug-in of the engine).

For each box set (scenario x overlap x n, generated once on the CPU) the runner computes
the realized overlap once, and the reference greedy NMS once per dtype and IoU threshold.
Then, for each device x dtype x IoU threshold, it moves and validates the box set once
and prepares every implementation: calls the op once (warm-up: numba/NVRTC compilation;
its output is the one checked against the reference), and has each timer of the registry
(:mod:`nmsbench.timers`) build its call from what the sweep offers (the op; ``api``:
``nmsbench.run_nms`` on the same tensors; ``graph``: the padded op to capture), each
checked to give the op's output. The implementations are then timed together in rotated
rounds, under the host gauge and the noise rule (:mod:`nmsbench.engine.rounds`), and
every ok row carries its raw samples (``_samples``) for the results writer.

Timers that profile (``device``) come in a pass of their own over the grid, after every
other timer's (:func:`nmsbench.timers.timer_passes`): once a process has profiled, CUPTI stays attached
and slows the host side of every later CUDA call. Their GPU durations are not judged by
the host gauge.

Any exception becomes an error row, an unsupported cell a skipped row (the device timer's
too, when the profiler sees no GPU work in a call); the sweep goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from . import api, cluster, datasets  # cluster imports no dask: a run that asks for one does
from .agreement import FAMILY_REFERENCES, NO_FAMILY_REFERENCE, compare_family, compare_keep
from .boxes import BoxSet
from .engine.axes import (Axis, GridError, check_axes, floats, ints, names, parse_devices, parse_param,
                          parse_sizes)
from .engine.plugins import Benchmark, register_benchmark
from .engine.retries import SlowHostRetries, default_slow_retries, slow_retries_axis
from .engine.settings import CUDA_RUN_TIME, DEFAULT_RUN_TIME
from .engine.rounds import (CaseTimeout, Contender, Settings, case_deadline, check_case_timeout, check_settings,  # noqa: F401
                            error_rows, error_text, finish_run, is_real, is_whole, prepare, row_emitter, start_run,
                            time_in_rounds, use_threads)
from .inputs import validate_nms_inputs
from .overlap import realized_overlap
from .registry import Implementation, get, implementations
from .results import case_key
from .timers import DEFAULT_TIMERS, TIMERS, Callables, timer_passes, timers_for
from .timing import DEFAULT_ROUNDS, HostGauge

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}
REFERENCE = "torchvision"

# From this many boxes on the greedy reference is hard_graph: index for index torchvision's
# (the property tests hold it there) in O(N + E), where torchvision's CPU NMS, which tests
# every kept box against every later one, grows too slow to wait for on large images.
LARGE_REFERENCE, LARGE_REFERENCE_MIN_N = "hard_graph", 32769


DEVICES = ("cpu", "cuda")


def _unknown(what: str, choices: Callable[[], object], unknown: str = "unknown") -> Callable[[list], str]:
    def check(values: list) -> str:
        known = list(choices())
        bad = [v for v in values if v not in known]
        return f"{unknown} {', '.join(map(str, bad))}; {what}: {', '.join(map(str, known))}" if bad else ""
    return check


def _every(ok: Callable[[object], bool], message: str) -> Callable[[list], str]:
    """A check that every value passes ``ok`` (``message`` formatted with the bad ones)."""
    def check(values: list) -> str:
        bad = [v for v in values if not ok(v)]
        return message.format(", ".join(map(repr, bad))) if bad else ""
    return check


def _timers_help() -> str:
    listed = "; ".join(f"{t.name} ({t.help}{'' if 'cpu' in t.devices else ', cuda rows only'})" for t in TIMERS.values())
    return f"Timers: {listed}."


# the sweep's axes: the command line's options, and the per-axis checks of Grid.validate (the measurement
# settings, --rounds and the like, are the engine's: rounds.SETTINGS_AXES)
AXES = (
    Axis("ns", "--n", parse_sizes, parse_sizes("64..1024"), check=_every(
        lambda n: is_whole(n) and n >= 1, "box counts must be positive whole numbers, got {}"),
        help="Box counts (positive): 64..8192 doubles from 64 and always ends at the upper bound (100..1000 is "
             "100, 200, 400, 800, 1000); or a list 100,1000; or both."),
    Axis("impls", "--impl", names("implementations"), check=_unknown("known", lambda: sorted(implementations())),
         help="Implementations to run (repeat or comma-separate). Default: all, each up to its sweep limit (the plain "
              "Soft-NMS loop soft_torch to N = 1024 on the CPU, 256 on CUDA, where a call waits for the GPU at every pick; "
              "naming it here lifts that); "
              "see `nmsbench list`."),
    Axis("devices", "--device", parse_devices, ["cpu"], help="cpu and/or cuda (repeat or comma-separate).",
         check=lambda values: "" if set(values) <= set(DEVICES) else
         f"{', '.join(map(str, (d for d in values if d not in DEVICES)))}: choose cpu and/or cuda"),
    Axis("scenarios", "--scenario", names("scenarios"), list(datasets.SYNTHETIC), check=_unknown("known", lambda: datasets.SCENARIOS),
         help="Box-set scenarios (repeat or comma-separate). Default: the synthetic ones; see `nmsbench scenarios`."),
    Axis("overlaps", "--overlap", floats("--overlap values"), check=_every(is_real, "overlap values must be numbers, got {}"),
         help="Values of each scenario's overlap knob to sweep. Default: each scenario's own default."),
    Axis("ious", "--iou", floats("--iou values"), [0.5], check=_every(
        lambda v: is_real(v) and 0.0 <= v <= 1.0, "IoU thresholds must lie in [0, 1], got {}"),
        help="IoU thresholds (repeat or comma-separate)."),
    Axis("dtypes", "--dtype", names("dtypes"), ["float32"], check=lambda values: "" if set(values) <= set(DTYPES) else
         f"unknown {', '.join(map(str, (d for d in values if d not in DTYPES)))}; choose from {', '.join(DTYPES)}",
         help="Box dtypes: float32, float64, float16."),
    Axis("seed", "--seed", ints("the seed", 0), 0, many=False,
         check=lambda v: "" if is_whole(v) and v >= 0 else f"seed must be a whole number >= 0, got {v!r}",
         help="Seed of the generated box sets."),
    Axis("classes", "--classes", ints("classes", 1), 1, many=False,
         check=lambda v: "" if is_whole(v) and v >= 1 else f"classes must be a whole number >= 1, got {v!r}",
         help="Number of labels; above 1 the NMS is class-aware."),
    Axis("params", "--param", parse_param, {}, combine=dict, metavar="KEY=VALUE",
         check=lambda v: "" if isinstance(v, dict) else f"params must be a dict, got {v!r}",
         help="Implementation parameter, given to those that take it (e.g. sigma=0.5, kernel=linear, score_threshold=0.1)."),
    Axis("file", "--file", lambda text: [text], None, many=False,
         help="Boxes file (.npz, .pt, .csv) for the `file` scenario (refused without --scenario file)."),
    Axis("canvases", "--canvas", names("canvases"), ["fixed"], check=_unknown(
        "choose from", lambda: datasets.synthetic.CANVASES, "unknown canvas"),
        help="Canvas of the synthetic scenarios: fixed (1024 px at every N) and/or density (its side grows as sqrt(N), "
             "1024 px at N = 1024, so each box keeps as many neighbours at any N). Rows record it in the canvas column."),
    Axis("recordings", "--recording", names("recordings"), None,
         help="For the `real` scenario: recordings photo@size to replay (repeat or comma-separate; `all`). Its knob "
              "(--overlap) is the confidence threshold, which sets N; --n caps N at the n best candidates by score."),
    Axis("timers", "--timer", names("timers"), list(DEFAULT_TIMERS), help=_timers_help(),
         check=lambda values: "" if set(values) <= set(TIMERS) else
         f"choose from {', '.join(TIMERS)}, got {', '.join(map(str, values))}"),
    slow_retries_axis("box set"),
    cluster.cluster_axis("Run the case groups on Dask workers: local:K (K worker processes here, one per GPU first) or a "
                         "scheduler's address (tcp://host:8786)."),
)


@dataclass
class Grid:
    """The sweep axes; their product is the set of cases. A Grid checks itself when it is
    made (:meth:`validate`): a bad value is a :class:`GridError` (a ValueError)."""

    impls: Optional[list[str]] = None  # None: every implementation, each up to its sweep limit (cap_slow)
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    scenarios: list[str] = field(default_factory=lambda: list(datasets.SYNTHETIC))
    ns: list[int] = field(default_factory=lambda: parse_sizes("64..1024"))
    ious: list[float] = field(default_factory=lambda: [0.5])
    overlaps: Optional[list[float]] = None  # None: each scenario's default knob value
    seed: int = 0
    classes: int = 1
    params: dict = field(default_factory=dict)  # given to implementations that accept them
    timers: list[str] = field(default_factory=lambda: list(DEFAULT_TIMERS))
    min_run_time: Optional[float] = None  # seconds of timing per measurement, shared by its rounds; None: default_run_time
    threads: int = 1
    file: Optional[str] = None
    recordings: Optional[list[str]] = None  # for the real scenario; None: its default recording
    case_timeout: Optional[float] = None  # seconds per case (see case_deadline); None: no limit
    repeat_noisy: int = 0  # re-time a noisy measurement up to this many times, keep the least noisy
    rounds: int = DEFAULT_ROUNDS  # interleaved rounds per measurement (nmsbench.engine.rounds)
    host_wait: float = 0.0  # seconds a turn may wait for the host's usual speed (0: never waits)
    canvases: list[str] = field(default_factory=lambda: ["fixed"])  # synthetic scenarios' canvas (datasets.synthetic)
    # leave a backend out above its sweep_max_n (the CLI's sweep of every implementation,
    # without --impl): a plain per-pick loop would take hours at the largest N
    cap_slow: bool = False
    cluster: Optional[str] = None  # local:K or a Dask scheduler's address (nmsbench.cluster); None: this process
    slow_retries: Optional[int] = None  # re-timings at the end of a pass of rows flagged for a slow host; None: default_slow_retries

    def __post_init__(self):
        if self.impls is None:
            self.impls, self.cap_slow = sorted(implementations()), True
        if self.min_run_time is None:
            self.min_run_time = default_run_time(self.devices)
        if self.slow_retries is None:
            self.slow_retries = default_slow_retries(self.devices)
        self.validate()

    def validate(self) -> None:
        """Raise :class:`GridError` for anything that cannot be swept: each axis's own checks
        (:data:`AXES`), then those across axes."""
        def need(ok: bool, name: str, message: str) -> None:
            if not ok:
                raise GridError(name, message)

        check_axes(self, AXES)
        check_settings(self)  # the measurement settings' fields
        for name in ("impls", "devices", "dtypes", "scenarios", "ns", "ious", "timers", "canvases"):
            need(getattr(self, name) is not None, name, f"{name} must be a non-empty list, got None")
        idle = [d for d in self.devices if not self.timers_for(d)]
        cpu = [t.name for t in TIMERS.values() if "cpu" in t.devices]
        need(not idle, "timers", f"{', '.join(self.timers)} time{'s' if len(self.timers) == 1 else ''} the GPU only, so "
             f"{' and '.join(idle)} would give no rows; add {' and/or '.join(cpu)} ({', '.join(cpu)} time CPU rows too)")
        for name in self.scenarios if self.overlaps is not None else ():
            lo, hi = datasets.SCENARIOS[name].knob_range
            outside = [v for v in self.overlaps if not lo <= v <= hi]
            need(not outside, "overlaps", f"{outside} outside {name}'s knob range [{lo}, {hi}]")
        need("file" not in self.scenarios or bool(self.file), "file", "the file scenario needs a boxes file (--file PATH)")
        need(not self.file or "file" in self.scenarios, "file",
             f"a boxes file ({self.file}) is only read by the file scenario; add it (--scenario file) or leave the file out")
        need(self.canvases == ["fixed"] or any(s in datasets.SYNTHETIC for s in self.scenarios), "canvases",
             f"a canvas is for the synthetic scenarios ({', '.join(datasets.SYNTHETIC)}); add one or leave --canvas out")
        need(self.recordings is None or any(datasets.SCENARIOS[s].recordings for s in self.scenarios), "recordings",
             "--recording is for the real scenario (add --scenario real; Grid.recordings)")

    def overlaps_for(self, scenario: str) -> list[float]:
        return list(self.overlaps) if self.overlaps else [datasets.SCENARIOS[scenario].default_overlap]

    def recordings_for(self, scenario: str) -> list[Optional[str]]:
        """The recordings a scenario replays (``[None]``: its default, or it replays none)."""
        if datasets.SCENARIOS[scenario].recordings is None:
            return [None]
        return list(self.recordings) if self.recordings else [None]

    def canvases_for(self, scenario: str) -> list[str]:
        """The canvases a scenario is generated on (``[""]``: it generates no boxes)."""
        return list(self.canvases) if scenario in datasets.SYNTHETIC else [""]

    def timers_for(self, device: str) -> list[str]:
        return timers_for(device, self.timers)

    def count(self) -> int:
        """Number of rows the sweep will write (graph rows of backends that are not
        graph-safe are written as skipped)."""
        per_set = sum(len(self.timers_for(d)) for d in self.devices) * len(self.dtypes) * len(self.impls) * len(self.ious)
        return sum(len(self.overlaps_for(s)) * len(self.recordings_for(s)) * len(self.canvases_for(s))
                   for s in self.scenarios) * len(self.ns) * per_set


def default_run_time(devices) -> float:
    """--min-run-time's default: CUDA_RUN_TIME for a sweep on CUDA alone, whose rows repeat
    closely (device rows within ~1 %, wall rows within a few %: results/PERFLOG.md) and whose
    every implementation must fit README's GPU sweep into 4 minutes; DEFAULT_RUN_TIME
    otherwise, where CPU rows must average over a shared host."""
    return CUDA_RUN_TIME if devices and set(devices) == {"cuda"} else DEFAULT_RUN_TIME


def _resolve_params(impl: Implementation, given: dict) -> tuple[dict, Optional[str]]:
    """(the parameters its rows record, the error that makes its cases fail, or None)."""
    taken = impl.accepted_params(given)
    try:
        return impl.resolve_params(taken), None
    except ValueError as exc:
        return taken, error_text(exc)


def _family_result(name: str, box_set: BoxSet, dtype_name: str, iou: float, params: dict):
    """The family reference ``name`` on the CPU on the case's boxes (float16: on the float32
    copy of the float16 values, as the CPU backends compute it, so the comparison measures
    the backend, not the rounding of its inputs), or None where it cannot run here."""
    from .registry import implementations

    impl = implementations().get(name)
    if impl is None or "cpu" not in impl.backends or not impl.backends["cpu"].availability()[0]:
        return None
    data = box_set.to("cpu", DTYPES[dtype_name])
    if dtype_name == "float16":
        data = data.to("cpu", torch.float32)
    try:
        return impl.backends["cpu"].fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels, **params)
    except Exception:  # a reference that cannot take these boxes leaves the columns blank
        return None


def _reference(data: BoxSet, iou: float) -> torch.Tensor:
    """Greedy NMS on the CPU on exactly the case's (cast) values: torchvision's, or from
    LARGE_REFERENCE_MIN_N boxes on, LARGE_REFERENCE's (the same indices)."""
    if data.boxes.dtype == torch.float16:  # torchvision's CPU kernel has no half; float32 holds them exactly
        data = data.to("cpu", torch.float32)
    name = REFERENCE
    if data.boxes.shape[0] >= LARGE_REFERENCE_MIN_N and get(LARGE_REFERENCE).backend("cpu").availability()[0]:
        name = LARGE_REFERENCE
    backend = get(name).backend("cpu")
    return backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels).keep


def _same_output(result, eager) -> bool:
    def same(a, b) -> bool:
        return b is None or (a is not None and torch.equal(a, b))

    return torch.equal(result.keep, eager.keep) and same(result.scores, eager.scores) and \
        same(getattr(result, "boxes", None), eager.boxes)


def run_sweep(grid: Grid, write: Callable[[dict], None], on_case: Callable[[dict], None] = lambda row: None,
              done: frozenset | set = frozenset(), between_turns: Callable[[], None] = lambda: None,
              gauge: Optional[HostGauge] = None) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again.
    ``between_turns()`` is called after each implementation's turn of a round, while
    nothing is timed (a progress display redraws there: a case's rows come only after all
    its rounds). ``gauge`` reads the host's speed (default: a new ``HostGauge``); the
    counts returned carry its summary under ``host``. ``grid.cluster``: on Dask workers (nmsbench.cluster)."""
    if grid.cluster:
        return cluster.run_sweep(grid, write, on_case, done, between_turns, gauge, (_sweep_pass, _case_rows, _resolve_params))
    emit, counts, gauge = start_run(grid, write, on_case, gauge)
    passes = timer_passes(grid)
    # each box set with its references, made once for every pass (the device pass reuses them);
    # a sweep of one pass keeps none: each set is dropped once its cases ran
    box_sets: Optional[dict] = {} if len(passes) > 1 else None
    for part in passes:
        _sweep_pass(part, emit, done, between_turns, gauge, box_sets)
    return finish_run(counts, gauge)


@dataclass
class _BoxSetState:
    """A generated box set and what was computed on it, kept across a sweep's passes."""

    box_set: BoxSet
    mean_max_iou: Optional[float] = None
    references: dict = field(default_factory=dict)  # (dtype, iou) -> the greedy reference's keep
    family_results: dict = field(default_factory=dict)  # (reference, dtype, iou, params) -> its result or None


def _sweep_pass(grid: Grid, emit: Callable[[dict], None], done, between_turns: Callable[[], None],
                gauge: HostGauge, box_sets: Optional[dict] = None) -> None:
    """Every case of ``grid`` (one pass of :func:`run_sweep`), its rows to ``emit``;
    ``box_sets`` (None: none kept) keeps each box set and its references for the later passes."""
    impls = [get(name) for name in grid.impls]
    params_by_impl = {impl.name: _resolve_params(impl, grid.params) for impl in impls}

    def pending(rows: list[dict]) -> list[dict]:
        return [row for row in rows if case_key(row) not in done]

    seen: dict = {}  # real scenario: (recording, knob, N) -> the n cap that ran that box set
    with SlowHostRetries(grid.slow_retries, emit) as later:  # a stopped pass writes the held rows as they are
        _cases_of_pass(grid, emit, pending, impls, params_by_impl, seen, box_sets, between_turns, gauge, later)


def _cases_of_pass(grid, emit, pending, impls, params_by_impl, seen, box_sets, between_turns, gauge, later) -> None:
    """The body of :func:`_sweep_pass`: each box set's cases, then ``later``'s re-timings."""
    for scenario, n in itertools.product(grid.scenarios, grid.ns):
        for overlap, recording, canvas in itertools.product(grid.overlaps_for(scenario), grid.recordings_for(scenario),
                                                            grid.canvases_for(scenario)):
            base = {"scenario": scenario, "canvas": canvas, "overlap": overlap, "n": n, "seed": grid.seed,
                    "classes": grid.classes}
            recorded = datasets.SCENARIOS[scenario].recordings is not None
            if recorded:  # rows name the recording
                base |= datasets.real.recording_columns(recording or datasets.real.DEFAULT_RECORDING) | {"n_cap": n}
            duplicate = None
            try:
                set_key = (scenario, n, overlap, recording, canvas)
                state = None if box_sets is None else box_sets.get(set_key)
                if state is None:
                    state = _BoxSetState(datasets.generate(scenario, n, overlap=overlap, seed=grid.seed, classes=grid.classes,
                                                           path=grid.file, recording=recording, canvas=canvas or None))
                    if box_sets is not None:
                        box_sets[set_key] = state
                box_set = state.box_set
                base |= box_set.meta.get("row", {})  # a recording's rows carry the N it gave (<= the cap n)
                if recorded:  # when fewer boxes pass than the cap allows, a larger cap gives the same set
                    duplicate = seen.setdefault((scenario, recording, overlap, len(box_set)), n)
                    duplicate = None if duplicate == n else duplicate
                cases = [(device, dtype_name, iou, impl,
                          pending(_case_rows(impl, device, dtype_name, iou, grid, base, params_by_impl[impl.name][0])))
                         for device, dtype_name, iou, impl in itertools.product(grid.devices, grid.dtypes, grid.ious, impls)]
                cases = [case for case in cases if case[-1]]
                if duplicate is None and cases:  # exact up to overlap.EXACT_MAX_N boxes, from a fixed sample above
                    if state.mean_max_iou is None:
                        state.mean_max_iou = realized_overlap(box_set.boxes, box_set.scores, box_set.labels)["mean_max_iou"]
                    for row in itertools.chain.from_iterable(case[-1] for case in cases):
                        row["mean_max_iou"] = state.mean_max_iou
            except Exception as exc:  # e.g. a file with fewer than n boxes: this set's cases become error rows
                message = f"generating {scenario}: {error_text(exc)}"
                for device, dtype_name, iou, impl in itertools.product(grid.devices, grid.dtypes, grid.ious, impls):
                    for row in pending(_case_rows(impl, device, dtype_name, iou, grid, base, params_by_impl[impl.name][0])):
                        emit(row | {"status": "error", "error": message})
                continue
            if duplicate is not None:  # recorded, not re-timed: the same N boxes ran under the smaller cap
                message = (f"same box set as n_cap={duplicate}: only {len(box_set)} candidates have score >= {overlap:g}")
                for *_, rows in cases:
                    for row in rows:
                        emit(row | {"status": "skipped", "error": message})
                continue
            reference, family_reference = _references(state)  # computed once per box set

            # the implementations of one device, dtype and IoU are timed together, in rounds
            for (device, dtype_name, iou), group in itertools.groupby(cases, key=lambda case: case[:3]):
                members = [(impl, rows) for *_, impl, rows in group]
                run = functools.partial(_run_group, device=device, dtype_name=dtype_name, iou=iou, grid=grid,
                                        box_set=box_set, reference=reference, params_by_impl=params_by_impl,
                                        between_turns=between_turns, gauge=gauge, family_reference=family_reference)
                for row in run(members):
                    if not later.hold(row, members, run):
                        emit(row)
    later.finish()


def _case_rows(impl: Implementation, device: str, dtype_name: str, iou: float, grid: Grid, base: dict, params: dict) -> list[dict]:
    """The identifying columns of the rows one case produces (one per timer)."""
    backend = impl.backends.get(device)
    common = base | {
        "benchmark": "nms", "impl": impl.name, "family": impl.family, "device": device, "dtype": dtype_name,
        "iou_threshold": iou, "params": json.dumps(params, sort_keys=True), "threads": grid.threads,
        "host_sync": backend.host_sync if backend else "", "graph_safe": backend.graph_safe if backend else "",
    }
    return [common | {"timer": t} for t in grid.timers_for(device)]


def _unrunnable(impl, device, dtype_name, rows, params_error, cap_slow: bool = False) -> Optional[Iterator[dict]]:
    """Skipped or error rows for a case that cannot run, or that a sweep of every
    implementation leaves out (``cap_slow``: above the backend's sweep_max_n); None when it runs."""
    backend = impl.backends.get(device)
    skip = None
    if backend is None:
        skip = f"{impl.name} has no {device} backend"
    else:
        available, reason = backend.availability()
        if not available:
            skip = reason
        elif DTYPES[dtype_name] not in backend.dtypes:
            skip = f"{dtype_name} not supported on {device}"
        elif cap_slow and backend.sweep_max_n is not None and rows and rows[0]["n"] > backend.sweep_max_n:
            skip = (f"{impl.name} on {device} is left out above N = {backend.sweep_max_n} when --impl does not name it "
                    "(its calls take seconds there)")
    if skip:
        return (row | {"status": "skipped", "error": skip} for row in rows)
    if params_error:
        return (row | {"status": "error", "error": params_error} for row in rows)
    return None


def _references(state: _BoxSetState) -> tuple[Callable, Callable]:
    """(reference, family_reference) of one box set, each computed once and kept in ``state``:
    ``reference(dtype, iou)`` the greedy reference's keep; ``family_reference(family, dtype,
    iou, params, known=None)`` the family reference's (name, result) on these boxes, or None
    (``known``: the reference's own warm-up result on the CPU, which it is, so it is not run
    again). Bound to ``state``, so a group timed again later gets its own box set's."""
    box_set, references, family_results = state.box_set, state.references, state.family_results

    def reference(dtype_name: str, iou: float) -> torch.Tensor:
        if (dtype_name, iou) not in references:
            references[dtype_name, iou] = _reference(box_set.to("cpu", DTYPES[dtype_name]), iou)
        return references[dtype_name, iou]

    def family_reference(family: str, dtype_name: str, iou: float, params: dict, known=None):
        name = FAMILY_REFERENCES.get(family)
        if name is None:
            return None
        key = (name, dtype_name, iou, json.dumps(params, sort_keys=True, default=str))
        if key not in family_results:
            family_results[key] = known if known is not None else _family_result(name, box_set, dtype_name, iou, params)
        return None if family_results[key] is None else (name, family_results[key])

    return reference, family_reference


def _run_group(members, device: str, dtype_name: str, iou: float, grid: Grid, box_set: BoxSet, reference,
               params_by_impl: dict, between_turns: Callable[[], None] = lambda: None,
               gauge: Optional[HostGauge] = None, family_reference: Optional[Callable] = None) -> Iterator[dict]:
    """The rows of every implementation of one box set, device, dtype and IoU: each
    prepared and checked, then all timed together in rotated rounds."""
    runnable = []
    for impl, rows in members:
        params, params_error = params_by_impl[impl.name]
        cannot = _unrunnable(impl, device, dtype_name, rows, params_error, grid.cap_slow)
        if cannot is not None:
            yield from cannot
            continue
        if not impl.backends[device].graph_safe:  # no padded, sync-free form to capture
            for row in rows:
                if TIMERS[row["timer"]].needs_graph_safe:
                    yield row | {"status": "skipped", "error": f"{impl.name} on {device} is not graph-safe"}
            rows = [row for row in rows if not TIMERS[row["timer"]].needs_graph_safe]
        if rows:
            runnable.append((impl, rows, params))
    if not runnable:
        return
    try:  # once for every implementation of the group
        data = box_set.to(device, DTYPES[dtype_name])
        validate_nms_inputs(data.boxes, data.scores, data.labels)  # outside the timed calls
        ref_keep = reference(dtype_name, iou)
    except Exception as exc:
        for _, rows, _ in runnable:
            yield from error_rows(rows, exc)
        return
    settings = Settings.of(grid)
    contenders, prepared = [], []
    for impl, rows, params in runnable:
        contender, checked = Contender(impl.name, cpu=device == "cpu"), {}
        try:
            prepare(contender, settings, lambda: checked.update(_prepare(
                impl, [row["timer"] for row in rows], contender.calls, data, iou, params, ref_keep, family_reference,
                dtype_name)))
        except Exception as exc:
            yield from error_rows(rows, exc)
            continue
        contenders.append(contender)
        prepared.append((rows, checked))
    outcomes = time_in_rounds(contenders, settings, gauge or HostGauge(), between_turns)
    n = len(box_set)
    for (rows, checked), outcome in zip(prepared, outcomes):
        if outcome.error is not None:
            yield from error_rows(rows, outcome.error)
            continue
        agreement = checked["agreement"] | {"greedy_suppressed_frac": 1 - checked["agreement"]["ref_kept"] / n if n else 0.0}
        for row in rows:
            if row["timer"] in outcome.skipped:
                yield row | {"status": "skipped", "error": outcome.skipped[row["timer"]]}
                continue
            yield row | agreement | {"status": "ok", "error": "", "peak_mem_bytes": checked["peak"]} | \
                outcome.measured[row["timer"]].columns()


# what a timer's built call is checked against, in an error's words
_DIFFERS = {"api": "nmsbench.run_nms's output differs from the backend call's",
            "graph": "the CUDA graph replay's output differs from the eager call's"}


def _prepare(impl: Implementation, timers: list[str], calls: dict, data: BoxSet, iou: float, params: dict, ref_keep,
             family_reference: Optional[Callable] = None, dtype_name: str = "") -> dict:
    """The warm-up call (its output is checked against the references: greedy NMS, and the
    family's exact CPU implementation where it has one), its peak memory, and each timer's
    call in ``calls`` (built by the timer from what the sweep offers, each checked to give
    the warm-up's output). Returns the agreement columns and the peak memory."""
    backend = impl.backends[data.boxes.device.type]
    device = data.boxes.device
    boxes, scores, labels = data.boxes, data.scores, data.labels

    def op():
        return backend.fn(boxes, scores, iou_threshold=iou, labels=labels, **params)

    peak = ""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    result = op()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated(device) - before
    agreement = compare_keep(result.keep.cpu(), ref_keep) | NO_FAMILY_REFERENCE
    # the reference itself on the CPU, on the values it would be given (float16 takes a float32 copy)
    itself = impl.name == FAMILY_REFERENCES.get(impl.family) and device.type == "cpu" and dtype_name != "float16"
    found = (family_reference(impl.family, dtype_name, iou, params, known=result if itself else None)
             if family_reference is not None else None)
    if found is not None:
        agreement |= compare_family(result, found[1], found[0])

    def check(timer: str, output) -> None:
        output = output.trimmed() if hasattr(output, "trimmed") else output  # a padded call's result
        if not _same_output(output, result):
            raise RuntimeError(_DIFFERS.get(timer, f"the {timer} timer's call's output differs from the backend call's"))

    run_nms, name = api.run_nms, impl.name
    offered = Callables(
        op, public=lambda: run_nms(name, boxes, scores, iou_threshold=iou, labels=labels, **params),
        capture=lambda: backend.fn(boxes, scores, iou_threshold=iou, labels=labels, padded=True, **params), check=check)
    for timer in timers:
        calls[timer] = TIMERS[timer].build(offered)
    return {"agreement": agreement, "peak": peak}


def check_inputs(grid: Grid) -> Grid:
    """What a sweep checks before it starts, beyond the grid's own checks: the boxes file
    holds enough boxes, the largest box set fits in memory, the recordings exist (``all``
    spelled out), and every parameter given is taken, and valid, for some implementation."""
    if "file" in grid.scenarios:
        try:
            recorded = len(datasets.load_boxes_file(grid.file, rows=max(grid.ns)))  # a CSV: its first rows only
        except ValueError as e:
            raise GridError("file", str(e)) from None
        if max(grid.ns) > recorded:
            raise GridError("ns", f"{grid.file} holds {recorded} boxes; --n asks for up to {max(grid.ns)}")
    if any(s in datasets.SYNTHETIC for s in grid.scenarios):
        try:
            datasets.check_fits(max(grid.ns))
        except ValueError as e:
            raise GridError("ns", str(e)) from None
    if grid.recordings:
        try:
            known = datasets.real.recording_keys()
        except ValueError as e:
            raise GridError("recordings", str(e)) from None
        chosen = known if "all" in grid.recordings else grid.recordings
        bad = [r for r in chosen if r not in known]
        if bad:
            raise GridError("recordings", f"unknown {', '.join(bad)}; known: {', '.join(known)}")
        grid = dataclasses.replace(grid, recordings=list(chosen))
    known_impls = implementations()
    for name in grid.impls:  # check values now, not once per case
        try:
            known_impls[name].resolve_params(known_impls[name].accepted_params(grid.params))
        except ValueError as e:
            raise GridError("params", str(e)) from None
    unused = set(grid.params) - {p.name for name in grid.impls for p in known_impls[name].params}
    if unused:
        raise GridError("params", f"no selected implementation takes {', '.join(sorted(unused))}")
    if grid.cluster:
        cluster.check_grid(grid)
    return grid


def case_label(row: dict) -> str:
    """The whole case of a sweep row, for warnings: impl, device, dtype, timer, scenario,
    recording, overlap, n (and its cap), IoU, classes, and the parameters when given."""
    parts = [str(row[k]) for k in ("impl", "device", "dtype", "timer", "scenario")]
    if row.get("image"):
        parts.append(f"{row['image']}@{row.get('input_size', '')}")
    cap = row.get("n_cap")
    parts += [f"overlap={float(row['overlap']):g}",
              f"n={row['n']}" + (f" (cap {cap})" if cap not in (None, "") and str(cap) != str(row["n"]) else ""),
              f"iou={float(row['iou_threshold']):g}"]
    if int(row.get("classes") or 1) > 1:
        parts.append(f"classes={row['classes']}")
    if row.get("params") not in (None, "", "{}"):
        parts.append(f"params={row['params']}")
    return " ".join(parts)


SWEEP_HELP = """Time implementations over the grid impl x device x dtype x scenario x overlap x n x IoU.

    \b
    nmsbench sweep --n 64..8192 --device cuda
    nmsbench sweep --n 100,1000 --impl torchvision,allpairs --scenario chain --iou 0.5,0.7
    nmsbench sweep --scenario clustered --overlap 0.3,0.6,0.9 --classes 3
    nmsbench sweep --scenario file --file boxes.npz --n 500 --param score_threshold=0.1
    nmsbench sweep --scenario real --overlap 0.25,0.01,0.001 --n 8192 --recording all

    Every case becomes one CSV row per timer (and its raw samples a line of the .samples.jsonl
    beside it). The implementations of one box set, device, dtype and IoU are timed together
    (--rounds). A variant that raises, runs out of memory or passes --case-timeout gives a row
    with status=error; a cell it cannot run a status=skipped row. Ctrl-C (or SIGTERM) stops
    with what was written and the command that resumes it.
    """

register_benchmark(Benchmark(
    name="nms", command="sweep", grid=Grid, axes=AXES, run=run_sweep, total=Grid.count, help=SWEEP_HELP,
    prepare=check_inputs, label=case_label,
    describe=lambda row: f"{row['scenario']:>10} n={row['n']:<6} {row['impl']:<18} {row['device']}"))
