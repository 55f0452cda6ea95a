"""Runs past one machine on Dask distributed (``--cluster local:K | ADDRESS``).

The unit of work is a case group: one box set on one device with all its contenders (the
sweep), so their rotated rounds still share one host and one GPU. A task runs the group on
a worker and returns its rows; the driver writes them as they arrive through the usual
writer (its lock, resume), dropping a row whose case is already written. Rows carry the
worker's machine, CPU, GPU and versions (the environment columns); the sidecar's
``cluster`` note names every worker that gave rows (address, host, GPU and its index).

A task that times holds a lock of its worker process while it runs, so two never time
side by side on one worker; a CUDA task asks for the worker resource ``GPU=1`` where the
workers declare it (``local:K`` gives it to one worker per visible GPU, each seeing only
its own). A worker that dies mid-task has its task run again elsewhere by the scheduler;
one that fails past the scheduler's allowed failures becomes the group's error rows.
Dask is imported only when a run asks for a cluster (the ``cluster`` extra).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

INSTALL = 'pip install -e ".[cluster]"'
LOCAL = re.compile(r"local:(\d+)")
# a scheduler address: scheme://host:port (tcp, tls, ucx...) or host:port (tcp)
ADDRESS = re.compile(r"(?:[a-z][a-z0-9+]*://)?(?:\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{1,5}/?")
CONNECT_TIMEOUT = 20  # seconds the driver waits for an existing scheduler
WAIT_STEP = 0.5  # seconds between redraws of the progress display while rows are awaited
# the environment columns a row takes from the worker that timed it (timestamp and commit stay the driver's)
WORKER_COLUMNS = ("machine", "cpu", "gpu", "driver", "cuda", "torch", "torchvision", "cupy", "numba", "python", "nmsbench")

# test-only: a file path; the first task that creates it kills its own worker process (tests/test_cluster.py)
KILL_ONCE: Optional[str] = None


def cluster_axis(help: str):
    """The ``--cluster`` option (a local cluster ``local:K`` or a scheduler's address) of the
    benchmarks that can run on Dask workers; ``help`` says what a worker runs."""
    from .engine.axes import Axis

    return Axis("cluster", "--cluster", lambda text: [text.strip()], None, many=False, check=spec_problem,
                metavar="local:K|ADDRESS", help=f"{help} Needs the cluster extra; see docs/cluster.md.")


class ClusterError(ValueError):
    """A cluster that cannot be used: dask missing, a bad address, a scheduler out of reach."""


def dask_problem() -> str:
    """Why dask.distributed cannot be used here ("" when it can)."""
    try:
        import distributed  # noqa: F401
    except ImportError as e:
        return f"--cluster needs dask.distributed, which is not installed ({e}); install the cluster extra: {INSTALL}"
    return ""


def spec_problem(spec) -> str:
    """What is wrong with a ``--cluster`` value ("" when nothing): ``local:K`` (K >= 1) or a
    scheduler address, and dask installed."""
    if not isinstance(spec, str) or not spec.strip():
        return f"--cluster takes local:K or a scheduler address like tcp://host:8786, got {spec!r}"
    local = LOCAL.fullmatch(spec)
    if local and int(local[1]) < 1:
        return f"local:K needs K >= 1 workers, got {spec!r}"
    if not local and not ADDRESS.fullmatch(spec):
        return (f"{spec!r} is neither local:K (a cluster of K worker processes on this machine) nor a scheduler address "
                "like tcp://host:8786")
    return dask_problem()


def check_grid(grid, reach: bool = True) -> None:
    """A GridError where a grid cannot run on its cluster: the spec, --case-timeout (its
    SIGALRM works in a process's main thread; a worker runs tasks in threads), and (``reach``)
    a scheduler that cannot be reached."""
    from .engine.axes import GridError

    problem = spec_problem(grid.cluster)
    if problem:
        raise GridError("cluster", problem)
    if getattr(grid, "case_timeout", None):
        raise GridError("case_timeout", "--case-timeout stops a case with SIGALRM, which only a process's main thread "
                                        "receives; Dask workers run tasks in threads: leave --case-timeout out with --cluster")
    if not reach:
        return
    try:  # reached (or started) now, before the results file is opened; kept for the run
        connect(grid.cluster, getattr(grid, "devices", ()))
    except ClusterError as e:
        raise GridError("cluster", str(e)) from None


# --- the cluster: started (local:K) or reached (an address), one client per spec in this process

_CLIENTS: dict[str, tuple] = {}  # spec -> (client, the local cluster or None)
CONNECTED_S: dict[str, float] = {}  # spec -> seconds its connection (and a local cluster's start) took


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as CUDA_VISIBLE_DEVICES entries."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def local_cluster(workers: int, gpus: list[str]):
    """``workers`` worker processes on this machine, one thread each; the first
    ``len(gpus)`` get resource ``GPU=1`` and see only their GPU."""
    from distributed import Nanny, Scheduler, SpecCluster

    spec = {}
    for i in range(workers):
        options = {"nthreads": 1, "host": "127.0.0.1", "memory_limit": 0, "resources": {}, "env": {},
                   "silence_logs": 40}  # the workers' start and stop are no news to a run
        if i < len(gpus):
            options |= {"resources": {"GPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": gpus[i]}}
        spec[f"nmsbench-{i}"] = {"cls": Nanny, "options": options}
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard": False, "dashboard_address": None}}
    return SpecCluster(workers=spec, scheduler=scheduler, silence_logs=40, name="nmsbench")


def connect(spec: str, devices=("cpu",)):
    """The client of cluster ``spec`` (started for ``local:K``, GPUs given out where
    ``devices`` has cuda); kept for this process until :func:`release`. ClusterError when
    dask is missing or the scheduler cannot be reached."""
    if spec in _CLIENTS:
        return _CLIENTS[spec][0]
    problem = spec_problem(spec)
    if problem:
        raise ClusterError(problem)
    from distributed import Client

    local = LOCAL.fullmatch(spec)
    cluster = None
    started = time.perf_counter()
    try:
        if local:
            cluster = local_cluster(int(local[1]), visible_gpus() if "cuda" in devices else [])
            client = Client(cluster, set_as_default=False)
            client.wait_for_workers(int(local[1]))
        else:
            client = Client(spec, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        if cluster is not None:
            cluster.close()
        raise ClusterError(f"cannot reach the Dask scheduler at {spec}: {' '.join(str(e).split()) or type(e).__name__}") from None
    _CLIENTS[spec] = (client, cluster)
    CONNECTED_S[spec] = time.perf_counter() - started
    return client


def release(spec: str) -> None:
    """Close the client of ``spec`` (and the cluster, for ``local:K``)."""
    client, cluster = _CLIENTS.pop(spec, (None, None))
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()


def worker_resources(client) -> dict:
    """Every worker's declared resources, by address."""
    return {address: dict(info.get("resources") or {}) for address, info in client.scheduler_info(n_workers=-1)["workers"].items()}


def gpu_resources(client, devices) -> Optional[dict]:
    """What a CUDA task asks of its worker: ``GPU=1`` where some worker declares GPUs; None
    where none does (one worker per GPU, as dask-cuda starts them). ClusterError where the
    grid has CUDA rows and the workers declare resources without GPU."""
    if "cuda" not in devices:
        return None
    declared = worker_resources(client)
    if any("GPU" in r for r in declared.values()):
        return {"GPU": 1}
    return None


def warm_workers(client, spec: str, preload=None, warm: Optional[Callable[[], None]] = None) -> dict:
    """Every worker's fixed start-up cost paid before the first case (the imports of the
    benchmarks, the implementations' registry and the host gauge), so that the cases'
    tasks carry only their own; ``preload``: what the tasks will call (sent by reference: a
    worker imports its modules on receiving it); ``warm()``: a benchmark's own first calls,
    run on every worker after that. The start-up's seconds: ``connect_s`` (the cluster's
    start or its scheduler reached) and ``warm_s``."""
    started = time.perf_counter()
    client.run(_warm, preload, warm)
    return {"connect_s": round(CONNECTED_S.get(spec, 0.0), 2), "warm_s": round(time.perf_counter() - started, 2)}


# a worker's periodic callbacks that take its interpreter's lock every few ms (the statistical
# profiler, the event loop's tick probes, the system monitor): stopped, so that they do not
# interrupt a task's timing (the scheduler's heartbeats go on)
QUIET_CALLBACKS = ("profile", "profile-cycle", "tick", "ticks", "monitor")


def _warm(preload=None, warm: Optional[Callable[[], None]] = None, dask_worker=None) -> None:
    from .registry import implementations

    implementations()
    gauge()
    try:  # every sweep group's first call: its numba kernels loaded (the driver's command did so before its clock)
        from . import datasets
        from .overlap import realized_overlap

        tiny = datasets.generate("uniform", 16, seed=0)
        realized_overlap(tiny.boxes, tiny.scores, tiny.labels)
    except Exception:
        pass  # a warm-up only: the tasks meet any real problem themselves
    if dask_worker is not None:
        identity(dask_worker)  # the environment's versions: imports (cupy, numba...) the driver made before its clock
    if warm is not None:
        warm()  # the benchmark's own first calls
    for name in QUIET_CALLBACKS:
        callback = getattr(dask_worker, "periodic_callbacks", {}).get(name)
        if callback is not None:
            callback.stop()


# --- the worker side

_TIMING = threading.Lock()  # one timing task at a time per worker process
_IDENTITY: dict = {}
_GAUGE: list = []


def identity(worker=None) -> dict:
    """This worker process's row columns (WORKER_COLUMNS) and its description for the sidecar
    (``worker``: its dask Worker, else the one running this task)."""
    if not _IDENTITY:
        from .results import environment

        env = environment()
        try:
            if worker is None:
                from distributed import get_worker

                worker = get_worker()
            address, name = worker.address, str(worker.name)
        except (ImportError, ValueError, AttributeError):
            address, name = "", ""
        _IDENTITY["columns"] = {k: env.get(k, "") for k in WORKER_COLUMNS}
        _IDENTITY["worker"] = {"address": address, "name": name, "machine": env["machine"], "gpu": env["gpu"],
                               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "pid": os.getpid()}
    return _IDENTITY


def gauge():
    """This worker's host gauge (made once: it reads the host's usual speed)."""
    if not _GAUGE:
        from .timing import HostGauge

        _GAUGE.append(HostGauge())
    return _GAUGE[0]


def maybe_die(kill_once: Optional[str]) -> None:
    """Test-only: the first task to create ``kill_once`` kills its worker process."""
    if not kill_once:
        return
    try:
        os.close(os.open(kill_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


_BOX_SETS: dict = {}  # the box sets (and references) of the run ``token`` on this worker, for its later passes


def sweep_group(sub, done, kill_once: Optional[str], sweep_pass: Callable, token: Optional[str] = None):
    """A worker's task: every case of ``sub`` (a sweep grid of one box set, or one recording's
    caps, on one device) not in ``done`` through ``sweep_pass`` (the runner's); (rows with
    this worker's columns, the worker, the task's seconds). ``token``: the run's, when it
    has later passes that can reuse this group's box set (None: none is kept)."""
    from .engine.rounds import use_threads

    with _TIMING:
        started = time.perf_counter()
        maybe_die(kill_once)
        use_threads(sub.threads)
        box_sets = None
        if token is not None:
            if _BOX_SETS.get("token") != token:
                _BOX_SETS.clear()
                _BOX_SETS.update(token=token, sets={})
            box_sets = _BOX_SETS["sets"]
        rows: list[dict] = []
        sweep_pass(sub, rows.append, done, lambda: None, gauge(), box_sets)
        spent = time.perf_counter() - started
    me = identity()
    return [row | me["columns"] for row in rows], me["worker"], spent


# --- the driver side

@dataclass
class Job:
    """One task: ``fn(*args)`` on a worker with ``resources``; ``what`` identifies it to the driver."""

    fn: Callable
    args: tuple
    resources: Optional[dict] = None
    what: object = None
    priority: int = 0  # higher runs first among the tasks waiting (dask's priority)


def stream(client, jobs: list[Job], between: Callable[[], None] = lambda: None) -> Iterator[tuple[Job, object]]:
    """Submit ``jobs`` and yield (job, its result or the exception it ended with) as each
    finishes; ``between()`` runs every WAIT_STEP seconds while none does. Jobs the caller
    appends to ``jobs`` meanwhile are submitted too. Futures left when the caller stops
    (Ctrl-C) are cancelled."""
    from distributed import wait

    futures: dict = {}
    pending: set = set()
    try:
        while pending or len(futures) < len(jobs):
            for k in range(len(futures), len(jobs)):
                job = jobs[k]
                future = client.submit(job.fn, *job.args, resources=job.resources, pure=False, priority=job.priority)
                futures[future] = (k, job)
                pending.add(future)
            try:
                with client.as_current():
                    finished, pending = wait(pending, timeout=WAIT_STEP, return_when="FIRST_COMPLETED")
            except TimeoutError:
                between()
                continue
            for future in sorted(finished, key=lambda f: futures[f][0]):
                try:
                    result = future.result()
                except Exception as exc:  # KilledWorker past the allowed failures, or the task's own error
                    result = exc
                future.release()
                yield futures[future][1], result
            between()
    finally:
        if pending:
            client.cancel(list(pending))


class Deduplicated:
    """The driver's writer of a cluster run: each case once (``done``: already in the file)."""

    def __init__(self, emit: Callable[[dict], None], done):
        from .results import case_key

        self.emit, self.key, self.written, self.workers = emit, case_key, set(done), {}
        self.task_s = 0.0  # seconds the workers spent inside the tasks (those that report it)

    def rows(self, rows, worker: Optional[dict] = None, spent: float = 0.0) -> None:
        self.task_s += spent
        if worker:
            self.workers[worker.get("address") or worker.get("machine")] = worker
        for row in rows:
            key = self.key(row)
            if key not in self.written:
                self.written.add(key)
                self.emit(row)

    def note(self, spec: str) -> dict:
        """The sidecar's ``cluster`` note."""
        note = {"spec": spec, "workers": sorted(self.workers.values(), key=lambda w: (w["machine"], w["address"]))}
        return note | ({"task_s": round(self.task_s, 2)} if self.task_s else {})


def done_for(done, **columns) -> frozenset:
    """The keys of ``done`` whose ``columns`` (key columns) have these values: what one
    group's task needs of a resumed file's written cases (the rest need not travel)."""
    from .keys import KEY_COLUMNS, key_value

    wanted = [(KEY_COLUMNS.index(column), key_value(value)) for column, value in columns.items()]
    return frozenset(key for key in done if all(key[i] == value for i, value in wanted))


def sweep_groups(part) -> Iterator[tuple[tuple, object]]:
    """The case groups of one sweep pass: (what, its grid). A group is one box set on one
    device; a recorded scenario's caps stay together (a larger cap that gives the same box
    set is recorded as skipped, which needs the smaller cap's run)."""
    from . import datasets

    for scenario in part.scenarios:
        recorded = datasets.SCENARIOS[scenario].recordings is not None
        for overlap, recording, canvas in itertools.product(part.overlaps_for(scenario), part.recordings_for(scenario),
                                                            part.canvases_for(scenario)):
            for ns in ([list(part.ns)] if recorded else [[n] for n in part.ns]):
                for device in part.devices:
                    if not part.timers_for(device):
                        continue
                    sub = dataclasses.replace(part, scenarios=[scenario], ns=ns, overlaps=[overlap], devices=[device],
                                              recordings=[recording] if recording else None,
                                              canvases=[canvas] if canvas else ["fixed"], cluster=None)
                    yield (scenario, tuple(ns), overlap, recording, canvas, device), sub


def group_rows(sub, done, error: BaseException, case_rows: Callable, resolve: Callable) -> list[dict]:
    """The rows a group's cases would have given (the runner's ``case_rows``, parameters by
    its ``resolve``), as error rows carrying ``error`` (its task failed on every worker it ran on)."""
    from . import datasets
    from .engine.rounds import error_rows
    from .registry import get
    from .results import case_key

    impls = [get(name) for name in sub.impls]
    params = {impl.name: resolve(impl, sub.params)[0] for impl in impls}
    scenario, overlap, canvas = sub.scenarios[0], sub.overlaps[0], sub.canvases_for(sub.scenarios[0])[0]
    recording = sub.recordings_for(scenario)[0]
    rows = []
    for n in sub.ns:
        base = {"scenario": scenario, "canvas": canvas, "overlap": overlap, "n": n, "seed": sub.seed, "classes": sub.classes}
        if datasets.SCENARIOS[scenario].recordings is not None:
            base |= datasets.real.recording_columns(recording or datasets.real.DEFAULT_RECORDING) | {"n_cap": n}
            try:  # the N a recording gives under this cap names the case
                base |= datasets.generate(scenario, n, overlap=overlap, seed=sub.seed, classes=sub.classes,
                                          recording=recording).meta.get("row", {})
            except Exception:
                pass
        for dtype, iou, impl in itertools.product(sub.dtypes, sub.ious, impls):
            rows += case_rows(impl, sub.devices[0], dtype, iou, sub, base, params[impl.name])
    return list(error_rows([row for row in rows if case_key(row) not in done], RuntimeError(
        f"its case group failed on the cluster: {type(error).__name__}: {error}")))


class ClusterRun:
    """The driver's side of one run on a cluster (:func:`drive` makes it): the client, the
    one writer (``out``, a :class:`Deduplicated`), the resource a GPU task asks for, the
    driver's host gauge. ``stream`` starts the cases' clock on its first call."""

    def __init__(self, client, out: Deduplicated, gpu: Optional[dict], driver_gauge, between_turns: Callable[[], None]):
        self.client, self.out, self.gpu, self.driver_gauge = client, out, gpu, driver_gauge
        self.between_turns = between_turns
        self.started: Optional[float] = None

    def stream(self, jobs: list[Job]) -> Iterator[tuple[Job, object]]:
        if self.started is None:
            self.started = time.perf_counter()
        return stream(self.client, jobs, self.between_turns)

    def cases_s(self) -> float:
        """Seconds from the first task submitted to now (the run's cases)."""
        return round(time.perf_counter() - self.started, 2) if self.started is not None else 0.0


def busy_seconds(stream) -> float:
    """Seconds the workers spent computing tasks, summed over workers (from Dask's
    ``get_task_stream``): against the cases' seconds times the workers, how busy the
    cluster was."""
    return round(sum(part["stop"] - part["start"] for task in stream.data for part in task.get("startstops", ())
                     if part.get("action") == "compute"), 2)


def drive(grid, write: Callable[[dict], None], on_case: Callable[[dict], None], done, between_turns: Callable[[], None],
          gauge_, preload, body: Callable[[ClusterRun], None], warm: Optional[Callable[[], None]] = None) -> dict:
    """What every run on a cluster shares around its own jobs (``body``): the grid checked,
    the run's bookkeeping started, the cluster connected and its workers warmed (``preload``
    imported there, then ``warm()`` run), the cluster released whatever happens; returns the
    run's note, with the cluster's (workers, start-up, the cases' seconds)."""
    from .engine.rounds import finish_run, start_run

    check_grid(grid, reach=False)
    emit, counts, driver_gauge = start_run(grid, write, on_case, gauge_)
    client = connect(grid.cluster, grid.devices)
    try:
        startup = warm_workers(client, grid.cluster, preload, warm)
        run = ClusterRun(client, Deduplicated(emit, done), gpu_resources(client, grid.devices), driver_gauge,
                         between_turns)
        from distributed import get_task_stream

        with get_task_stream(client) as stream:  # every task's compute span on the workers, for busy_seconds
            body(run)
        note = run.out.note(grid.cluster) | startup | {"cases_s": run.cases_s(), "busy_s": busy_seconds(stream)}
    finally:
        release(grid.cluster)
    return finish_run(counts, driver_gauge) | {"cluster": note}


def run_sweep(grid, write: Callable[[dict], None], on_case: Callable[[dict], None] = lambda row: None,
              done=frozenset(), between_turns: Callable[[], None] = lambda: None, gauge_=None, runner: tuple = ()) -> dict:
    """:func:`nmsbench.runner.run_sweep` on ``grid.cluster``: each pass's case groups as
    tasks (the device pass after every other, as locally), rows written as they arrive.
    ``runner``: the runner's (sweep pass, case rows, parameter resolver), given by it (the
    runner imports this module)."""
    sweep_pass, case_rows, resolve = runner
    from .timers import timer_passes

    def body(run: ClusterRun) -> None:
        passes = timer_passes(grid)
        token = uuid.uuid4().hex if len(passes) > 1 else None  # later passes reuse a worker's box sets
        for part in passes:
            jobs = [Job(sweep_group, (sub, done_for(done, scenario=what[0], device=what[-1]), KILL_ONCE, sweep_pass, token),
                        run.gpu if what[-1] == "cuda" else None, (what, sub)) for what, sub in sweep_groups(part)]
            for job, result in run.stream(jobs):
                if isinstance(result, BaseException):
                    run.out.rows(group_rows(job.what[1], run.out.written, result, case_rows, resolve))
                else:
                    run.out.rows(*result)

    return drive(grid, write, on_case, done, between_turns, gauge_, sweep_pass, body)


__all__ = ["ClusterError", "ClusterRun", "INSTALL", "check_grid", "cluster_axis", "connect", "dask_problem", "drive",
           "release", "run_sweep", "spec_problem"]
