"""Where NMS implementations disagree, and why: the conformance report.

    >>> report = run(["cpu"])                     # every implementation here x every case family
    >>> [c for c in report.cells if c.verdict == "differs"][0].rules   # e.g. ("normalise",)
    >>> report.unexplained                        # differences no named rule explains (the CLI exits 1)

Each implementation on each device (:mod:`nmsbench.conformance_subjects`) runs the cases of
each case family (:mod:`nmsbench.conformance_cases`) and is held to its own family's exact
definition (:mod:`nmsbench.conformance_oracle`); hard-family ones also to torchvision's
``nms`` on the same device and dtype. A cell is ``agrees``, ``differs`` (with the smallest
differing example the shrinker finds and the named rules that explain every difference
found: :mod:`nmsbench.conformance_rules`), ``unexplained`` (a difference no rule explains),
``refuses`` (every case raised; the message) or ``n/a`` (the family needs a setting the
implementation does not take, such as a score threshold or a per-class cap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from . import conformance_cases
from .conformance_oracle import Case, Output, Refusal, definition, same_output
from .conformance_rules import explain
from .conformance_subjects import Subject, describe_refusal, subjects as find_subjects

DEFAULT_EXAMPLES = 12               # cases per case family
SHRUNK_PER_CELL = 3                 # differing cases of a cell shrunk (the smallest is the cell's example)
RAW_EXAMPLES = 12                   # unshrunk differing cases (of at most RAW_MAX_BOXES) every rule set must explain too
RAW_MAX_BOXES = 64
SHRINK_CALLS = 400                  # implementation calls one shrink makes at most
SHRINK_SECONDS = 20.0
LARGE_SHRINK_SECONDS = 8.0         # large-N differences: rounding ones rarely shrink far
LARGE_N = {"cpu": (256, 1024, 2048, 4096), "cuda": (1024, 2048, 8192, 65536, 262144)}
LARGE_CALL_SECONDS = {"cpu": 2.0, "cuda": 10.0}   # the ladder stops before a call would take longer
REFERENCE_SECONDS = {"cpu": 10.0, "cuda": 60.0}   # ... or before the exact reference would
ORACLE_MAX_N = 1024                 # the numpy oracle up to here; the exact registered references beyond
MATRIX_ORACLE_MAX_N = 2048          # Matrix NMS has no exact registered reference: its oracle's O(N^2) memory ends here
REFERENCES = {"hard": "hard_graph", "allpairs": "allpairs", "soft": "soft_nms", "diou": "diou_nms",
              "weighted": "weighted_nms"}
VERDICTS = ("agrees", "differs", "unexplained", "refuses", "n/a")


@dataclass
class Cell:
    """One implementation on one device against one case family."""

    impl: str
    device: str
    family: str
    case_family: str
    verdict: str = "agrees"
    rules: tuple = ()
    cases: int = 0
    differing: int = 0
    refused: int = 0
    max_n: Optional[int] = None
    vs_torchvision: str = ""
    message: str = ""
    example: Optional[dict] = None
    seconds: float = 0.0


@dataclass
class Report:
    cells: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)     # "name @ device" -> why it did not run
    devices: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def unexplained(self) -> list:
        return [c for c in self.cells if c.verdict == "unexplained"]


def differs(got, want, dtype: str) -> bool:
    """An answer that is not the definition's (a refusal is not a difference)."""
    if isinstance(got, Refusal):
        return False
    if isinstance(want, Refusal):
        return True
    return not same_output(got, want, dtype)


def _call(subject: Subject, case: Case):
    try:
        return subject.run(case)
    except Exception as exc:  # an implementation that raises refuses the case
        return Refusal(describe_refusal(exc))


class Oracle:
    """The definition's output per (case, family), computed once: the numpy oracle for small
    cases, the exact registered CPU implementation of the family for large ones."""

    def __init__(self):
        self._memo: dict = {}

    def __call__(self, family: str, case: Case):
        key = (id(case), family)
        if key not in self._memo:
            self._memo[key] = (case, self._compute(family, case))
        return self._memo[key][1]

    @staticmethod
    def _compute(family: str, case: Case):
        if case.n <= ORACLE_MAX_N or (family == "matrix" and case.n <= MATRIX_ORACLE_MAX_N):
            return definition(family, case)
        name = REFERENCES.get(family)
        if name is None:
            return None
        from .conformance_subjects import registry_subject

        # float16 is computed in float32 (the definition's arithmetic): the CPU references take its float32 copy
        return _call(registry_subject(name, "cpu"), case.cast("float32") if case.dtype == "float16" else case)


def shrink(case: Case, still_differs: Callable[[Case], bool], max_calls: int = SHRINK_CALLS,
           seconds: float = SHRINK_SECONDS) -> Case:
    """The smallest subset of ``case``'s boxes that still differs, by greedy delta debugging:
    drop halves, then quarters, ... then single boxes, keeping every removal that still differs."""
    index = list(range(case.n))
    calls, start = 0, time.perf_counter()
    chunk = max(1, len(index) // 2)
    while index:
        removed = False
        at = 0
        while at < len(index):
            if calls >= max_calls or time.perf_counter() - start > seconds:
                return case.subset(index)
            trial = index[:at] + index[at + chunk:]
            calls += 1
            if trial and still_differs(case.subset(trial)):
                index, removed = trial, True
            else:
                at += chunk
        if chunk == 1 and not removed:
            break
        if not removed:
            chunk = max(1, chunk // 2)
    return case.subset(index)


def _as_json(out) -> object:
    if isinstance(out, Refusal):
        return {"refused": out.message}
    if out is None:
        return None
    return {"keep": list(out.keep), "scores": None if out.scores is None else list(out.scores),
            "boxes": None if out.boxes is None else [list(b) for b in out.boxes]}


def example_of(case: Case, got, want) -> dict:
    """A differing example as plain data: the case (and its corners), what the implementation
    returned and what the definition returns."""
    data = case.to_json()
    data["corners"] = case.corners().astype(float).tolist()
    data["observed"], data["expected"] = _as_json(got), _as_json(want)
    return data


class Runner:
    """Runs cells, sharing the oracle's results, the casts and torchvision's outputs."""

    def __init__(self, reference_subjects: dict):
        self.oracle = Oracle()
        self.references = reference_subjects  # device -> the torchvision subject there
        self._casts: dict = {}
        self._tv: dict = {}
        self._large: dict = {}       # (n, seed) -> the clustered scene
        self._reference: dict = {}   # (family, n) -> seconds the exact reference took

    def cast(self, case: Case, dtype: Optional[str]) -> Case:
        if not dtype or dtype == case.dtype:
            return case
        key = (id(case), dtype)
        if key not in self._casts:
            self._casts[key] = (case, case.cast(dtype))
        return self._casts[key][1]

    def torchvision(self, case: Case, device: str):
        subject = self.references.get(device)
        if subject is None:
            return None
        key = (id(case), device)
        if key not in self._tv:
            self._tv[key] = (case, _call(subject, case))
        return self._tv[key][1]

    def finish(self, cell: Cell, subject: Subject, found: list, tv_differ: int, tv_cases: int,
               agreeing: list = ()) -> Cell:
        """The verdict, the rules and the example from the differing (case, got, want) found."""
        if subject.family == "hard" and tv_cases:
            cell.vs_torchvision = "agrees" if not tv_differ else f"differs in {tv_differ} of {tv_cases}"
        if not found:
            if cell.cases and cell.refused == cell.cases:
                cell.verdict = "refuses"
            elif cell.refused:
                cell.message = f"refused {cell.refused} of {cell.cases}: {cell.message}"
            return cell
        cell.differing = len(found)

        def still_differs(small: Case) -> bool:
            return differs(_call(subject, small), self.oracle(subject.family, small), small.dtype)

        shrunk = []
        for case, got, want in sorted(found, key=lambda f: f[0].n)[:SHRUNK_PER_CELL]:
            small = shrink(case, still_differs, seconds=SHRINK_SECONDS if case.n <= RAW_MAX_BOXES else LARGE_SHRINK_SECONDS)
            small_got, small_want = _call(subject, small), self.oracle(subject.family, small)
            if differs(small_got, small_want, small.dtype):
                shrunk.append((small, small_got, small_want))
            else:  # not reproducible on a second call: keep the original
                shrunk.append((case, got, want))
        raw = [(case, got) for case, got, _ in found if case.n <= RAW_MAX_BOXES][:RAW_EXAMPLES]
        rules = explain(subject.family, [(case, got) for case, got, _ in shrunk] + raw, agreeing)
        smallest = min(shrunk, key=lambda f: f[0].n)
        cell.example = example_of(*smallest)
        if rules is None:
            cell.verdict = "unexplained"
        else:
            cell.verdict, cell.rules = "differs", tuple(rules)
        cell.message = f"{len(found)} of {cell.cases} cases differ" + (f"; refused {cell.refused}" if cell.refused else "")
        return cell

    def run_cell(self, subject: Subject, key: str, cases: list) -> Cell:
        family = conformance_cases.CASE_FAMILIES[key]
        cell = Cell(subject.name, subject.device, subject.family, key)
        missing = [need for need in family.needs if need not in subject.takes]
        if missing:
            cell.verdict, cell.message = "n/a", f"takes no {', '.join(m.replace('_', ' ') for m in missing)}"
            return cell
        start = time.perf_counter()
        found, agreeing, tv_differ, tv_cases = [], [], 0, 0
        for original in cases:
            case = self.cast(original, subject.dtype)
            cell.cases += 1
            got = _call(subject, case)
            want = self.oracle(subject.family, case)
            if isinstance(got, Refusal):
                cell.refused += 1
                cell.message = cell.message or got.message
                continue
            if differs(got, want, case.dtype):
                found.append((case, got, want))
            elif case.n <= RAW_MAX_BOXES and not isinstance(want, Refusal):
                agreeing.append((case, got))
            if subject.family == "hard" and not isinstance(want, Refusal) and _torchvision_takes(case):
                tv = self.torchvision(case, subject.device)
                if isinstance(tv, Output):
                    tv_cases += 1
                    tv_differ += tv.keep != got.keep
        self.finish(cell, subject, found, tv_differ, tv_cases, agreeing)
        cell.seconds = time.perf_counter() - start
        return cell

    def large_case(self, n: int, seed: int) -> Case:
        """The clustered scene of N boxes (float32), made once per run."""
        if (n, seed) not in self._large:
            from . import datasets

            box_set = datasets.generate("clustered", n, seed=seed)
            self._large[n, seed] = Case(box_set.boxes.numpy().astype(np.float32), box_set.scores.numpy().astype(np.float32),
                                        None, 0.5, note=f"clustered scene, N = {n}")
        return self._large[n, seed]

    def reference(self, family: str, case: Case):
        """The oracle's answer, and the seconds it took (once per case and family)."""
        key = (family, case.n, case.dtype)
        began = time.perf_counter()
        want = self.oracle(family, case)
        self._reference.setdefault(key, time.perf_counter() - began)
        return want, self._reference[key]

    def run_large(self, subject: Subject, sizes, seed: int = 0, call_seconds: float = 2.0,
                  reference_seconds: float = 10.0) -> Cell:
        """The large-N ladder: clustered scenes of growing N, each against the exact reference,
        up to the largest N the implementation accepts (or the ladder's end, or the time budget)."""
        cell = Cell(subject.name, subject.device, subject.family, "large_n")
        start = time.perf_counter()
        found, tv_differ, tv_cases, stops = [], 0, 0, []
        for n in sizes:
            if subject.max_n is not None and n > subject.max_n:
                stops.append(f"stopped before N = {n}: its sweeps stop at {subject.max_n}")
                break
            case = self.cast(self.large_case(n, seed), subject.dtype)
            want, ref_took = self.reference(subject.family, case)
            if want is None:
                stops.append(f"no exact reference beyond N = {cell.max_n}")
                break
            began = time.perf_counter()
            got = _call(subject, case)
            took = time.perf_counter() - began
            following = [m for m in sizes if m > n]
            if following and took * (following[0] / n) ** 2 > call_seconds and not isinstance(got, Refusal):
                began = time.perf_counter()  # the first call may have compiled a kernel: time a second one
                _call(subject, case)
                took = min(took, time.perf_counter() - began)
            cell.cases += 1
            if isinstance(got, Refusal):
                cell.refused += 1
                cell.message = cell.message or got.message
                stops.append(f"refused at N = {n}")
                break
            cell.max_n = n
            if differs(got, want, case.dtype):
                found.append((case, got, want))
            if subject.family == "hard":
                tv = self.torchvision(case, subject.device)
                if isinstance(tv, Output):
                    tv_cases += 1
                    tv_differ += tv.keep != got.keep
            if following and took * (following[0] / n) ** 2 > call_seconds:
                stops.append(f"stopped before N = {following[0]}: one call at N = {n} took {took:.2f} s")
                break
            if following and ref_took * (following[0] / n) ** 2 > reference_seconds:
                stops.append(f"stopped before N = {following[0]}: the exact reference took {ref_took:.2f} s at N = {n}")
                break
        self.finish(cell, subject, found, tv_differ, tv_cases)
        cell.message = "; ".join(part for part in [cell.message, *stops] if part)
        cell.seconds = time.perf_counter() - start
        return cell


def _torchvision_takes(case: Case) -> bool:
    """Whether torchvision's nms answers the same question (no score threshold, no cap)."""
    return case.score_threshold is None and case.max_per_class is None


def run(devices, impls=None, case_families=None, examples: int = DEFAULT_EXAMPLES, seed: int = 0,
        max_n: Optional[int] = None, progress: Optional[Callable[[str], None]] = None) -> Report:
    """Every subject that runs here on ``devices`` (or those named in ``impls``) against every
    case family (or those in ``case_families``), ``examples`` cases each; the large-N ladder
    up to ``max_n`` (default: :data:`LARGE_N` of the device)."""
    start = time.perf_counter()
    keys = list(case_families or conformance_cases.CASE_FAMILIES)
    unknown = [k for k in keys if k not in conformance_cases.CASE_FAMILIES]
    if unknown:
        raise ValueError(f"unknown case famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                         f"known: {', '.join(conformance_cases.CASE_FAMILIES)}")
    found, skipped = find_subjects(devices, impls)
    references = {}
    for device in devices:
        tv, _ = find_subjects([device], ["torchvision"])
        references.update({s.device: s for s in tv})
    runner = Runner(references)
    cases = {k: conformance_cases.generate(k, examples, seed) for k in keys if k != "large_n"}
    report = Report(skipped=skipped, devices=list(devices))
    for subject in found:
        if progress:
            progress(subject.label)
        for key in keys:
            if key == "large_n":
                sizes = [n for n in LARGE_N[subject.device] if max_n is None or n <= max_n]
                if max_n is not None and max_n not in sizes and max_n > (sizes[-1] if sizes else 0):
                    sizes.append(max_n)
                report.cells.append(runner.run_large(subject, sizes, seed, LARGE_CALL_SECONDS[subject.device],
                                                     REFERENCE_SECONDS[subject.device]))
            else:
                report.cells.append(runner.run_cell(subject, key, cases[key]))
    report.seconds = time.perf_counter() - start
    return report
