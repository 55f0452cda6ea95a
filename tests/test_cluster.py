"""Runs on Dask distributed (``--cluster``): a cluster of 2 local workers gives the rows a
local run gives (case keys, agreement columns, COCO scores), a worker killed mid-run leaves
no case missing and none twice, a file resumes across local and cluster runs, and a bad
``--cluster`` is refused with exit status 2. One cluster serves the module (its start-up
is the slow part); no test asserts a time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

pytest.importorskip("distributed")

from nmsbench import cluster  # noqa: E402
from nmsbench.cli import main  # noqa: E402
from nmsbench.results import case_key, read_results, sidecar_path  # noqa: E402
from nmsbench.runner import Grid, run_sweep  # noqa: E402

SWEEP = ["sweep", "--impl", "torchvision,allpairs,soft_nms", "--scenario", "uniform,chain", "--n", "16,40",
         "--min-run-time", "0.004", "--rounds", "2", "--threads", "1"]
ACCURACY = ["accuracy", "--impl", "torchvision,soft_nms", "--source", "scenes-crowd,scenes-sparse", "--images", "12",
            "--min-run-time", "0.004", "--rounds", "2", "--threads", "1"]
PIPELINE = ["pipeline", "--source", "synthetic,synthetic_yolov8", "--batch", "1,2", "--pipeline", "numpy,torch_batched_nms",
            "--timer", "wall", "--min-run-time", "0.004", "--rounds", "2", "--threads", "1"]
PIPELINE_AGREEMENT = ["status", "candidates", "kept", "ref_kept", "jaccard", "extra", "missing", "mismatched"]
AGREEMENT = ["status", "kept", "ref_kept", "jaccard", "extra", "missing", "mean_max_iou", "greedy_suppressed_frac",
             "family_ref", "family_jaccard", "family_max_diff"]
SCORES = ["status", "ap", "ap50", "ap75", "ar100", "ar100_crowded", "images", "detections", "kept", "n"]


@pytest.fixture(scope="module")
def address():
    """A scheduler with two local worker processes (as ``local:2`` starts them)."""
    spec = cluster.local_cluster(2, [])
    try:
        yield spec.scheduler_address
    finally:
        spec.close()


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0 or result.exit_code == 2, result.output
    return result


def keyed(path, columns) -> pd.DataFrame:
    frame = read_results(path)
    frame.index = [case_key(row) for row in frame.to_dict("records")]
    assert not frame.index.duplicated().any()
    return frame[columns].sort_index()


def same_rows_on_the_cluster(args: list, address: str, tmp_path, columns: list[str]):
    """Runs ``args`` here and on the cluster, asserts ``columns`` equal case by case; the
    cluster run's file."""
    local, remote = tmp_path / "local.csv", tmp_path / "cluster.csv"
    assert run(*args, "--out", local).exit_code == 0
    result = run(*args, "--cluster", address, "--out", remote)
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(keyed(local, columns), keyed(remote, columns))
    return remote


def test_sweep_on_a_cluster_gives_the_local_rows(address, tmp_path):
    remote = same_rows_on_the_cluster(SWEEP, address, tmp_path, AGREEMENT)
    meta = json.loads(sidecar_path(remote).read_text())
    assert meta["grid"]["cluster"] == address
    workers = meta["cluster"][0]["workers"]
    assert workers and {w["address"] for w in workers} <= set(cluster.worker_resources(cluster.connect(address)))
    cluster.release(address)
    assert set(read_results(remote).machine) == {workers[0]["machine"]}


def test_resume_across_local_and_cluster_runs(address, tmp_path):
    whole = tmp_path / "whole.csv"
    assert run(*SWEEP, "--out", whole).exit_code == 0
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    small = [a if a != "16,40" else "16" for a in SWEEP]
    assert run(*small, "--cluster", address, "--out", first).exit_code == 0
    assert run(*SWEEP, "--resume", first).exit_code == 0  # a cluster run resumed here
    assert run(*small, "--out", second).exit_code == 0
    assert run(*SWEEP, "--cluster", address, "--resume", second).exit_code == 0  # a local run resumed on the cluster
    for path in (first, second):
        assert set(keyed(path, ["status"]).index) == set(keyed(whole, ["status"]).index)


def test_a_killed_worker_loses_no_case_and_repeats_none(address, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setattr(cluster, "KILL_ONCE", str(marker))
    grid = Grid(impls=["torchvision", "allpairs"], scenarios=["uniform", "chain"], ns=[16, 24, 32], min_run_time=0.004,
                rounds=2, threads=1, cluster=address)
    rows: list[dict] = []
    run_sweep(grid, rows.append)
    assert marker.exists()  # a task did kill its worker
    keys = [case_key(row) for row in rows]
    assert len(keys) == len(set(keys)) == grid.count()
    assert {row["status"] for row in rows} == {"ok"}  # its group ran again on a worker that lived


def test_accuracy_on_a_cluster_scores_as_one_process(address, tmp_path):
    remote = same_rows_on_the_cluster(ACCURACY, address, tmp_path, SCORES)
    frame = read_results(remote)
    assert (frame.status == "ok").all()
    assert (frame.median_us > 0).all() and (frame.runs >= frame.images).all()  # every image timed, per image
    note = json.loads(sidecar_path(remote).read_text())["cluster"][0]
    assert note["busy_s"] > 0  # the workers' compute spans were recorded (Dask's task stream)


def test_pipeline_on_a_cluster_gives_the_local_rows(address, tmp_path):
    remote = same_rows_on_the_cluster(PIPELINE, address, tmp_path, PIPELINE_AGREEMENT)
    note = json.loads(sidecar_path(remote).read_text())["cluster"][0]
    assert note["workers"] and note["warm_s"] >= 0 and note["task_s"] > 0


def test_image_batches_cover_every_image_once():
    for images in (0, 1, 7, 8, 100, 201):
        for workers in (1, 2, 8):
            ranges = cluster_accuracy_batches(images, workers)
            assert [i for a, b in ranges for i in range(a, b)] == list(range(images))


def cluster_accuracy_batches(images, workers):
    from nmsbench.cluster_accuracy import batches

    return batches(images, workers)


@pytest.mark.parametrize("spec, message", [
    ("local:0", "local:K needs K >= 1"),
    ("somewhere", "neither local:K"),
    ("tcp://host:port", "neither local:K"),
])
def test_a_bad_cluster_is_refused(spec, message, tmp_path):
    result = run(*SWEEP, "--cluster", spec, "--out", tmp_path / "x.csv")
    assert result.exit_code == 2 and message in result.output and "--cluster" in result.output
    assert not (tmp_path / "x.csv").exists()


def test_an_unreachable_scheduler_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1)
    result = run(*ACCURACY, "--cluster", "tcp://127.0.0.1:9", "--out", tmp_path / "x.csv")
    assert result.exit_code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in result.output


def test_without_dask_or_with_a_case_timeout_the_cluster_is_refused(tmp_path, monkeypatch):
    result = run(*SWEEP, "--cluster", "local:2", "--case-timeout", "5", "--out", tmp_path / "x.csv")
    assert result.exit_code == 2 and "leave --case-timeout out with --cluster" in result.output
    monkeypatch.setattr(cluster, "dask_problem", lambda: f"--cluster needs dask.distributed; {cluster.INSTALL}")
    result = run(*SWEEP, "--cluster", "local:2", "--out", tmp_path / "x.csv")
    assert result.exit_code == 2 and '.[cluster]' in result.output


def test_batches_timings_merge_into_a_pass_over_every_image():
    from nmsbench.accuracy_bench import per_image
    from nmsbench.cluster_accuracy import merge_measured
    from nmsbench.engine.rounds import Measured
    from nmsbench.engine.samples import Samples
    from nmsbench.timing import Blocks, summarize

    def measured(rounds, calls):
        blocks = [Blocks(np.asarray(r, dtype=float), calls) for r in rounds]
        return Measured("wall", summarize(blocks, "", len(blocks)), 1, Samples.from_blocks(blocks))

    a = measured([[10.0, 12.0], [11.0, 11.0], [9.0, 13.0]], 2)  # a pass over 3 images, µs
    b = measured([[20.0, 22.0, 30.0], [21.0, 19.0], [25.0, 23.0]], 2)  # over 5 images
    merged = merge_measured([a, b], [3, 5], per_image)
    whole = summarize([Blocks(np.array([30.0, 34.0]), 2), Blocks(np.array([32.0, 30.0]), 2),
                       Blocks(np.array([34.0, 36.0]), 2)], "", 3)
    assert merged["median_us"] == pytest.approx(whole.median_us / 8)
    assert merged["iqr_us"] == pytest.approx(whole.iqr_us / 8)
    assert merged["runs"] == a.timing.runs * 3 + b.timing.runs * 5
    assert merged["_samples"].blocks_us[0] == pytest.approx((30 / 8, 34 / 8))
    assert merge_measured([a], [3], per_image) == per_image(a, 3)


def test_busy_seconds_add_the_compute_spans_of_every_task():
    class Stream:
        data = [{"startstops": ({"action": "compute", "start": 10.0, "stop": 12.5},
                                {"action": "transfer", "start": 9.0, "stop": 10.0})},
                {"startstops": ({"action": "compute", "start": 11.0, "stop": 11.25},)}, {}]

    assert cluster.busy_seconds(Stream()) == 2.75


def test_a_worker_keeps_the_last_sources_it_loaded(monkeypatch):
    """A worker's tasks come from every group at once: it keeps SOURCES_KEPT sources
    loaded (the oldest dropped first), not one that each change of group reloads."""
    from nmsbench import cluster_accuracy
    from nmsbench.accuracy_bench import AccuracyGrid

    loads = []

    class Bench:
        @staticmethod
        def load_source(grid, name):
            loads.append(name)
            return SimpleNamespace(to=lambda device: (name, device))

    monkeypatch.setattr(cluster_accuracy, "_SOURCES", {})
    grid = AccuracyGrid(impls=["torchvision"], images=4)
    names = ["scenes-sparse", "scenes-crowd", "scenes-clustered", "scenes-sparse", "scenes-crowd", "scenes-sparse"]
    got = [cluster_accuracy._source(Bench, grid, name, "cpu") for name in names]
    assert got == [(name, "cpu") for name in names]
    assert loads == ["scenes-sparse", "scenes-crowd", "scenes-clustered"]
    cluster_accuracy._source(Bench, grid, "coco", "cpu")  # a fourth: the oldest goes
    assert loads[-1] == "coco" and len(cluster_accuracy._SOURCES) == cluster_accuracy.SOURCES_KEPT
    assert ("scenes-sparse", "cpu") not in [v for v in cluster_accuracy._SOURCES.values()]


def test_a_group_gets_only_its_written_cases():
    rows = [{"benchmark": "sweep", "impl": "torchvision", "device": d, "scenario": s, "n": n, "timer": "wall"}
            for d in ("cpu", "cuda") for s in ("uniform", "chain") for n in (16, 40)]
    done = {case_key(row) for row in rows}
    mine = cluster.done_for(done, scenario="chain", device="cuda")
    assert mine == {case_key(row) for row in rows if row["scenario"] == "chain" and row["device"] == "cuda"}
    assert cluster.done_for(done, scenario="chain", device="cuda", n=40.0) == {
        case_key(row) for row in rows if (row["scenario"], row["device"], row["n"]) == ("chain", "cuda", 40)}


def test_an_accuracy_workers_start_up_runs_each_cpu_implementation_once(monkeypatch):
    """A worker's start-up for accuracy (cluster_accuracy.warm_task) pays the first calls its
    batches would pay: each implementation of the grid that runs on the CPU, once, on two
    images of the first source with the grid's first IoU and parameter set; one the grid
    names that cannot run here is left to its skipped rows, and a failing one to its cases."""
    from nmsbench import accuracy, cluster_accuracy
    from nmsbench.accuracy_bench import AccuracyGrid, cluster_parts

    calls = []

    def detect(name, source, iou, params=None, max_det=100):
        calls.append((name, len(source.images), source.images[0].boxes.device.type, iou, params))
        if name == "soft_nms":
            raise RuntimeError("a failing first call")

    monkeypatch.setattr(accuracy, "detect", detect)
    monkeypatch.setattr(cluster_accuracy, "_SOURCES", {})
    grid = AccuracyGrid(impls=["torchvision", "soft_nms", "soft_rounds"], sources=["scenes-crowd"], images=4,
                        ious=[0.6, 0.5], params={"kernel": ["gaussian", "linear"]})
    cluster_accuracy.warm_task(cluster_parts(), grid)
    assert calls == [("torchvision", 2, "cpu", 0.6, {}), ("soft_nms", 2, "cpu", 0.6, {"kernel": "gaussian"})]
    assert [key[-1] for key in cluster_accuracy._SOURCES] == ["cpu"]  # the source stays for the first batch
    calls.clear()
    cluster_accuracy.warm_task(cluster_parts(), AccuracyGrid(impls=["torchvision"], devices=["cuda"],
                                                               sources=["scenes-crowd"], images=4))
    assert calls == []  # CUDA batches warm up in their own task, on the GPU worker
